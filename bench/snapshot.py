"""Benchmark of the parallel snapshot job against one JDBC query and Debezium's own incremental
snapshot, all three reading the same PostgreSQL table in one run.

    .venv/bin/python bench/snapshot.py [--rows 1000000] [--chunk-size 250000] [--chunks-per-batch 2]

Set-up (not timed): a throwaway database on 127.0.0.1 with ``public.items`` of ``--rows`` rows
from generate_series (primary key (region text, id bigint); note text, amount numeric(12,2),
updated timestamptz, quantity int), vacuumed so no reader pays for hint bits; Debezium's
signaling table; a Debezium capture (``airflow-cdc capture debezium``, its own process,
``snapshot.mode=no_data``, heap ``-Xmx2g`` like the Spark driver) streaming into a sink folder;
a local SparkSession built like the test suite's (local[2], Hadoop Iceberg catalog, the JDBC
drivers). Both paths that run in Spark first run once on a small warm-up table, so neither
timing pays for the JVM's compilation of the other's code.

Timed, one after the other, so they never share the 2 cores:

1. ``parallel``: ``run_snapshot`` (``spark_jobs/snapshot.py``) from its call to its return:
   chunk plan, then per batch of chunks a low watermark, the JDBC read, a high watermark, the
   wait until the capture has put both into the sink, the READ change rows written as Parquet.
   Its steps are timed by wrapping the job module's functions (the job is not changed).
2. ``single_query``: one ``spark.read.jdbc(url, table)`` (one task), the same READ change rows
   (``airflow_cdc.spark_jobs.snapshot_rows.read_rows``) written as Parquet and counted back: the parallel
   job's work without chunks, batches or watermarks.
3. ``debezium``: an incremental ``execute-snapshot`` signal into the signaling table, with
   Debezium's default ``incremental.snapshot.chunk.size`` (1024), from the insert until the
   COMPLETED notification is in the sink's files; its rows are the READ events with
   ``source.snapshot = incremental`` in the table's topic.

The chunk settings: one chunk per core per batch (``--chunks-per-batch 2``), and 250,000 rows
per chunk, the fastest of the settings tried on 1M rows (docs/performance.md): every batch
costs a watermark wait (a poll second plus a file rotation) and about eight Spark jobs whatever
its size, so fewer batches win.

Detail lines go to stderr; stdout gets exactly one line:
``bench snapshot: rows=<n> parallel_per_s=<r> single_query_per_s=<r> debezium_per_s=<r>
vs_single=<r> vs_debezium=<r>`` (each rate from the rows that path read). The database, the
replication slot and the temporary folder are removed at the end, also on failure or SIGTERM.
Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from airflow_cdc.capture.layout import parse_file_name, read_lines  # noqa: E402

DB = "cdc_bench_snapshot"
SLOT = "cdc_bench_snapshot_slot"
PREFIX = "bsnap"
TABLE = "public.items"
WARM_TABLE = "public.items_warm"
SIGNAL_TABLE = "public.debezium_signal"
NOTIFICATIONS = f"{PREFIX}.notifications"
REGIONS = ("af", "ap", "eu", "me", "na", "oc", "sa", "us")
# Files close after this long: the watermark wait of every batch and the moment Debezium's
# COMPLETED notification becomes visible both depend on it (the capture's default is 10 s).
ROTATE_MS = 1000
CAPTURE_HEAP = "2g"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-size", type=int, default=250_000, help="rows per chunk (default 250000)")
    parser.add_argument("--chunks-per-batch", type=int, default=2,
                        help="chunks read between one pair of watermarks (default 2: one per core)")
    parser.add_argument("--warmup-rows", type=int, default=20_000)
    parser.add_argument("--debezium-timeout", type=float, default=3600.0,
                        help="seconds to wait for Debezium's COMPLETED notification (default 3600)")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.chunk_size < 1 or args.chunks_per_batch < 1 or args.warmup_rows < 1:
        parser.error("--rows, --chunk-size, --chunks-per-batch and --warmup-rows must be at least 1")
    return args


def detail(text: str) -> None:
    print(f"bench snapshot: {text}", file=sys.stderr, flush=True)


# --- PostgreSQL -------------------------------------------------------------------------------
def connect(dbname: str = DB):
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname=dbname)
    conn.autocommit = True
    return conn


def execute(sql: str, dbname: str = DB, params=None):
    conn = connect(dbname)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else None
    finally:
        conn.close()


def create_database(rows: int, warmup_rows: int) -> None:
    """The database with the table, the warm-up table and the signaling table (not timed)."""
    level = execute("SHOW wal_level", "postgres")[0][0]
    if level != "logical":
        raise SystemExit(f"PostgreSQL runs with wal_level={level}; Debezium needs logical: run .ci/ensure-postgres")
    drop_database()
    execute(f"CREATE DATABASE {DB}", "postgres")
    regions = "ARRAY[" + ", ".join(f"'{r}'" for r in REGIONS) + "]"
    for table, count in ((TABLE, rows), (WARM_TABLE, warmup_rows)):
        execute(f"""
            CREATE TABLE {table} (region text NOT NULL, id bigint NOT NULL, note text,
                                  amount numeric(12,2) NOT NULL, updated timestamptz NOT NULL,
                                  quantity int NOT NULL, PRIMARY KEY (region, id));
            INSERT INTO {table}
                SELECT ({regions})[1 + g % {len(REGIONS)}], g, 'note ' || g, (g % 1000000) / 100.0,
                       timestamptz '2025-01-01 00:00:00+00' + g * interval '1 second', g % 1000
                FROM generate_series(1, {count}) g;
        """)
        execute(f"VACUUM (FREEZE, ANALYZE) {table}")
    execute(f"CREATE TABLE {SIGNAL_TABLE} (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, "
            f"data varchar(2048))")


def drop_slot(timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        found = execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", "postgres", (SLOT,))
        if not found:
            return
        if not found[0][0]:
            execute("SELECT pg_drop_replication_slot(%s)", "postgres", (SLOT,))
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"replication slot {SLOT} stays active: is a capture of this benchmark still running?")
        time.sleep(0.5)


def drop_database() -> None:
    drop_slot()
    execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", "postgres")


# --- the capture ------------------------------------------------------------------------------
def start_capture(base: Path, sink: Path) -> subprocess.Popen:
    config = base / "capture.json"
    config.write_text(json.dumps({
        "output": str(sink), "rotate_interval_ms": ROTATE_MS, "jvm_options": [f"-Xmx{CAPTURE_HEAP}"],
        "connector": {
            "name": "cdc-bench-snapshot", "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": "pgoutput", "database.hostname": "127.0.0.1", "database.port": 5432,
            "database.user": "postgres", "database.dbname": DB, "topic.prefix": PREFIX,
            "table.include.list": TABLE, "slot.name": SLOT,
            "publication.name": "cdc_bench_snapshot_pub", "publication.autocreate.mode": "filtered",
            "snapshot.mode": "no_data", "heartbeat.interval.ms": 1000,
            "signal.data.collection": SIGNAL_TABLE,
            "notification.enabled.channels": "sink", "notification.sink.topic.name": NOTIFICATIONS,
        },
    }))
    stderr = base / "capture.stderr"
    with open(stderr, "w") as handle:
        capture = subprocess.Popen(
            [sys.executable, "-m", "airflow_cdc.cli", "capture", "debezium", "--config", str(config),
             "--max-seconds", "86400"],
            stdout=subprocess.DEVNULL, stderr=handle)
    deadline = time.monotonic() + 180
    while not topic_files(sink, f"__debezium-heartbeat.{PREFIX}"):
        problem = None
        if capture.poll() is not None:
            problem = f"the capture ended ({capture.returncode}): {stderr.read_text()[-2000:]}"
        elif time.monotonic() > deadline:
            problem = f"the capture sent no heartbeat within 180 s: {stderr.read_text()[-2000:]}"
        if problem:
            stop_capture(capture)
            raise RuntimeError(problem)
        time.sleep(0.5)
    return capture


def stop_capture(capture: subprocess.Popen) -> None:
    if capture.poll() is None:
        capture.send_signal(signal.SIGINT)
        try:
            capture.wait(timeout=60)
        except subprocess.TimeoutExpired:
            capture.kill()
            capture.wait()


def peak_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def topic_files(sink: Path, topic: str) -> list[Path]:
    """The topic's closed files in offset order."""
    folder = sink / "topics" / topic / "partition=0"
    if not folder.is_dir():
        return []
    named = [(parse_file_name(f.name), f) for f in folder.iterdir()]
    return [f for parsed, f in sorted((p, f) for p, f in named if p)]


