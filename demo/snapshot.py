"""``make demo-snapshot``: both snapshot kinds on a running stream, with a workload changing
the same keys throughout, by real DAG runs; the targets compared with the tables at the end.

1. Recreate the database ``cdc_demo_snap`` on the PostgreSQL of 127.0.0.1:5432: ``orders``
   (``--rows`` rows, 200,000 by default, key ``(region, id)``), ``customers`` (20,000 rows,
   key ``id``) and Debezium's signaling table.
2. Start the capture (``airflow-cdc capture debezium``) with ``snapshot.mode=no_data``: the
   stream starts with no rows of either table, so the snapshots are the initial load. It
   captures the signaling table and sends notifications to the sink.
3. Start the workload (a thread): updates, deletes and inserts of random keys of both tables
   (keys inside every chunk, and new keys above the snapshot's maximum) until the end.
4. Run ``dags/debezium_snapshots.py`` (dag.test): ``incremental`` signals Debezium's own
   incremental snapshot of ``customers``; ``parallel`` runs the parallel snapshot of
   ``orders`` (a Spark job, chunks read between watermarks, staged batches).
5. Run the stream's windows (``dags/debezium_to_iceberg.py``, dag.test per window) until both
   snapshots are in the targets (the parallel snapshot's partition finished, Debezium's
   completion notification read); then stop the workload and run the windows up to a
   heartbeat after its last change.
6. Compare ``current.public_orders`` and ``current.public_customers`` with the tables read
   straight from PostgreSQL, every column, typed and exact.

Last line: ``demo-snapshot: OK rows=<target rows> chunks=<parallel chunks>
concurrent_changes=<workload changes made while a snapshot ran> mismatches=0``.
Everything lives under ``.demo-snapshot/`` (recreated each time).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from demo import postgres
from demo.debezium import CaptureProcess, wait_for, wait_until_captured
from demo.spanner import prepare_environment

ROOT = Path(__file__).resolve().parents[1]
STREAM_DAG = "debezium_to_iceberg"
SNAPSHOT_DAG = "debezium_snapshots"
STREAM_ID = "snap_demo"
DATABASE = "cdc_demo_snap"
SLOT = "cdc_demo_snap_slot"
PUBLICATION = "cdc_demo_snap_pub"
TOPIC_PREFIX = "snapdemo"
NOTIFICATIONS = f"{TOPIC_PREFIX}.notifications"
KEY_COLUMNS = {"public.orders": ["region", "id"], "public.customers": ["id"]}
REGIONS = ("emea", "amer", "apac", "anz")
CUSTOMERS = 20_000


def execute(sql: str, dbname: str = DATABASE, params=None):
    return postgres.execute(sql, dbname, params)


def recreate_database(rows: int) -> None:
    try:
        postgres.recreate_database(DATABASE, SLOT)
    except RuntimeError as error:
        raise SystemExit(f"demo-snapshot: {error}") from None
    per_region = rows // len(REGIONS)
    execute(f"""
        CREATE TABLE orders (region text NOT NULL, id bigint NOT NULL, customer_id int NOT NULL,
                             amount numeric(12,2) NOT NULL, status text NOT NULL,
                             placed_at timestamptz NOT NULL, PRIMARY KEY (region, id));
        INSERT INTO orders
            SELECT r, g, g % {CUSTOMERS}, (g % 100000) / 100.0, 'new',
                   timestamptz '2025-01-06 08:00:00+00' + g * interval '1 second'
            FROM unnest(ARRAY{list(REGIONS)}) r, generate_series(1, {per_region}) g;
        CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, tier text,
                                balance numeric(10,2));
        INSERT INTO customers SELECT g, 'customer ' || g, CASE WHEN g % 3 = 0 THEN 'gold' END,
                                     g / 10.0 FROM generate_series(1, {CUSTOMERS}) g;
        CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL,
                                      data varchar(2048));
        ANALYZE;
    """)


def capture_config(sink: Path) -> dict:
    return {
        "output": str(sink), "flush_size": 2000, "rotate_interval_ms": 500,
        "jvm_options": ["-Xmx512m", "-Xrs"],
        "connector": {
            "name": "cdc-demo-snap",
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": "pgoutput", "database.hostname": "127.0.0.1", "database.port": 5432,
            "database.user": "postgres", "database.dbname": DATABASE,
            "topic.prefix": TOPIC_PREFIX, "slot.name": SLOT, "publication.name": PUBLICATION,
            "table.include.list": "public.orders,public.customers,public.debezium_signal",
            "publication.autocreate.mode": "filtered",
            "snapshot.mode": "no_data",  # the snapshots below are the initial load
            "signal.data.collection": "public.debezium_signal",
            "notification.enabled.channels": "sink",
            "notification.sink.topic.name": NOTIFICATIONS,
            "heartbeat.interval.ms": 1000, "provide.transaction.metadata": True,
        },
    }


class Workload(threading.Thread):
    """Updates, deletes and inserts random keys of both tables until stopped; counts the
    changes made while ``snapshots_running`` is set."""

    def __init__(self, rows: int):
        super().__init__(daemon=True)
        self.per_region = rows // len(REGIONS)
        self.stop = threading.Event()
        self.snapshots_running = threading.Event()
        self.changes = 0
        self.concurrent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        rng = random.Random(23)
        conn = postgres.connect(DATABASE)
        try:
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    self.one_change(cur, rng)
                    self.changes += 1
                    if self.snapshots_running.is_set():
                        self.concurrent += 1
                    time.sleep(0.01)
        except BaseException as error:  # noqa: BLE001 - reported by main
            self.error = error
        finally:
            conn.close()

    def one_change(self, cur, rng: random.Random) -> None:
        roll = rng.random()
        if roll < 0.35:
            cur.execute("UPDATE orders SET status = %s, amount = amount + 1.25 "
                        "WHERE region = %s AND id = %s",
                        (rng.choice(("paid", "shipped", "returned")), rng.choice(REGIONS),
                         rng.randint(1, self.per_region)))
        elif roll < 0.5:
            cur.execute("DELETE FROM orders WHERE region = %s AND id = %s",
                        (rng.choice(REGIONS), rng.randint(1, self.per_region)))
        elif roll < 0.65:  # new keys, some above the snapshot's maximum
            cur.execute("INSERT INTO orders VALUES (%s, %s, 1, 9.99, 'new', now()) "
                        "ON CONFLICT (region, id) DO UPDATE SET status = 'reinserted'",
                        (rng.choice(REGIONS), rng.randint(1, self.per_region + 5_000)))
        elif roll < 0.85:
            cur.execute("UPDATE customers SET tier = %s, balance = balance + 0.5 WHERE id = %s",
                        (rng.choice(("gold", "silver", None)), rng.randint(1, CUSTOMERS)))
        elif roll < 0.93:
            cur.execute("DELETE FROM customers WHERE id = %s", (rng.randint(1, CUSTOMERS),))
        else:
            cur.execute("INSERT INTO customers VALUES (%s, 'new customer', NULL, 0) "
                        "ON CONFLICT (id) DO UPDATE SET name = 'returning customer'",
                        (rng.randint(1, CUSTOMERS + 2_000),))


def environment(sink: Path, start: datetime, window_seconds: int, lateness: float,
                chunk_size: int) -> dict:
    """Both DAGs' configuration (read when they are parsed)."""
    return {
        "CDC_DEBEZIUM_PREFIX": str(sink),
        "CDC_DEBEZIUM_TOPIC_PREFIX": TOPIC_PREFIX,
        "CDC_DEBEZIUM_STREAM_ID": STREAM_ID,
        "CDC_DEBEZIUM_KEY_COLUMNS": json.dumps(KEY_COLUMNS),
        "CDC_DEBEZIUM_FLUSH_LATENESS_SECONDS": str(lateness),
        "CDC_DEBEZIUM_SIGNAL_TABLE": "public.debezium_signal",
        "CDC_DEBEZIUM_NOTIFICATION_TOPIC": NOTIFICATIONS,
        "CDC_START": start.isoformat(),
        "CDC_WINDOW_SECONDS": str(window_seconds),
        "CDC_WAIT_POKE_SECONDS": "1",
        "CDC_GATE_POKE_SECONDS": "1",
        "CDC_SNAPSHOT_CONN_ID": "snap_demo_db",
        "AIRFLOW_CONN_SNAP_DEMO_DB": f"postgresql://postgres@127.0.0.1:5432/{DATABASE}",
        "CDC_SNAPSHOT_SIGNAL_TABLE": "public.debezium_signal",
        "CDC_SNAPSHOT_SIGNAL_TABLES": "public.customers",
        "CDC_SNAPSHOT_PARALLEL_TABLE": "public.orders",
        "CDC_SNAPSHOT_CHUNK_SIZE": str(chunk_size),
    }


