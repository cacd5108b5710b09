"""``make live-debezium``: real PostgreSQL through real Debezium on a real schedule, in
wall-clock time.

Nothing is replayed:

1. The database ``cdc_live_dbz`` is created afresh on the PostgreSQL of 127.0.0.1:5432
   (``wal_level=logical``, user postgres) with ``customers`` (text, a decimal, a boolean, a
   timestamp with time zone) and ``orders`` (``REPLICA IDENTITY FULL``), a few rows each.
2. The capture (``airflow-cdc capture debezium``: Debezium's embedded engine writing the
   Kafka Connect sink layout, :mod:`airflow_cdc.capture.debezium`) starts in its own process
   (its JVM starts once per process) with a heartbeat every second and transaction metadata,
   and runs for the whole schedule: the initial snapshot, then the stream.
3. Airflow's scheduler, dag-processor, triggerer and api-server
   (:class:`~demo.live.LiveAirflow`) run ``dags/debezium_to_iceberg.py`` on a
   1-minute schedule, deferrable plan and gate, flush lateness 5 s.
4. From the first window's start a writer thread commits a transaction every few tenths of
   a second: inserts, updates and deletes of both tables, multi-table transactions (a
   customer with its first order, a customer deleted with its orders) and now and then a key
   change. It stops :data:`FREEZE_BEFORE_END` before the last window's end, so what
   PostgreSQL holds after the run is what it held at that end: the truth.

Each window's plan defers until a Debezium heartbeat at or after its end plus the flush
lateness (the source's evidence delay, ``DebeziumSource.evidence_delay()``) is in the sink's
files, then the window is read, applied and its gate opens. Gate delay of a window = the
instant its gate marked it COMPLETE in the state store minus its end; each must be at most
``window + evidence delay + 60 s`` = 60 + 5 + 60 = 125 s.

After the last window completes the targets (``current.public_customers``,
``current.public_orders``, read with pyiceberg) must equal the tables read straight from
PostgreSQL, value by value and typed (:func:`demo.datastream.compare_targets`).
Last line: ``live-debezium: OK windows=<n> max_gate_delay_s=<n> mismatches=0``
(``MISMATCH`` when the targets differ, ``FAILED`` otherwise; exit code 1 for both).
Everything lives under ``.live-debezium/`` (recreated each time); the database stays until
the next run, the replication slot is dropped at the end. About 5-6 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from demo import postgres
from demo.live import (
    LiveAirflow,
    LiveResult,
    LiveSchedule,
    gate_bound_seconds,
    recreate,
    run_status,
    summary_line,
)

ROOT = Path(__file__).resolve().parents[1]
DAG_FILE = "debezium_to_iceberg.py"
STREAM_ID = "live_dbz"
TOPIC_PREFIX = "live"
TABLES = ("customers", "orders")
KEY_COLUMNS = {f"public.{table}": ["id"] for table in TABLES}
# The writer's last commit returns at least this long before the last window's end.
FREEZE_BEFORE_END = timedelta(seconds=5)
NAMES = ("ada", "grace", "linus", "barbara", "ken", "margaret", "dennis", "frances")
NOTES = (None, "gift", "express", "fragile")


def evidence_delay_seconds(flush_lateness_seconds: float) -> float:
    """The Debezium source's evidence delay for this flush lateness, as the source defines it."""
    from airflow_cdc.sources.debezium.source import DebeziumSource

    source = DebeziumSource({"prefix": "-", "topic_prefix": TOPIC_PREFIX,
                             "settings": {"flush_lateness_seconds": flush_lateness_seconds}})
    return source.evidence_delay().total_seconds()


