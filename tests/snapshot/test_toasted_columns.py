"""A parallel snapshot of a table with a TOASTed column while its keys are updated (issue 64):
the target equals the table.

PostgreSQL with ``REPLICA IDENTITY DEFAULT`` leaves an unchanged TOASTed value out of an
update's WAL record, so Debezium writes its unavailable-value placeholder and each update
is a partial image (the body left out). A key updated while its batch was read then has only
partial changes after its READ row: the READ row must stay under them (at the batch's low
watermark), or the key has no row for the partial images to patch.

Real PostgreSQL, real Debezium (the ``airflow-cdc capture`` process), the snapshot job on the
suite's SparkSession, then one window's extract and apply. 120 keys with 10 KB bodies, a
writer updating a plain column about 60 times a second for the length of the snapshot.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc.model import Window
from airflow_cdc.pipeline.protocol import StreamConfig, commit_window, plan_window
from airflow_cdc.sources.registry import build_source
from airflow_cdc.state import StateStore
from spark_jobs import apply_job
from spark_jobs.extract import extract_window
from spark_jobs.snapshot import SnapshotSpec, run_snapshot

# A capture, a snapshot job and a window: minutes on the shared two cores. The rule it proves
# (a READ row kept under the partial images after it) is in make test as
# tests/snapshot/test_read_under_partial_images.py.
pytestmark = pytest.mark.long

DB = "cdc_toast_snap"
SLOT = "cdc_toast_snap_slot"
PREFIX = "tsnap"
KEYS = 120


def execute(sql, dbname=DB, params=None):
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname=dbname)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else None
    finally:
        conn.close()


def drop_everything():
    execute(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            f"WHERE slot_name = '{SLOT}' AND NOT active", "postgres")
    execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", "postgres")


def wait_for(check, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise TimeoutError(what)


def newest_heartbeat_ms(sink) -> int:
    newest = 0
    for path in sink.glob(f"topics/__debezium-heartbeat.{PREFIX}/partition=0/*.json"):
        for line in path.read_text().splitlines():
            value = json.loads(line)
            newest = max(newest, int(value.get("payload", value)["ts_ms"]))
    return newest


class Writer(threading.Thread):
    """Updates the plain column ``n`` of random keys (the body stays: a partial image each)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.updates = 0
        self.error = None

    def run(self):
        import psycopg2

        rng = random.Random(64)
        conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname=DB)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    cur.execute("UPDATE docs SET n = n + 1 WHERE id = %s", (rng.randrange(KEYS),))
                    self.updates += 1
                    time.sleep(1 / 60)
        except Exception as error:  # reported by the fixture
            self.error = error
        finally:
            conn.close()