# --- 1. the parallel snapshot job -------------------------------------------------------------
@contextmanager
def step_clock(phases: dict):
    """Seconds the job spends in its steps, summed over batches, into ``phases``: the plan,
    the read (low watermark to high watermark: JDBC fetch into the cache), the watermark wait,
    and the rest of a batch (READ rows, the Parquet write, its count, the marker)."""
    import airflow_cdc.spark_jobs.snapshot as job

    originals = {name: getattr(job, name) for name in ("load_or_plan", "emit", "wait_for_watermarks")}
    marks = {"after_wait": None}

    def load_or_plan(*args, **kwargs):
        started = time.perf_counter()
        try:
            return originals["load_or_plan"](*args, **kwargs)
        finally:
            phases["plan"] += time.perf_counter() - started

    def emit(conn, spec, watermark):
        now = time.perf_counter()
        if watermark.kind == "low":
            if marks["after_wait"] is not None:
                phases["write"] += now - marks["after_wait"]
                marks["after_wait"] = None
            marks["low"] = now
        else:
            phases["read"] += now - marks["low"]
        originals["emit"](conn, spec, watermark)

    def wait_for_watermarks(*args, **kwargs):
        started = time.perf_counter()
        try:
            return originals["wait_for_watermarks"](*args, **kwargs)
        finally:
            marks["after_wait"] = time.perf_counter()
            phases["wait"] += marks["after_wait"] - started

    for name, wrapper in (("load_or_plan", load_or_plan), ("emit", emit), ("wait_for_watermarks", wait_for_watermarks)):
        setattr(job, name, wrapper)
    try:
        yield marks
    finally:
        for name, original in originals.items():
            setattr(job, name, original)


