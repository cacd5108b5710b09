"""What the snapshot tests of a TOASTed table share (issue 64): the table, a writer that
updates its plain column during a snapshot, the capture's heartbeats, and one window's
extract and apply compared with the table.

``docs (id int PRIMARY KEY, n int, body text)`` keeps ``REPLICA IDENTITY DEFAULT``, and each
body is 320 md5 texts (10 KB that do not compress), so PostgreSQL stores it out of line
(TOASTed) and leaves it out of the WAL record of an update that does not change it: Debezium
then writes its unavailable-value placeholder, and the update is a partial image.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path


def execute(sql, dbname, params=None):
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname=dbname)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else None
    finally:
        conn.close()


def drop_database(db: str, slot: str) -> None:
    execute(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            f"WHERE slot_name = '{slot}' AND NOT active", "postgres")
    execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)", "postgres")


def create_docs(db: str, keys: int, extra_sql: str = "") -> None:
    """A new database ``db`` holding ``docs`` with ``keys`` rows (ids 0 .. keys-1, n = 0)."""
    execute(f"CREATE DATABASE {db}", "postgres")
    execute(f"""
        CREATE TABLE docs (id int PRIMARY KEY, n int NOT NULL, body text NOT NULL);
        INSERT INTO docs SELECT g, 0, (SELECT string_agg(md5(g::text || '/' || i::text), '')
                                       FROM generate_series(1, 320) i)
            FROM generate_series(0, {keys - 1}) g;
        {extra_sql}
    """, db)


def wait_for(check, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise TimeoutError(what)


def topic_values(sink: Path, topic: str) -> list[dict]:
    """The payloads of a topic in the sink layout (schemas on or off; tombstones left out)."""
    values = []
    for path in sorted(sink.glob(f"topics/{topic}/partition=0/*.json")):
        for line in path.read_text().splitlines():
            if line != "null":
                value = json.loads(line)
                values.append(value.get("payload", value))
    return values


def newest_heartbeat_ms(sink: Path, prefix: str) -> int:
    return max((int(v["ts_ms"]) for v in topic_values(sink, f"__debezium-heartbeat.{prefix}")), default=0)


def wait_for_heartbeat_after(sink: Path, prefix: str, millis: int, timeout: float = 120) -> None:
    """Until the capture has streamed past ``millis`` (epoch ms): every change before it is in the sink."""
    wait_for(lambda: newest_heartbeat_ms(sink, prefix) > millis, timeout,
             f"a heartbeat of {prefix} after {millis}")


class Writer(threading.Thread):
    """Updates the plain column ``n`` of random keys of ``docs`` about ``per_second`` times a
    second (the body stays, so each update is a partial image)."""

    def __init__(self, db: str, keys: int, per_second: float = 60):
        super().__init__(daemon=True)
        self.db, self.keys, self.pause = db, keys, 1 / per_second
        self.stop = threading.Event()
        self.updates = 0
        self.error = None

    def run(self):
        import psycopg2

        rng = random.Random(64)
        conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname=self.db)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    cur.execute("UPDATE docs SET n = n + 1 WHERE id = %s", (rng.randrange(self.keys),))
                    self.updates += 1
                    time.sleep(self.pause)
        except Exception as error:  # reported by the caller
            self.error = error
        finally:
            conn.close()

    def finish(self) -> None:
        self.stop.set()
        self.join()
        assert self.error is None, self.error


def apply_one_window(spark, base: Path, sink: Path, prefix: str, **source: object) -> dict:
    """One window over everything in ``sink`` (the hour before now), extracted, committed and
    applied as the pipeline does it; ``source`` adds Debezium source settings (e.g.
    ``signal_table``, ``notification_topic``). Returns the apply's exit code, the dead
    letters' reasons with their counts, and the changelog and target tables."""
    from airflow_cdc.model import Window
    from airflow_cdc.pipeline.protocol import StreamConfig, commit_window, plan_window
    from airflow_cdc.sources.registry import build_source
    from airflow_cdc.state import StateStore
    from airflow_cdc.spark_jobs import apply_job
    from airflow_cdc.spark_jobs.extract import extract_window

    stream_id = f"{prefix}_{uuid.uuid4().hex[:8]}"
    store = StateStore(f"sqlite:///{base / 'state.db'}")
    store.migrate()
    config = StreamConfig.for_source("debezium", stream_id, {
        "prefix": str(sink), "topic_prefix": prefix, "key_columns": {"public.docs": ["id"]},
        "settings": {"flush_lateness_seconds": 1}, **source,
    }, namespace=stream_id, work_root=str(base / "work"))
    now = datetime.now(timezone.utc)
    window = Window(stream_id, now - timedelta(hours=1), now)
    reader = build_source(config.source_spec)
    found = reader.discover(window, now, None)
    plan = plan_window(store, config, window, "run", 600, reader.initial_positions(window),
                       "lake", new_partitions=found.partitions,
                       plan_options=lambda kept, positions: reader.plan_options(kept, now, None, positions))
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


def differences(spark, db: str, target: str) -> tuple[list, list, list]:
    """Keys the table has and the target lacks, keys only the target has, and keys whose
    ``n`` or body differ (the first five of each): all empty when the target equals the table."""
    expected = {i: (n, md5) for i, n, md5 in execute("SELECT id, n, md5(body) FROM docs", db)}
    actual = {r.id: (r.n, r.md5) for r in spark.sql(f"SELECT id, n, md5(body) md5 FROM {target}").collect()}
    differ = sorted(k for k in expected.keys() & actual.keys() if expected[k] != actual[k])[:5]
    return sorted(set(expected) - set(actual))[:5], sorted(set(actual) - set(expected))[:5], differ