@dataclass(frozen=True)
class LiveSettings:
    windows: int = 3
    window_seconds: int = 60
    flush_lateness_seconds: float = 5
    pause_seconds: tuple[float, float] = (0.2, 0.6)  # between two writer transactions
    customers: int = 20  # rows before the capture starts (its snapshot)
    orders: int = 30
    wait_poke_seconds: float = 2
    gate_poke_seconds: float = 2
    database: str = "cdc_live_dbz"
    seed: int = 7

    @property
    def slot(self) -> str:
        return f"{self.database}_slot"

    @property
    def gate_bound_seconds(self) -> float:
        return gate_bound_seconds(self.window_seconds,
                                  evidence_delay_seconds(self.flush_lateness_seconds))

    def window_env(self) -> dict[str, str]:
        """Whole minutes through the DAG's cron timetable, other lengths through its delta one."""
        if self.window_seconds % 60 == 0:
            return {"CDC_WINDOW_MINUTES": str(self.window_seconds // 60)}
        return {"CDC_WINDOW_SECONDS": str(self.window_seconds)}


@dataclass
class LiveDebeziumResult(LiveResult):
    writer_transactions: Counter = field(default_factory=Counter)
    writer_errors: list[str] = field(default_factory=list)
    writer_last_commit: datetime | None = None
    capture_error: str | None = None
    capture_summary: dict = field(default_factory=dict)
    last_end: datetime | None = None
    truth_rows: dict = field(default_factory=dict)

    def ok(self, settings: LiveSettings) -> bool:
        return (super().ok(settings) and not self.writer_errors and not self.capture_error
                and self.writer_last_commit is not None and self.writer_last_commit < self.last_end)


# --- PostgreSQL -------------------------------------------------------------------------------
def connect(dbname: str, autocommit: bool = True):
    return postgres.connect(dbname, autocommit)


def execute(dbname: str, sql: str, params=None) -> list | None:
    return postgres.execute(sql, dbname, params)


def drop_slot(slot: str, timeout: float = 60) -> None:
    postgres.drop_slot(slot, timeout)


def recreate_database(settings: LiveSettings) -> None:
    """The database afresh, with both tables and their first rows (the capture's snapshot)."""
    postgres.recreate_database(settings.database, settings.slot)
    rng = random.Random(settings.seed)
    conn = connect(settings.database, autocommit=False)
    with conn, conn.cursor() as cur:
        cur.execute("""
            CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL,
                                    balance numeric(12,2), active boolean NOT NULL,
                                    updated_at timestamptz NOT NULL);
            CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL,
                                 quantity int NOT NULL, note text);
            ALTER TABLE orders REPLICA IDENTITY FULL;
        """)
        for key in range(1, settings.customers + 1):
            cur.execute("INSERT INTO customers VALUES (%s, %s, %s, %s, now())",
                        (key, rng.choice(NAMES), _balance(rng), rng.random() < 0.7))
        for key in range(1, settings.orders + 1):
            cur.execute("INSERT INTO orders VALUES (%s, %s, %s, %s)",
                        (key, rng.randint(1, settings.customers), rng.randint(1, 9),
                         rng.choice(NOTES)))
    conn.close()


def table_rows(dbname: str, table: str) -> dict[int, dict]:
    """The table's rows by id, as psycopg2 returns them (Decimal, aware datetime, ...)."""
    conn = connect(dbname)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM {table}")
            names = [column.name for column in cur.description]
            return {row[0]: dict(zip(names, row)) for row in cur.fetchall()}
    finally:
        conn.close()


def _balance(rng: random.Random) -> Decimal | None:
    if rng.random() < 0.1:
        return None
    return Decimal(rng.randint(0, 99_999_999)).scaleb(-2)


# --- the capture: its own process -------------------------------------------------------------
class CaptureProcess:
    """``airflow-cdc capture debezium`` into ``<base>/sink``, output in ``<base>/capture.log``."""

    def __init__(self, base: Path, settings: LiveSettings, topic_prefix: str = TOPIC_PREFIX,
                 rotate_interval_ms: int = 2000) -> None:
        self.topic_prefix = topic_prefix
        self.sink = base / "sink"
        self.config_file = base / "capture.json"
        self.log_file = base / "capture.log"
        self.config_file.write_text(json.dumps({
            "output": str(self.sink),
            # Well inside the flush lateness (fewer, larger files).
            "rotate_interval_ms": rotate_interval_ms,
            "connector": {
                "name": "cdc-live-dbz",
                "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                "plugin.name": "pgoutput",
                "database.hostname": "127.0.0.1",
                "database.port": 5432,
                "database.user": "postgres",
                "database.dbname": settings.database,
                "topic.prefix": topic_prefix,
                "table.include.list": ",".join(f"public.{t}" for t in TABLES),
                "slot.name": settings.slot,
                "publication.name": f"{settings.database}_pub",
                "publication.autocreate.mode": "filtered",
                "heartbeat.interval.ms": 1000,
                "provide.transaction.metadata": True,
            },
            "jvm_options": ["-Xmx1g"],
        }, indent=2))
        self.proc: subprocess.Popen | None = None
        self.stopped_by_us = False

    def start(self) -> CaptureProcess:
        with open(self.log_file, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "airflow_cdc.cli", "capture", "debezium",
                 "--config", str(self.config_file)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def failure(self) -> str | None:
        """Why the capture is not running when it should, else None."""
        if self.proc is None or self.stopped_by_us or self.proc.poll() is None:
            return None
        return (f"the capture process ended (exit code {self.proc.returncode}); "
                f"{self.log_file.name} ends with:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        parts = [self.log_file, self.sink / "_debezium" / "debezium.log"]
        return "\n".join(
            f"--- {path.name}\n" + "\n".join(
                path.read_text(errors="replace").splitlines()[-lines:])
            for path in parts if path.exists())

    def streaming(self) -> bool:
        """Whether the snapshot is in the sink and heartbeats arrive (the stream runs)."""
        topics = self.sink / "topics"
        return all(any((topics / name).glob("partition=*/*.json")) for name in (
            f"__debezium-heartbeat.{self.topic_prefix}",
            *(f"{self.topic_prefix}.public.{t}" for t in TABLES)))

    def wait_streaming(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.streaming():
            problem = self.failure()
            if problem:
                raise RuntimeError(problem)
            if time.monotonic() > deadline:
                raise RuntimeError(f"the capture did not stream within {timeout:.0f}s:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.5)

    def stop(self) -> dict:
        """SIGTERM (a graceful stop: open files closed and acknowledged), SIGKILL after 60 s;
        the capture's summary (records per topic, files, why it stopped), empty without one."""
        if self.proc is None:
            return {}
        if self.proc.poll() is None:
            self.stopped_by_us = True
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        lines = self.log_file.read_text(errors="replace").strip().splitlines()
        try:
            return json.loads(lines[-1]) if lines else {}
        except ValueError:
            return {}


# --- the writer: transactions in wall-clock time ----------------------------------------------
class LiveWriter:
    """Commits a transaction on both tables every few tenths of a second, from ``begin_at``
    until :data:`FREEZE_BEFORE_END` before ``last_end``."""

    def __init__(self, settings: LiveSettings) -> None:
        self.settings = settings
        self.rng = random.Random(settings.seed + 1)
        self.transactions: Counter = Counter()
        self.errors: list[str] = []
        self.last_commit: datetime | None = None
        self.next_id = {"customers": settings.customers, "orders": settings.orders}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _new_id(self, table: str) -> int:
        self.next_id[table] += 1
        return self.next_id[table]

    @staticmethod
    def _some(cur, table: str, where: str = "true") -> int | None:
        cur.execute(f"SELECT id FROM {table} WHERE {where} ORDER BY random() LIMIT 1")
        row = cur.fetchone()
        return row[0] if row else None

    # one transaction each
    def insert_customer_with_order(self, cur) -> None:
        key = self._new_id("customers")
        cur.execute("INSERT INTO customers VALUES (%s, %s, %s, %s, now())",
                    (key, self.rng.choice(NAMES), _balance(self.rng), True))
        cur.execute("INSERT INTO orders VALUES (%s, %s, %s, %s)",
                    (self._new_id("orders"), key, self.rng.randint(1, 9), self.rng.choice(NOTES)))

    def update_customer(self, cur) -> None:
        key = self._some(cur, "customers")
        if key is not None:
            cur.execute("UPDATE customers SET balance = %s, active = %s, updated_at = now() "
                        "WHERE id = %s", (_balance(self.rng), self.rng.random() < 0.7, key))

    def delete_customer_and_orders(self, cur) -> None:
        key = self._some(cur, "customers")
        if key is not None:
            cur.execute("DELETE FROM orders WHERE customer_id = %s", (key,))
            cur.execute("DELETE FROM customers WHERE id = %s", (key,))

    def insert_order(self, cur) -> None:
        customer = self._some(cur, "customers")
        if customer is not None:
            cur.execute("INSERT INTO orders VALUES (%s, %s, %s, %s)",
                        (self._new_id("orders"), customer, self.rng.randint(1, 9),
                         self.rng.choice(NOTES)))

    def update_orders(self, cur) -> None:
        # One to three orders in one statement or several: several events in one transaction.
        for _ in range(self.rng.randint(1, 3)):
            key = self._some(cur, "orders")
            if key is not None:
                cur.execute("UPDATE orders SET quantity = quantity + %s, note = %s WHERE id = %s",
                            (self.rng.randint(1, 3), self.rng.choice(NOTES), key))

    def delete_order(self, cur) -> None:
        key = self._some(cur, "orders")
        if key is not None:
            cur.execute("DELETE FROM orders WHERE id = %s", (key,))

    def change_order_key(self, cur) -> None:
        key = self._some(cur, "orders")
        if key is not None:
            cur.execute("UPDATE orders SET id = %s WHERE id = %s", (self._new_id("orders"), key))

    def step(self, conn) -> None:
        kinds = (
            ("insert customer with order", self.insert_customer_with_order, 20),
            ("update customer", self.update_customer, 20),
            ("delete customer with orders", self.delete_customer_and_orders, 8),
            ("insert order", self.insert_order, 20),
            ("update orders", self.update_orders, 20),
            ("delete order", self.delete_order, 8),
            ("change order key", self.change_order_key, 4),
        )
        name, change, _ = self.rng.choices(kinds, weights=[k[2] for k in kinds])[0]
        try:
            with conn, conn.cursor() as cur:  # one transaction: committed on leaving
                change(cur)
            self.last_commit = datetime.now(timezone.utc)
            self.transactions[name] += 1
        except Exception as error:  # noqa: BLE001 - every refusal is reported, none hidden
            self.errors.append(f"{name}: {type(error).__name__}: {error}"[:500])

    def run(self, begin_at: datetime, freeze_at: datetime) -> None:
        wait = (begin_at - datetime.now(timezone.utc)).total_seconds()
        if wait > 0 and self._stop.wait(wait):
            return
        conn = connect(self.settings.database, autocommit=False)
        try:
            low, high = self.settings.pause_seconds
            # A transaction takes milliseconds: none starts within a second of the freeze.
            while (not self._stop.wait(self.rng.uniform(low, high))
                   and datetime.now(timezone.utc) < freeze_at - timedelta(seconds=1)):
                self.step(conn)
        finally:
            conn.close()

    def start(self, begin_at: datetime, freeze_at: datetime) -> LiveWriter:
        self._thread = threading.Thread(target=self.run, args=(begin_at, freeze_at),
                                        name="live-debezium-writer", daemon=True)
        self._thread.start()
        return self

    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)


# --- the run ----------------------------------------------------------------------------------
def run_live(settings: LiveSettings, base: Path, log=print) -> LiveDebeziumResult:
    from demo.datastream import compare_targets

    recreate(base)
    recreate_database(settings)
    schedule = LiveSchedule.starting_after(datetime.now(timezone.utc), settings.window_seconds,
                                           settings.windows, settings.gate_bound_seconds)
    first, last_end = schedule.first, schedule.last_end
    freeze_at = last_end - FREEZE_BEFORE_END
    result = LiveDebeziumResult(last_end=last_end)
    capture = CaptureProcess(base, settings)
    airflow = LiveAirflow("live-debezium", base, DAG_FILE, schedule, {
        "CDC_DEBEZIUM_PREFIX": str(capture.sink),
        "CDC_DEBEZIUM_TOPIC_PREFIX": TOPIC_PREFIX,
        "CDC_DEBEZIUM_STREAM_ID": STREAM_ID,
        "CDC_DEBEZIUM_KEY_COLUMNS": json.dumps(KEY_COLUMNS),
        "CDC_DEBEZIUM_FLUSH_LATENESS_SECONDS": str(settings.flush_lateness_seconds),
        "CDC_WAIT_POKE_SECONDS": str(settings.wait_poke_seconds),
        "CDC_GATE_POKE_SECONDS": str(settings.gate_poke_seconds),
        **settings.window_env(),
    }, log=log)
    log(f"live-debezium: database {settings.database} with {settings.customers} customers and "
        f"{settings.orders} orders; windows of {settings.window_seconds}s from "
        f"{first.isoformat()} to {last_end.isoformat()}, the writer stops at "
        f"{freeze_at:%H:%M:%S}; flush lateness {settings.flush_lateness_seconds:g}s; gate bound "
        f"{settings.gate_bound_seconds:.0f}s after each window end")
    writer = LiveWriter(settings)
    capture.start()
    try:
        with airflow:
            try:
                capture.wait_streaming(timeout=max(30.0, (first - datetime.now(timezone.utc))
                                                   .total_seconds()))
            except RuntimeError as error:
                result.capture_error = str(error)
                log(f"live-debezium: {error}")
            else:
                log(f"live-debezium: the capture streams (snapshot and heartbeats in "
                    f"{capture.sink.name}/)")
                writer.start(first, freeze_at)

                def capture_died() -> str | None:
                    result.capture_error = capture.failure()
                    return result.capture_error

                airflow.wait_for_windows(
                    result, STREAM_ID, abort=capture_died,
                    details=lambda counts: {key: counts.get(key) for key in (
                        "events", "changes", "duplicates", "tombstones", "transaction_events",
                        "heartbeats", "dead_letters")},
                    describe=lambda w: (f" (planned {w['planned_after_end_s']:.0f}s after its "
                                        f"end), {w['events']} events, {w['changes']} changes"))
    finally:
        writer.stop()
        result.capture_summary = capture.stop()
        try:
            drop_slot(settings.slot)  # a slot left behind keeps PostgreSQL's WAL forever
        except RuntimeError as error:
            log(f"live-debezium: {error}")
    result.writer_transactions = writer.transactions
    result.writer_errors = writer.errors
    result.writer_last_commit = writer.last_commit
    log(f"live-debezium: the writer committed {sum(writer.transactions.values())} transactions "
        f"{dict(sorted(writer.transactions.items()))}, the last at "
        f"{writer.last_commit.isoformat() if writer.last_commit else None}, "
        f"{len(writer.errors)} refused" + (f", e.g. {writer.errors[0]}" if writer.errors else ""))
    log(f"live-debezium: the capture stopped ({result.capture_summary.get('reason')}) after "
        f"{result.capture_summary.get('seconds')}s, records "
        f"{result.capture_summary.get('records')} in {result.capture_summary.get('files')} files")
    if len(result.windows) >= settings.windows:
        # The writer stopped before the last window's end: PostgreSQL now holds what it held
        # then, and the last window read every change committed before it.
        truth = {f"public_{table}": table_rows(settings.database, table) for table in TABLES}
        result.truth_rows = {table: len(rows) for table, rows in truth.items()}
        result.comparison = compare_targets(airflow.warehouse, truth)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=str(ROOT / ".live-debezium"), help="working folder")
    parser.add_argument("--windows", type=int, default=LiveSettings.windows)
    parser.add_argument("--window-seconds", type=int, default=LiveSettings.window_seconds)
    parser.add_argument("--flush-lateness-seconds", type=float,
                        default=LiveSettings.flush_lateness_seconds)
    parser.add_argument("--database", default=LiveSettings.database)
    parser.add_argument("--seed", type=int, default=LiveSettings.seed)
    args = parser.parse_args(argv)
    settings = LiveSettings(windows=args.windows, window_seconds=args.window_seconds,
                            flush_lateness_seconds=args.flush_lateness_seconds,
                            database=args.database, seed=args.seed)
    result = run_live(settings, Path(args.base).resolve(), log=lambda m: print(m, flush=True))
    for table, detail in result.comparison.get("tables", {}).items():
        print(f"live-debezium: {table}: {detail}", flush=True)
    status = run_status(result, settings)
    print(summary_line("live-debezium", status, result))
    return 0 if status == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