def run_parallel(spark, sink: Path, table: str, snapshot_id: str, args) -> tuple[float, dict, dict]:
    from airflow_cdc.spark_jobs.snapshot import SnapshotSpec, run_snapshot

    spec = SnapshotSpec(
        snapshot_id=snapshot_id, stream_id="bench", source_table=table, dialect="postgresql",
        host="127.0.0.1", port=5432, database=DB, user="postgres",
        sink={"prefix": str(sink), "topic_prefix": PREFIX}, chunk_size=args.chunk_size,
        chunks_per_batch=args.chunks_per_batch)
    phases = dict.fromkeys(("plan", "read", "wait", "write"), 0.0)
    with step_clock(phases) as marks:
        started = time.perf_counter()
        summary = run_snapshot(spark, spec)
        seconds = time.perf_counter() - started
        if marks["after_wait"] is not None:
            phases["write"] += started + seconds - marks["after_wait"]
    phases["other"] = seconds - sum(phases.values())
    return seconds, summary, phases


# --- 2. one JDBC query ------------------------------------------------------------------------
def run_single_query(spark, table: str, folder: Path) -> tuple[float, int]:
    from airflow_cdc.sources.debezium.source import table_identifier
    from airflow_cdc.spark_jobs.snapshot_rows import read_rows

    started = time.perf_counter()
    frame = spark.read.jdbc(
        f"jdbc:postgresql://127.0.0.1:5432/{DB}", table,
        # The parallel job's reader options: fetch size (without one, the driver holds every
        # row in memory) and timestamptz as an instant.
        properties={"user": "postgres", "driver": "org.postgresql.Driver", "fetchsize": "10000",
                    "customSchema": "`updated` TIMESTAMP"})
    rows = read_rows(frame, stream="bench", source_table=table_identifier(table), key_columns=["region", "id"],
                     ordering_key=b"\x01", commit_ts=datetime.now(timezone.utc),
                     event_id_prefix=f"bench/{table}/r/single/", partition_id="single",
                     metadata={"snapshot": "single_query"})
    rows.write.mode("overwrite").parquet(str(folder))
    count = spark.read.parquet(str(folder)).count()
    return time.perf_counter() - started, count


# --- 3. Debezium's incremental snapshot -------------------------------------------------------
def run_debezium(sink: Path, timeout: float) -> tuple[float, float | None, int, int]:
    """(seconds to COMPLETED, seconds to TABLE_SCAN_COMPLETED, READ events, chunk notifications)."""
    from airflow_cdc.sources.debezium.signals import SnapshotSignal, send_signal

    sent = SnapshotSignal.execute_snapshot([TABLE])
    conn = connect()
    conn.autocommit = False
    try:
        started = time.perf_counter()
        send_signal(conn, sent, SIGNAL_TABLE, dialect="postgresql")
    finally:
        conn.close()
    seen: set[Path] = set()
    table_scan = None
    in_progress = 0
    while True:
        for path in topic_files(sink, NOTIFICATIONS):
            if path in seen:
                continue
            seen.add(path)
            for line in read_lines(path):
                note = json.loads(line)["payload"]
                if note.get("id") != sent.id:
                    continue
                if note["type"] == "IN_PROGRESS":
                    in_progress += 1
                elif note["type"] == "TABLE_SCAN_COMPLETED" and table_scan is None:
                    table_scan = time.perf_counter() - started
                elif note["type"] == "COMPLETED":
                    seconds = time.perf_counter() - started
                    return seconds, table_scan, count_incremental_reads(sink), in_progress
                elif note["type"] in ("ABORTED", "SKIPPED"):
                    raise RuntimeError(f"Debezium's incremental snapshot ended {note['type']}: {note}")
        if time.perf_counter() - started > timeout:
            raise RuntimeError(f"no COMPLETED notification within {timeout:.0f} s")
        time.sleep(0.2)