def incremental_completed() -> bool:
    """The stream's complete windows say Debezium's incremental snapshot of customers
    completed (the rule DebeziumSnapshotCompleteSensor waits on)."""
    from airflow_cdc.model import WindowState
    from airflow_cdc.sources.debezium.progress import table_completion
    from airflow_cdc.state import StateStore

    with StateStore(StateStore.default_url()) as store:
        counts = [w.counts or {} for w in store.list_windows(STREAM_ID, states=[WindowState.COMPLETE])]
    verdict = table_completion(counts, "public.customers")
    if verdict.state in ("aborted", "missing"):
        raise SystemExit(f"demo-snapshot: Debezium's incremental snapshot failed: {verdict.reason}")
    return verdict.state == "completed"


def parallel_taken(snapshot_id: str) -> bool:
    """The window that took the parallel snapshot's last batch finished its partition."""
    from airflow_cdc.model import PartitionState
    from airflow_cdc.state import StateStore

    with StateStore(StateStore.default_url()) as store:
        return any(p.partition_id == f"snapshot:{snapshot_id}" and p.state == PartitionState.FINISHED
                   for p in store.list_partitions(STREAM_ID))


def run_window(dag, source, end: datetime, lateness: float, capture: CaptureProcess) -> float:
    """The stream's DAG run for the window ending ``end``, once a heartbeat proves its
    changes are in the sink (the source's own readiness rule)."""
    from airflow.utils.state import DagRunState

    time.sleep(max(0.0, (end + timedelta(seconds=lateness)
                         - datetime.now(timezone.utc)).total_seconds()))
    wait_until_captured(source, end, capture)
    began = time.monotonic()
    run = dag.test(logical_date=end)
    if run.state != DagRunState.SUCCESS:
        raise SystemExit(f"demo-snapshot: the stream's run for the window ending {end} ended "
                         f"{run.state}")
    return time.monotonic() - began