@pytest.fixture(scope="module")
def snapshotted(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("toast_snapshot")
    sink = base / "sink"
    drop_everything()
    execute(f"CREATE DATABASE {DB}", "postgres")
    # md5 texts do not compress: each body is stored out of line (TOASTed).
    execute(f"""
        CREATE TABLE docs (id int PRIMARY KEY, n int NOT NULL, body text NOT NULL);
        INSERT INTO docs SELECT g, 0, (SELECT string_agg(md5(g::text || '/' || i::text), '')
                                       FROM generate_series(1, 320) i)
            FROM generate_series(0, {KEYS - 1}) g;
    """)
    config_path = base / "capture.json"
    config_path.write_text(json.dumps({
        "output": str(sink), "flush_size": 100, "rotate_interval_ms": 200,
        "connector": {
            "name": "cdc-tsnap-test", "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": "pgoutput", "database.hostname": "127.0.0.1", "database.port": 5432,
            "database.user": "postgres", "database.dbname": DB, "topic.prefix": PREFIX,
            "table.include.list": "public.docs", "slot.name": SLOT,
            "publication.name": "cdc_tsnap_pub", "publication.autocreate.mode": "filtered",
            "heartbeat.interval.ms": 300, "snapshot.mode": "no_data",
        },
    }))
    spec = SnapshotSpec(
        snapshot_id="docs-1", stream_id="tsnap", source_table="public.docs", dialect="postgresql",
        host="127.0.0.1", port=5432, database=DB, user="postgres",
        sink={"prefix": str(sink), "topic_prefix": PREFIX}, chunk_size=30, chunks_per_batch=2,
        watermark_timeout_seconds=120, poll_seconds=0.2)
    writer = Writer()
    capture = subprocess.Popen(
        [sys.executable, "-m", "airflow_cdc.cli", "capture", "debezium", "--config",
         str(config_path), "--max-seconds", "300"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: newest_heartbeat_ms(sink) > 0, 120, "the capture's first heartbeat")
        writer.start()
        summary = run_snapshot(spark, spec)
        writer.stop.set()
        writer.join()
        assert writer.error is None, writer.error
        done_at = int(time.time() * 1000)
        wait_for(lambda: newest_heartbeat_ms(sink) > done_at + 1000, 120,
                 "a heartbeat after the writer stopped")
    finally:
        writer.stop.set()
        capture.terminate()
        capture.wait(timeout=60)
    yield {"base": base, "sink": sink, "summary": summary, "updates": writer.updates}
    drop_everything()


@pytest.fixture(scope="module")
def applied(snapshotted, spark):
    base, sink = snapshotted["base"], snapshotted["sink"]
    stream_id = f"tsnap_{uuid.uuid4().hex[:8]}"
    store = StateStore(f"sqlite:///{base / 'state.db'}")
    store.migrate()
    config = StreamConfig.for_source("debezium", stream_id, {
        "prefix": str(sink), "topic_prefix": PREFIX, "key_columns": {"public.docs": ["id"]},
        "settings": {"flush_lateness_seconds": 1},
    }, namespace=stream_id, work_root=str(base / "work"))
    now = datetime.now(timezone.utc)
    window = Window(stream_id, now - timedelta(hours=1), now)
    source = build_source(config.source_spec)
    found = source.discover(window, now, None)
    plan = plan_window(store, config, window, "run", 600, source.initial_positions(window),
                       "lake", new_partitions=found.partitions,
                       plan_options=lambda kept, positions: source.plan_options(kept, now, None, positions))
    extracted = extract_window(spark, plan, str(config.outcome_path(window)))
    store.mark_extracted(window, "run", extracted["snapshot_id"])
    commit_window(store, config, window, "run")
    job = base / "apply.json"
    job.write_text(json.dumps({
        "catalog": "lake", "stream": stream_id, "window_id": window.window_id,
        "changelog_table": config.changelog_table, "targets": {"namespace": f"{stream_id}_t"},
    }))
    outcome = apply_job.main(["--job-config", str(job)], spark=spark)
    reasons = []
    if outcome != 0:
        reasons = [(r.reason[:160], r.n) for r in spark.sql(
            f"SELECT reason, count(*) n FROM lake.{stream_id}_t.{stream_id}_dead_letters "
            f"GROUP BY reason").collect()]
    return {"outcome": outcome, "reasons": reasons, "changelog": f"lake.{config.changelog_table}",
            "target": f"lake.{stream_id}_t.public_docs"}


def test_keys_updated_while_their_batch_was_read_were_updated_by_partial_images(snapshotted, applied, spark):
    # The case the next test is about: updates between a batch's watermarks, each one
    # leaving the TOASTed body out.
    assert snapshotted["summary"]["keys_changed_during_reads"] > 0
    images = {r.image for r in spark.sql(
        f"SELECT DISTINCT image FROM {applied['changelog']} WHERE op = 'UPDATE'").collect()}
    assert images == {"PARTIAL"}


def test_target_equals_a_table_whose_toasted_rows_were_updated_during_the_parallel_snapshot(applied, spark):
    assert (applied["outcome"], applied["reasons"]) == (0, [])
    expected = {i: (n, md5) for i, n, md5 in execute("SELECT id, n, md5(body) FROM docs")}
    target = {r.id: (r.n, r.md5) for r in spark.sql(
        f"SELECT id, n, md5(body) md5 FROM {applied['target']}").collect()}
    differ = sorted(k for k in expected.keys() & target.keys() if expected[k] != target[k])[:5]
    assert (sorted(set(expected) - set(target))[:5], sorted(set(target) - set(expected))[:5],
            differ) == ([], [], [])