def count_incremental_reads(sink: Path) -> int:
    """READ events with source.snapshot = incremental in the table's topic (text match: the
    converter writes compact JSON, and the schema part holds field names, not these pairs)."""
    count = 0
    for path in topic_files(sink, f"{PREFIX}.{TABLE}"):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if '"op":"r"' in line and '"snapshot":"incremental"' in line:
                    count += 1
    return count


# --- the run ----------------------------------------------------------------------------------
def spark_session(base: Path):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from airflow_cdc.spark.iceberg import JDBC_DRIVER_JARS, IcebergCatalog, local_session

    catalog = IcebergCatalog(name="lake", kind="hadoop", warehouse=str(base / "warehouse"),
                             extra_jars=tuple(str(jar) for jar in JDBC_DRIVER_JARS.values()))
    spark = local_session(catalog, app_name="bench-snapshot", master="local[2]", extra_conf={
        "spark.default.parallelism": "4", "spark.driver.memory": "2g",
        "spark.local.dir": str(base / "spark-local"), "spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def clean_up(spark, capture, base: Path) -> None:
    """Each step on its own: one that fails (a Spark gateway cut off by SIGTERM mid-call) must
    not leave the capture running, the slot and the database behind."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    steps = (("the Spark session", spark.stop if spark is not None else None),
             ("the capture", (lambda: stop_capture(capture)) if capture is not None else None),
             (f"the database {DB} and the slot {SLOT}", drop_database),
             (f"the folder {base}", lambda: shutil.rmtree(base)))
    for what, step in steps:
        if step is None:
            continue
        try:
            step()
        except Exception as error:  # noqa: BLE001 - report it and go on with the rest
            detail(f"clean-up: removing {what} failed: {type(error).__name__}: {error}")


def main(argv=None) -> int:
    args = parse_args(argv)
    # SIGTERM unwinds like an error, so the database, the slot and the folder still go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    bench_started = time.perf_counter()
    base = Path(tempfile.mkdtemp(prefix="cdc-bench-snapshot-"))
    sink = base / "sink"
    capture = spark = None
    try:
        create_database(args.rows, args.warmup_rows)
        detail(f"set-up: table of {args.rows} rows in {time.perf_counter() - bench_started:.1f} s")
        capture = start_capture(base, sink)
        spark = spark_session(base)

        run_parallel(spark, sink, WARM_TABLE, "warm-1", args)
        run_single_query(spark, WARM_TABLE, base / "single-warm")

        parallel, summary, phases = run_parallel(spark, sink, TABLE, "items-1", args)
        detail(f"parallel: seconds={parallel:.2f} rows={summary['rows_staged']} chunks={summary['chunks']} "
               f"batches={summary['batches_staged']} keys_changed_during_reads={summary['keys_changed_during_reads']} "
               f"chunk_size={args.chunk_size} chunks_per_batch={args.chunks_per_batch}")
        detail("parallel steps: " + " ".join(f"{name}={value:.2f}s" for name, value in phases.items()))
        single, single_rows = run_single_query(spark, TABLE, base / "single")
        detail(f"single_query: seconds={single:.2f} rows={single_rows}")
        spark.stop()
        spark = None

        debezium, table_scan, debezium_rows, chunks = run_debezium(sink, args.debezium_timeout)
        scan = f"{table_scan:.2f}" if table_scan is not None else "none"
        detail(f"debezium: seconds={debezium:.2f} table_scan_completed_seconds={scan} rows={debezium_rows} "
               f"chunk_notifications={chunks} capture_heap=-Xmx{CAPTURE_HEAP} "
               f"capture_peak_rss_mb={peak_rss_mb(capture.pid) or 0:.0f}")
        for name, count in (("parallel", summary["rows_staged"]), ("single_query", single_rows),
                            ("debezium", debezium_rows)):
            if count != args.rows:
                detail(f"WARNING: {name} read {count} rows of {args.rows}")
    finally:
        clean_up(spark, capture, base)
    detail(f"whole benchmark: {time.perf_counter() - bench_started:.0f} s")
    rates = {"parallel": summary["rows_staged"] / parallel, "single_query": single_rows / single,
             "debezium": debezium_rows / debezium}
    print(f"bench snapshot: rows={args.rows} parallel_per_s={rates['parallel']:.0f} "
          f"single_query_per_s={rates['single_query']:.0f} debezium_per_s={rates['debezium']:.0f} "
          f"vs_single={rates['parallel'] / rates['single_query']:.2f} "
          f"vs_debezium={rates['parallel'] / rates['debezium']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