def truth() -> dict[str, dict]:
    """Both tables as PostgreSQL has them: table -> key tuple -> row."""
    from psycopg2.extras import RealDictCursor

    conn = postgres.connect(DATABASE)
    try:
        with conn.cursor(cursor_factory=RealDictCursor) as cur:
            tables = {}
            for table in ("orders", "customers"):
                cur.execute(f"SELECT * FROM public.{table}")
                keys = KEY_COLUMNS[f"public.{table}"]
                tables[table] = {tuple(row[k] for k in keys): dict(row) for row in cur}
            return tables
    finally:
        conn.close()


def _same(expected, actual) -> bool:
    if isinstance(expected, Decimal):
        return (isinstance(actual, Decimal) and expected == actual
                and expected.as_tuple().exponent == actual.as_tuple().exponent)
    if isinstance(expected, datetime) and isinstance(actual, datetime):
        return expected.astimezone(timezone.utc) == actual.astimezone(timezone.utc)
    return expected == actual


def compare(warehouse: Path) -> dict:
    """Rows of each target against the table: missing, extra and differing keys."""
    from demo.compare import read_iceberg_rows

    result = {"rows": 0, "mismatches": 0, "tables": {}}
    for table, rows in truth().items():
        keys = KEY_COLUMNS[f"public.{table}"]
        folder = warehouse / "current" / f"public_{table}"
        target = {}
        for row in read_iceberg_rows(folder) if folder.is_dir() else []:
            target[tuple(row[k] for k in keys)] = row
        missing = [k for k in rows if k not in target]
        extra = [k for k in target if k not in rows]
        differ = [k for k, row in rows.items() if k in target
                  and not all(_same(v, target[k].get(c)) for c, v in row.items())]
        bad = len(missing) + len(extra) + len(differ)
        result["rows"] += len(target)
        result["mismatches"] += bad
        result["tables"][table] = {"expected": len(rows), "target": len(target),
                                   "missing": missing[:5], "extra": extra[:5],
                                   "differ": [(k, rows[k], target[k]) for k in differ[:2]]}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=str(ROOT / ".demo-snapshot"), help="working folder")
    parser.add_argument("--rows", type=int, default=200_000, help="rows of orders")
    parser.add_argument("--chunk-size", type=int, default=25_000)
    parser.add_argument("--window-seconds", type=int, default=60)
    parser.add_argument("--lateness-seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    base = Path(args.base).resolve()
    prepare_environment(base)
    sink, logs = base / "sink", base / "logs"
    logs.mkdir(parents=True)
    started = time.monotonic()
    window = timedelta(seconds=args.window_seconds)

    recreate_database(args.rows)
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                   check=True, stdout=subprocess.DEVNULL)
    windows_start = datetime.now(timezone.utc).replace(microsecond=0)
    os.environ.update(environment(sink, windows_start, args.window_seconds,
                                  args.lateness_seconds, args.chunk_size))
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(ROOT / "dags"))
    for dag_id in (STREAM_DAG, SNAPSHOT_DAG):
        if dag_id not in bag.dags:
            raise SystemExit(f"demo-snapshot: DAG {dag_id} does not import: {bag.import_errors}")

    from airflow_cdc.sources.debezium.source import DebeziumSource

    source = DebeziumSource({"prefix": str(sink), "topic_prefix": TOPIC_PREFIX,
                             "key_columns": KEY_COLUMNS,
                             "settings": {"flush_lateness_seconds": args.lateness_seconds}})
    capture = CaptureProcess(sink, logs, capture_config(sink))
    workload = Workload(args.rows)
    windows = 0
    try:
        capture.start()
        wait_for(lambda: (sink / "topics" / f"__debezium-heartbeat.{TOPIC_PREFIX}").is_dir(), 120,
                 "the capture's first heartbeat", capture.check_alive)
        workload.start()
        workload.snapshots_running.set()
        print(f"demo-snapshot: capture streaming, workload running; {args.rows} orders and "
              f"{CUSTOMERS} customers to snapshot", flush=True)
        began = time.monotonic()
        snapshot_run = bag.dags[SNAPSHOT_DAG].test()
        if str(snapshot_run.state) != "success":
            raise SystemExit(f"demo-snapshot: the snapshot DAG's run ended {snapshot_run.state}")
        snapshot_ti = next(t for t in snapshot_run.get_task_instances() if t.task_id == "parallel")
        summary = snapshot_ti.xcom_pull(task_ids="parallel") or {}
        print(f"demo-snapshot: parallel snapshot staged in {time.monotonic() - began:.0f} s: "
              f"{summary}", flush=True)
        end = windows_start + window
        while True:
            seconds = run_window(bag.dags[STREAM_DAG], source, end, args.lateness_seconds, capture)
            windows += 1
            done = (parallel_taken(summary["snapshot_id"]), incremental_completed())
            print(f"demo-snapshot: window ending {end.time()} in {seconds:.0f} s; parallel "
                  f"snapshot applied: {done[0]}, Debezium's incremental snapshot completed: "
                  f"{done[1]}", flush=True)
            end += window
            if all(done) and workload.snapshots_running.is_set():
                workload.snapshots_running.clear()
                workload.stop.set()
                workload.join()
                if workload.error is not None:
                    raise SystemExit(f"demo-snapshot: the workload failed: {workload.error}")
                last_change = datetime.now(timezone.utc)
                print(f"demo-snapshot: workload stopped after {workload.changes} changes "
                      f"({workload.concurrent} while a snapshot ran)", flush=True)
            elif not workload.snapshots_running.is_set() and end - window > last_change:
                break
            if windows > 40:
                raise SystemExit("demo-snapshot: the snapshots did not reach the targets in 40 windows")
    finally:
        workload.stop.set()
        capture.stop()
        postgres.drop_slot(SLOT)  # a slot left behind would keep WAL on this machine for ever
    result = compare(base / "warehouse")
    for table, detail in result["tables"].items():
        print(f"demo-snapshot: {table}: {detail}", flush=True)
    print(f"demo-snapshot: {windows} windows, {time.monotonic() - started:.0f} s", flush=True)
    ok = result["mismatches"] == 0 and workload.concurrent > 0
    print(f"demo-snapshot: {'OK' if ok else 'MISMATCH'} rows={result['rows']} "
          f"chunks={summary.get('chunks')} concurrent_changes={workload.concurrent} "
          f"mismatches={result['mismatches']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
