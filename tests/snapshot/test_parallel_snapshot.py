"""Both snapshot kinds against real PostgreSQL while real Debezium captures and a writer
changes the same keys: no READ row overrides a change newer than its read, and a parallel
snapshot killed mid-way resumes from its last whole batch.

Two tables are captured with ``snapshot.mode = no_data`` (the stream starts empty: the
snapshots are the initial load):

* ``items`` (key ``(region, id)``): the parallel snapshot job runs by spark-submit and is
  killed (SIGKILL) once its first batch is staged; then ``CdcSnapshotOperator`` runs it
  again through a real Airflow task (dag.test), which resumes it;
* ``people`` (key ``id``): Debezium's own incremental snapshot, started by a signal row, in
  chunks of 250 rows.

A writer updates, deletes and inserts keys of both tables throughout. One window of the
stream then takes the captured changes (Debezium's READ rows among them) and the staged
batches into the changelog and applies them; both targets must equal their tables as
PostgreSQL has them at the end.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from airflow_cdc.model import Window
from airflow_cdc.pipeline.protocol import StreamConfig, commit_window, plan_window
from airflow_cdc.sources.registry import build_source
from airflow_cdc.state import StateStore
from airflow_cdc.spark_jobs import apply_job
from airflow_cdc.spark_jobs.extract import extract_window

pytestmark = pytest.mark.long  # make test-long (CI runs it); make test keeps the chunk and signal tests

DB = "cdc_parallel_snap"
SLOT = "cdc_parallel_snap_slot"
PREFIX = "psnap"
ROWS = 12_000
PEOPLE = 3_000
NOTIFICATIONS = f"{PREFIX}.notifications"
SIGNAL = ("INSERT INTO debezium_signal VALUES ('people-1', 'execute-snapshot', "
          "'{\"data-collections\": [\"public.people\"], \"type\": \"incremental\"}')")
REGIONS = ("eu", "us", "ap")


def connect(dbname=DB):
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname=dbname)
    conn.autocommit = True
    return conn


def execute(sql, dbname=DB, params=None):
    conn = connect(dbname)
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


class Writer(threading.Thread):
    """Updates, deletes and inserts random keys of every chunk until stopped."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.changes = 0
        self.error = None

    def run(self):
        rng = random.Random(11)
        conn = connect()
        try:
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    region, key = rng.choice(REGIONS), rng.randrange(ROWS // len(REGIONS) + 50)
                    roll = rng.random()
                    if roll < 0.15:
                        cur.execute("UPDATE people SET score = score + 1, name = %s WHERE id = %s",
                                    (f"p{self.changes}", rng.randrange(PEOPLE)))
                    elif roll < 0.2:
                        cur.execute("DELETE FROM people WHERE id = %s", (rng.randrange(PEOPLE),))
                    elif roll < 0.25:
                        cur.execute("INSERT INTO people VALUES (%s, 'new', 0) ON CONFLICT (id) "
                                    "DO UPDATE SET name = 'back'", (rng.randrange(PEOPLE + 100),))
                    elif roll < 0.6:
                        cur.execute("UPDATE items SET note = %s, amount = amount + 1 "
                                    "WHERE region = %s AND id = %s", (f"w{self.changes}", region, key))
                    elif roll < 0.8:
                        cur.execute("DELETE FROM items WHERE region = %s AND id = %s", (region, key))
                    else:
                        cur.execute("INSERT INTO items VALUES (%s, %s, %s, 1.00, now(), now()) "
                                    "ON CONFLICT (region, id) DO UPDATE SET note = excluded.note",
                                    (region, key, f"i{self.changes}"))
                    self.changes += 1
                    time.sleep(0.002)
        except Exception as error:  # reported by the fixture
            self.error = error
        finally:
            conn.close()


def wait_for(check, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise TimeoutError(what)


def newest_heartbeat_ms(sink: Path) -> int:
    newest = 0
    for path in sink.glob(f"topics/__debezium-heartbeat.{PREFIX}/partition=0/*.json"):
        for line in path.read_text().splitlines():
            value = json.loads(line)
            value = value.get("payload", value)
            newest = max(newest, int(value["ts_ms"]))
    return newest


def notified(sink: Path, kind: str) -> bool:
    for path in sink.glob(f"topics/{NOTIFICATIONS}/partition=0/*.json"):
        for line in path.read_text().splitlines():
            value = json.loads(line)
            value = value.get("payload", value)
            if value.get("aggregate_type") == "Incremental Snapshot" and value.get("type") == kind:
                return True
    return False


def kill_after_first_batch(operator, staging: Path) -> dict:
    """Run the snapshot job by spark-submit and SIGKILL it once its first batch is whole."""
    from airflow_cdc.spark.runners import LocalSparkRunner

    job, _, _ = operator.prepare("items-1")
    runner = LocalSparkRunner(master="local[2]")
    process = subprocess.Popen(runner.command(job), env=runner.environment(job),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: any(staging.glob("batch=*/_BATCH.json")) or process.poll() is not None,
                 300, "the first staged batch")
    finally:
        process.kill()
        process.wait()
    return {"batches": sorted(p.parent.name for p in staging.glob("batch=*/_BATCH.json")),
            "complete": (staging / "_COMPLETE.json").exists()}


DAG_FILE = """
import os
from datetime import datetime, timezone

from airflow.sdk import DAG

from airflow_cdc.operators.snapshot import CdcSnapshotOperator
from airflow_cdc.pipeline.protocol import StreamConfig

stream = StreamConfig.for_source("debezium", "psnap", {
    "prefix": os.environ["CDC_PSNAP_SINK"], "topic_prefix": "psnap",
    "key_columns": {"public.items": ["region", "id"]},
}, namespace="psnap", work_root=os.environ["CDC_PSNAP_WORK"])

with DAG("psnap_snapshot", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
    CdcSnapshotOperator(task_id="snapshot", stream=stream, table="public.items",
                        conn_id="psnap_db", snapshot_id="items-1", chunk_size=1_500,
                        chunks_per_batch=3, watermark_timeout=120)
"""


def snapshot_dag(base: Path, sink: Path):
    """The DAG above, parsed from a DAG bundle of its own (dag.test runs serialized DAGs)."""
    from airflow.dag_processing.dagbag import DagBag

    bundle = base / "dags"
    bundle.mkdir()
    (bundle / "psnap_snapshot.py").write_text(DAG_FILE)
    local = "airflow.dag_processing.bundles.local.LocalDagBundle"
    os.environ.update({
        "CDC_PSNAP_SINK": str(sink), "CDC_PSNAP_WORK": str(base / "work"),
        "AIRFLOW_CONN_PSNAP_DB": f"postgresql://postgres@127.0.0.1:5432/{DB}",
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps([
            {"name": "dags-folder", "classpath": local, "kwargs": {}},
            {"name": "psnap-tests", "classpath": local, "kwargs": {"path": str(bundle)}},
        ]),
    })
    bag = DagBag(str(bundle))
    assert not bag.import_errors, bag.import_errors
    return bag.dags["psnap_snapshot"]


@pytest.fixture(scope="module")
def snapshot_run(spark, airflow_db, tmp_path_factory):
    base = tmp_path_factory.mktemp("parallel_snapshot")
    sink = base / "sink"
    drop_everything()
    execute(f"CREATE DATABASE {DB}", "postgres")
    execute(f"""
        CREATE TABLE items (region text NOT NULL, id int NOT NULL, note text,
                            amount numeric(10,2) NOT NULL, updated timestamptz,
                            local_at timestamp, PRIMARY KEY (region, id));
        INSERT INTO items SELECT r, g, 'n' || g, g / 100.0, now(), '2025-03-30 02:30:00.123456'
            FROM unnest(ARRAY{list(REGIONS)}) r, generate_series(0, {ROWS // len(REGIONS) - 1}) g;
        CREATE TABLE people (id int PRIMARY KEY, name text NOT NULL, score int NOT NULL);
        INSERT INTO people SELECT g, 'person ' || g, g FROM generate_series(0, {PEOPLE - 1}) g;
        CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL,
                                      data varchar(2048));
    """)
    config_path = base / "capture.json"
    config_path.write_text(json.dumps({
        "output": str(sink), "flush_size": 200, "rotate_interval_ms": 300,
        "connector": {
            "name": "cdc-psnap-test", "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": "pgoutput", "database.hostname": "127.0.0.1", "database.port": 5432,
            "database.user": "postgres", "database.dbname": DB, "topic.prefix": PREFIX,
            "table.include.list": "public.items,public.people,public.debezium_signal",
            "slot.name": SLOT, "publication.name": "cdc_psnap_pub",
            "publication.autocreate.mode": "filtered", "heartbeat.interval.ms": 300,
            "snapshot.mode": "no_data", "signal.data.collection": "public.debezium_signal",
            "incremental.snapshot.chunk.size": 250,
            "notification.enabled.channels": "sink", "notification.sink.topic.name": NOTIFICATIONS,
        },
    }))
    writer = Writer()
    saved = dict(os.environ)
    dag = snapshot_dag(base, sink)
    staging = sink / "snapshots" / "items-1"
    capture = subprocess.Popen(
        [sys.executable, "-m", "airflow_cdc.cli", "capture", "debezium", "--config",
         str(config_path), "--max-seconds", "400"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: newest_heartbeat_ms(sink) > 0, 120, "the capture's first heartbeat")
        writer.start()
        execute(SIGNAL)  # Debezium's incremental snapshot of people, beside the parallel one
        killed = kill_after_first_batch(dag.get_task("snapshot"), staging)
        run = dag.test()
        wait_for(lambda: notified(sink, "COMPLETED"), 120,
                 "Debezium's incremental snapshot of people to complete")
        writer.stop.set()
        writer.join()
        assert writer.error is None, writer.error
        done_at = int(time.time() * 1000)
        wait_for(lambda: newest_heartbeat_ms(sink) > done_at + 1500, 120,
                 "a heartbeat after the writer stopped")
    finally:
        writer.stop.set()
        capture.terminate()
        capture.wait(timeout=60)
        os.environ.clear()
        os.environ.update(saved)
    summary = json.loads((base / "work" / "psnap" / "snapshots" / "items-1" / "result.json").read_text())
    yield {"base": base, "sink": sink, "summary": summary, "writer_changes": writer.changes,
           "killed": killed, "run": run}
    drop_everything()


@pytest.fixture(scope="module")
def applied(snapshot_run, spark):
    base, sink = snapshot_run["base"], snapshot_run["sink"]
    stream_id = f"psnap_{uuid.uuid4().hex[:8]}"
    store = StateStore(f"sqlite:///{base / 'state.db'}")
    store.migrate()
    config = StreamConfig.for_source("debezium", stream_id, {
        "prefix": str(sink), "topic_prefix": PREFIX,
        "key_columns": {"public.items": ["region", "id"], "public.people": ["id"]},
        "signal_table": "public.debezium_signal", "notification_topic": NOTIFICATIONS,
        "settings": {"flush_lateness_seconds": 1},
    }, namespace=stream_id, work_root=str(base / "work"))
    window = Window(stream_id, datetime.now(timezone.utc) - timedelta(hours=1),
                    datetime.now(timezone.utc))
    source = build_source(config.source_spec)
    found = source.discover(window, datetime.now(timezone.utc), None)
    plan = plan_window(store, config, window, "run", 600, source.initial_positions(window),
                       "lake", new_partitions=found.partitions,
                       plan_options=lambda kept, positions: source.plan_options(
                           kept, datetime.now(timezone.utc), None, positions))
    extracted = extract_window(spark, plan, str(config.outcome_path(window)))
    store.mark_extracted(window, "run", extracted["snapshot_id"])
    commit_window(store, config, window, "run")
    job = base / "apply.json"
    job.write_text(json.dumps({
        "catalog": "lake", "stream": stream_id, "window_id": window.window_id,
        "changelog_table": config.changelog_table, "targets": {"namespace": f"{stream_id}_t"},
    }))
    if apply_job.main(["--job-config", str(job)], spark=spark) != 0:
        reasons = spark.sql(f"SELECT reason, count(*) n FROM lake.{stream_id}_t.{stream_id}_dead_letters "
                            f"GROUP BY reason ORDER BY n DESC LIMIT 5").collect()
        pytest.fail(f"apply failed: {[(r.reason[:300], r.n) for r in reasons]}")
    return {"stream_id": stream_id, "store": store, "window": window, "extracted": extracted,
            "target": f"lake.{stream_id}_t.public_items", "changelog": config.changelog_table,
            "people": f"lake.{stream_id}_t.public_people"}


def test_a_snapshot_killed_after_its_first_batch_resumes_from_the_next_chunk(snapshot_run):
    assert snapshot_run["killed"] == {"batches": ["batch=000001"], "complete": False}
    assert snapshot_run["run"].state == "success"  # CdcSnapshotOperator, a real Airflow task
    summary = snapshot_run["summary"]
    assert summary["chunks_resumed"] == 3 and summary["batches_staged"] == 2


def test_every_chunk_is_staged_once_in_batches_with_a_marker(snapshot_run):
    assert snapshot_run["summary"]["chunks"] == 8
    markers = sorted((snapshot_run["sink"] / "snapshots" / "items-1").glob("batch=*/_BATCH.json"))
    assert [json.loads(m.read_text())["chunks"] for m in markers] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert (snapshot_run["sink"] / "snapshots" / "items-1" / "_COMPLETE.json").exists()


def test_keys_changed_between_a_batch_watermarks_are_counted_in_its_marker(snapshot_run):
    markers = [json.loads(m.read_text()) for m in
               (snapshot_run["sink"] / "snapshots" / "items-1").glob("batch=*/_BATCH.json")]
    assert snapshot_run["writer_changes"] > 100
    # The writer hit keys while their chunks were read. Their READ rows stay under the changes
    # (the target equals the table: test_target_equals_the_table_after_concurrent_changes...).
    assert sum(m["keys_changed_during_read"] for m in markers) > 0


def test_target_equals_the_table_after_concurrent_changes_during_the_snapshot(applied, spark):
    # Instants compared as microseconds since the epoch (Spark hands out naive datetimes).
    expected = {(r, i): (n, a, u, t) for r, i, n, a, u, t in execute(
        "SELECT region, id, note, amount, (extract(epoch FROM updated) * 1000000)::bigint, "
        "local_at FROM items")}
    target = {(row.region, row.id): (row.note, row.amount, row.u, row.local_at)
              for row in spark.sql(f"SELECT region, id, note, amount, unix_micros(updated) u, "
                                   f"local_at FROM {applied['target']}").collect()}
    missing = sorted(set(expected) - set(target))[:5]
    extra = sorted(set(target) - set(expected))[:5]
    differ = sorted(k for k in expected.keys() & target.keys() if expected[k] != target[k])[:5]
    history = []
    if differ:
        region, key = differ[0]
        history = [(r.op, r.ordering_key.hex(), r.new_values, r.source_metadata_json)
                   for r in spark.sql(
                       f"SELECT * FROM lake.{applied['changelog']} WHERE keys['region'] = '{region}' "
                       f"AND keys['id'] = '{key}' ORDER BY ordering_key").collect()]
    assert (missing, extra, differ) == ([], [], []), (
        missing, extra, [(k, expected[k], target[k]) for k in differ], history)
    assert len(target) == len(expected) and all(isinstance(v[1], Decimal) for v in target.values())


def test_the_window_that_takes_the_last_batch_finishes_the_snapshot_partition(applied):
    partitions = applied["store"].list_partitions(applied["stream_id"])
    snapshot = [p for p in partitions if p.partition_id == "snapshot:items-1"]
    assert len(snapshot) == 1 and snapshot[0].state.value == "FINISHED"
    assert applied["extracted"]["counts"]["snapshot_batches"] == 3


def test_debezium_incremental_snapshot_rows_never_override_newer_changes(applied, spark):
    expected = {i: (n, sc) for i, n, sc in execute("SELECT id, name, score FROM people")}
    target = {row.id: (row.name, row.score) for row in spark.table(applied["people"]).collect()}
    differ = sorted(k for k in expected.keys() & target.keys() if expected[k] != target[k])[:5]
    assert (sorted(set(expected) - set(target))[:5], sorted(set(target) - set(expected))[:5],
            differ) == ([], [], [])


def test_the_window_summary_reports_debezium_snapshot_of_people_completed(applied):
    counts = applied["extracted"]["counts"]
    people = counts["incremental_snapshots"]["public.people"]
    assert people["status"] == "completed" and people["chunks"] >= PEOPLE // 250
    assert counts["incremental_snapshot_rows"] > 0 and counts["signal_events"] > 0
