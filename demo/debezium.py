"""``make demo-debezium``: real PostgreSQL through real Debezium into Iceberg by real DAG runs.

1. Recreate the database ``cdc_demo_dbz`` (and the replication slot) on the PostgreSQL of
   127.0.0.1:5432 (``wal_level=logical``, user postgres): ``customers`` (a decimal, a
   timestamp with and one without time zone, a date, a boolean, a 20 KB incompressible text
   stored out of line by TOAST) and ``orders``, a few rows each.
2. Start the capture (``airflow-cdc capture debezium``: Debezium's embedded engine writing
   the Kafka Connect sink layout) in its own process, with heartbeats, transaction metadata,
   truncates and a publication for all tables; it runs for the whole demo.
3. One workload phase per window, each followed by the window's DAG run
   (``dags/debezium_to_iceberg.py`` through ``dag.test``) once the window's end plus the
   flush lateness has passed and a heartbeat proves the phase's changes are in the sink:

   ===  =============================================================================
   W1   the initial snapshot, then inserts
   W2   updates (one leaves the TOASTed column unchanged), deletes, a key change
   W3   a multi-table transaction, ``CREATE TABLE shipments`` with rows (a table added
        mid-run); the capture is killed (``kill -9``) once the window is planned (so the
        copies land in the next window: repeats are dropped against the changelog) and
        started again: its changes since Debezium last flushed its offsets come again,
        with new offsets
   W4   ``TRUNCATE orders``, then new orders (one reusing a truncated key); the changes
        the restarted capture sent again are in this window's files: dropped as duplicates
   ===  =============================================================================

4. Compare every target (``current.public_<table>``) with its table read straight from
   PostgreSQL: every column, typed and exact (a decimal with its scale, timestamps equal).

Windows are wall-clock time (heartbeats are): ``--window-seconds`` long, contiguous from the
demo's start; a DAG run takes longer than a window on 2 cores, so the runs catch up behind
the clock, and each phase runs once the previous window's DAG run is done (it planned its
files before), so it lands in its own window.

Last line: ``demo-debezium: OK windows=<n> events=<n> transactions=<n> duplicates=<n>
target_rows=<n> mismatches=0``: events and duplicates are the windows' counts in the state
store, transactions the distinct source transactions of the streamed changes in the
changelog, target_rows the rows of all targets. The exit code is non-zero on any mismatch,
failed run, or when the restart redelivered nothing. Everything lives under
``.demo-debezium/`` (recreated each time).

What is PostgreSQL's here (the database, the workload, the capture's connector, the
replication slot) is one :class:`SourceDatabase`, :data:`POSTGRES`; the capture process, the
windows, the restart and the comparison take it, and ``make demo-debezium-mariadb``
(``demo/debezium_mariadb.py``) runs them on MariaDB's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from demo import postgres
from demo.spanner import prepare_environment

ROOT = Path(__file__).resolve().parents[1]
DAG_ID = "debezium_to_iceberg"
STREAM_ID = "dbz_demo"
DATABASE = "cdc_demo_dbz"
SLOT = "cdc_demo_dbz_slot"
PUBLICATION = "cdc_demo_dbz_pub"
TOPIC_PREFIX = "demo"
KEY_COLUMNS = {"public.customers": ["id"], "public.orders": ["id"], "public.shipments": ["id"]}
# How often Debezium flushes its source position (Kafka Connect's default, 60 s). A crash
# within this long of the last flush finds records written to the sink but not yet
# acknowledged in the offset store: the restart sends them again.
OFFSET_FLUSH_MS = 60_000
# What the restart phase needs before the next flush: its changes, their heartbeat evidence,
# and the DAG run's start up to its plan (5-10 s seen here on 2 busy cores).
RESTART_MARGIN = timedelta(seconds=30)
FLUSH_SETTLE_SECONDS = 6
# Incompressible, so PostgreSQL stores it out of line (TOAST) rather than inline compressed.
BIG_TEXT = "".join(random.Random(22).choices(string.ascii_letters + string.digits, k=20_000))
SCHEMA = f"""
    CREATE TABLE customers (
        id int PRIMARY KEY, name text NOT NULL, balance numeric(12,2), doc text,
        seen timestamptz, born date, vip boolean NOT NULL DEFAULT false);
    CREATE TABLE orders (
        id int PRIMARY KEY, customer_id int NOT NULL, quantity int NOT NULL,
        amount numeric(10,2), placed_at timestamp);
    ALTER TABLE orders REPLICA IDENTITY FULL;
    INSERT INTO customers VALUES
        (1, 'ada', 10.50, '{BIG_TEXT}', '2025-01-06T08:00:00.123456Z', '1815-12-10', true),
        (2, 'bob', NULL, 'short', NULL, NULL, false),
        (3, 'cyd', 99999999.99, NULL, '2025-01-06T09:30:00Z', '1990-02-28', false);
    INSERT INTO orders VALUES
        (1, 1, 10, 20.00, '2025-01-06 08:01:02.5'), (2, 3, 20, 0.10, '2025-01-06 08:02:00'),
        (3, 2, 1, NULL, NULL);
"""


@dataclass(frozen=True)
class SourceDatabase:
    """What the demo needs of its source database; the capture process, the windows and the
    comparison are the same for every database (PostgreSQL here: :data:`POSTGRES`; MariaDB:
    ``demo/debezium_mariadb.py``).

    ``label`` starts every line the demo prints (its last line too); ``base`` is the working
    folder under the repository; ``capture_gone`` runs after the capture is killed, before it
    starts again (PostgreSQL: wait until the killed walsender let go of the slot);
    ``cleanup`` runs once the capture has stopped.
    """

    label: str
    title: str
    base: str
    stream_id: str
    topic_prefix: str
    key_columns: dict
    recreate: Callable[[], None]
    execute: Callable[[str], object]
    source_tables: Callable[[], dict]
    capture_config: Callable[[Path], dict]
    phases: Callable[[], list]
    capture_gone: Callable[[], None] = lambda: None
    cleanup: Callable[[], None] = lambda: None


@dataclass(frozen=True)
class Phase:
    """One window's workload: what it does, as the log says it."""

    title: str
    statements: tuple[str, ...] = ()
    restart_capture: bool = False


def phases() -> list[Phase]:
    """The workload, one phase per window (W1 also holds the initial snapshot)."""
    return [
        Phase("the initial snapshot, then inserts", (
            "INSERT INTO customers VALUES (4, 'dee', 0.01, 'fourth', '2025-01-07T10:00:00+02:00', "
            "'2001-01-01', false)",
            "INSERT INTO orders VALUES (4, 4, 3, 12.34, '2025-01-07 10:00:00.000001'), "
            "(5, 1, 7, 99.99, '2025-01-07 11:00:00')",
        )),
        Phase("updates (one leaving the TOASTed doc unchanged), deletes, a key change", (
            "UPDATE customers SET name = 'ada l.', balance = 10.75 WHERE id = 1",
            "UPDATE orders SET quantity = 11, amount = 22.20 WHERE id = 1",
            "DELETE FROM orders WHERE id = 2",
            "DELETE FROM customers WHERE id = 2",
            "UPDATE customers SET id = 30 WHERE id = 3",
        )),
        Phase("a multi-table transaction, then a table added mid-run with rows; the capture "
              "is killed once the window is planned, and started again", (
            "BEGIN; "
            "INSERT INTO customers VALUES (5, 'eve', 1234.5, NULL, now(), '1970-01-01', true); "
            "INSERT INTO orders VALUES (6, 5, 2, 5.00, '2025-01-08 09:00:00'); "
            "UPDATE orders SET quantity = quantity + 1 WHERE id = 4; "
            "UPDATE customers SET vip = true WHERE id = 30; "
            "COMMIT",
            "CREATE TABLE shipments (id int PRIMARY KEY, order_id int NOT NULL, carrier text, "
            "weight numeric(8,3), shipped_at timestamptz)",
            "INSERT INTO shipments VALUES (1, 1, 'post', 1.250, '2025-01-08T12:00:00Z'), "
            "(2, 4, NULL, 0.005, NULL)",
            "UPDATE shipments SET carrier = 'courier' WHERE id = 2",
        ), restart_capture=True),
        Phase("TRUNCATE orders, then new orders (one reusing a truncated key)", (
            "TRUNCATE orders",
            "INSERT INTO orders VALUES (1, 5, 9, 90.00, '2025-01-09 07:00:00'), "
            "(7, 30, 1, 0.99, '2025-01-09 07:30:00')",
            "UPDATE shipments SET weight = 1.500 WHERE id = 1",
        )),
    ]


# --- PostgreSQL -------------------------------------------------------------------------------
def connect(dbname: str = DATABASE):
    return postgres.connect(dbname)


def execute(sql: str, dbname: str = DATABASE, params=None):
    return postgres.execute(sql, dbname, params)


def wait_slot_released(timeout: float = 60) -> None:
    """Wait until no connection holds the demo's replication slot (a killed capture's
    walsender goes away when PostgreSQL sees its socket close)."""
    deadline = time.monotonic() + timeout
    while execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active",
                  "postgres", (SLOT,)):
        if time.monotonic() > deadline:
            raise SystemExit(f"demo-debezium: replication slot {SLOT} is still in use after "
                             f"{timeout:.0f} s: stop the process holding it (pg_stat_replication)")
        time.sleep(0.3)


def drop_slot() -> None:
    postgres.drop_slot(SLOT)


def recreate_database() -> None:
    try:
        postgres.recreate_database(DATABASE, SLOT)
    except RuntimeError as error:
        raise SystemExit(f"demo-debezium: {error}") from None
    execute(SCHEMA)


def source_tables() -> dict[str, dict]:
    """Every table of the demo database, read straight from PostgreSQL: target name -> rows
    by id."""
    from psycopg2.extras import RealDictCursor

    from airflow_cdc.sources.debezium.source import table_identifier

    conn = connect()
    try:
        with conn.cursor(cursor_factory=RealDictCursor) as cur:
            cur.execute("SELECT table_name FROM information_schema.tables "
                        "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'")
            names = sorted(row["table_name"] for row in cur.fetchall())
            truth = {}
            for name in names:
                cur.execute(f"SELECT * FROM public.{name}")
                truth[table_identifier(f"public.{name}")] = {row["id"]: dict(row) for row in cur}
            return truth
    finally:
        conn.close()


# --- the capture ------------------------------------------------------------------------------
def sink_config(sink: Path) -> dict:
    """The capture's sink and JVM settings, the same for every source database."""
    return {
        "output": str(sink),
        "flush_size": 500,
        "rotate_interval_ms": 500,
        # -Xrs: the JVM (in the capture's own process) leaves SIGTERM and SIGINT to Python,
        # whose handler stops the capture gracefully; without it the JVM exits at once.
        "jvm_options": ["-Xmx384m", "-Xrs"],
    }


def capture_config(sink: Path) -> dict:
    return {
        **sink_config(sink),
        "connector": {
            "name": "cdc-demo-dbz",
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": "pgoutput",
            "database.hostname": "127.0.0.1",
            "database.port": 5432,
            "database.user": "postgres",
            "database.dbname": DATABASE,
            "topic.prefix": TOPIC_PREFIX,
            "schema.include.list": "public",
            "slot.name": SLOT,
            "publication.name": PUBLICATION,
            # FOR ALL TABLES: a table created mid-run is published without a restart.
            "publication.autocreate.mode": "all_tables",
            "heartbeat.interval.ms": 1000,
            "provide.transaction.metadata": True,
            "skipped.operations": "none",  # Debezium skips truncates by default
            "offset.flush.interval.ms": OFFSET_FLUSH_MS,
        },
    }


class CaptureProcess:
    """``airflow-cdc capture debezium`` in its own process (the JVM starts once per process)."""

    def __init__(self, sink: Path, logs: Path, config: dict | None = None,
                 label: str = "demo-debezium"):
        self.sink = sink
        self.logs = logs
        self.label = label
        self.config_file = logs / "capture.json"
        self.config_file.write_text(json.dumps(config or capture_config(sink), indent=1))
        self.process: subprocess.Popen | None = None
        self.runs = 0

    @property
    def offsets_file(self) -> Path:
        return self.sink / "_debezium" / "offsets.dat"

    def start(self) -> None:
        self.runs += 1
        command = [sys.executable, "-m", "airflow_cdc.cli", "capture", "debezium",
                   "--config", str(self.config_file)]
        with open(self.logs / f"capture-{self.runs}.out", "w") as out, \
                open(self.logs / f"capture-{self.runs}.err", "w") as err:
            self.process = subprocess.Popen(command, stdout=out, stderr=err, cwd=ROOT)

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            err = (self.logs / f"capture-{self.runs}.err").read_text(errors="replace")[-3000:]
            raise SystemExit(f"{self.label}: the capture ended with exit code "
                             f"{self.process.returncode}: {err}")

    def kill(self) -> None:
        """A crash: SIGKILL, no graceful close of files or offsets."""
        self.process.kill()
        self.process.wait()
        self.process = None

    def stop(self) -> None:
        """A graceful stop (SIGTERM: open files closed, offsets flushed)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            code = self.process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if code != 0:
            print(f"{self.label}: the capture did not stop gracefully (exit code {code}): see "
                  f"{self.logs / f'capture-{self.runs}.err'}", flush=True)

    def offsets_flushed_at(self) -> int:
        """When Debezium last wrote its offset store (ns), 0 before the first flush."""
        try:
            return self.offsets_file.stat().st_mtime_ns
        except FileNotFoundError:
            return 0

    def wait_for_flush_room(self, margin: timedelta) -> None:
        """Return once Debezium's next offset flush is at least ``margin`` away: at once when
        the last flush was recent enough, else right after the next one (flushes come every
        OFFSET_FLUSH_MS while records, heartbeats included, flow)."""
        interval = OFFSET_FLUSH_MS / 1000
        last = self.offsets_flushed_at()
        if not last or self.seconds_since_flush() > interval - margin.total_seconds():
            wait_for(lambda: self.offsets_flushed_at() != last, interval + 30,
                     "Debezium's next offset flush", self.check_alive, label=self.label)
        # A flush writes the store twice, 1.5 s apart or more on a busy machine: wait until
        # it rests, so the mark the restart is checked against is the flush's last write.
        wait_for(lambda: self.seconds_since_flush() >= FLUSH_SETTLE_SECONDS, 60,
                 "Debezium's offset flush to end", self.check_alive, label=self.label)

    def seconds_since_flush(self) -> float:
        return time.time() - self.offsets_flushed_at() / 1e9


def wait_for(predicate, timeout: float, what: str, check=None, poll: float = 0.3,
             label: str = "demo-debezium"):
    deadline = time.monotonic() + timeout
    while True:
        if check is not None:
            check()
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise SystemExit(f"{label}: timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


# --- the windows ------------------------------------------------------------------------------
@dataclass
class DemoRun:
    """What the demo did, for its summary."""

    windows: list = field(default_factory=list)  # (end, state, seconds) per DAG run
    flush_mark: int = 0  # the offset store's mtime when the restart phase began
    phase_began: float = 0.0  # monotonic time the restart phase began
    unflushed_at_kill: bool | None = None


def environment(sink: Path, start: datetime, window_seconds: int, lateness: float,
                db: SourceDatabase | None = None) -> dict:
    """The DAG's configuration (dags/debezium_to_iceberg.py reads it when parsed)."""
    db = db or POSTGRES
    return {
        "CDC_DEBEZIUM_PREFIX": str(sink),
        "CDC_DEBEZIUM_TOPIC_PREFIX": db.topic_prefix,
        "CDC_DEBEZIUM_STREAM_ID": db.stream_id,
        "CDC_DEBEZIUM_KEY_COLUMNS": json.dumps(db.key_columns),
        "CDC_DEBEZIUM_FLUSH_LATENESS_SECONDS": str(lateness),
        "CDC_START": start.isoformat(),
        "CDC_WINDOW_SECONDS": str(window_seconds),
        "CDC_WAIT_POKE_SECONDS": "1",
        "CDC_GATE_POKE_SECONDS": "1",
    }


def wait_until_captured(source, moment: datetime, capture: CaptureProcess,
                        stream_id: str = STREAM_ID) -> None:
    """Wait until a heartbeat in the sink proves every change before ``moment`` is in its
    files: the source's own readiness rule, for a window ending at ``moment``."""
    from airflow_cdc.model import Window

    probe = Window(stream_id, moment - timedelta(seconds=1), moment)
    wait_for(lambda: source.readiness(probe, datetime.now(timezone.utc), (), None).ready, 120,
             f"a heartbeat proving the changes before {moment.isoformat()} are in the sink",
             capture.check_alive, label=capture.label)


def restart_once_planned(capture: CaptureProcess, window, run: DemoRun, errors: list,
                         db: SourceDatabase | None = None) -> None:
    """Kill the capture as soon as ``window`` is planned, then start it again (a thread next
    to the window's DAG run): what it wrote since its last offset flush comes again, in
    files the next window reads."""
    from airflow_cdc.state import StateStore

    db = db or POSTGRES
    try:
        store = StateStore(StateStore.default_url())
        try:
            wait_for(lambda: store.get_window(window.stream_id, window.start) is not None, 300,
                     f"window {window.window_id} to be planned", capture.check_alive, poll=0.2,
                     label=db.label)
        finally:
            store.close()
        flushed = capture.offsets_flushed_at()
        capture.kill()
        run.unflushed_at_kill = flushed == run.flush_mark
        flushes = ("no offset flush since the phase began" if run.unflushed_at_kill
                   else "but Debezium flushed its offsets after the phase began")
        print(f"{db.label}: window {window.window_id} planned: capture killed "
              f"{time.monotonic() - run.phase_began:.0f} s after the phase began ({flushes}), "
              f"starting it again", flush=True)
        db.capture_gone()
        capture.start()
    except BaseException as error:  # noqa: BLE001 - re-raised on the main thread
        errors.append(error)


def run_windows(dag, capture: CaptureProcess, source, start: datetime, window: timedelta,
                lateness: timedelta, workload: list[Phase],
                db: SourceDatabase | None = None) -> DemoRun:
    from airflow.utils.state import DagRunState

    from airflow_cdc.model import Window

    db = db or POSTGRES
    run = DemoRun()
    for index, phase in enumerate(workload, start=1):
        end = start + window * index
        current = Window(db.stream_id, end - window, end)
        if phase.restart_capture:
            capture.wait_for_flush_room(RESTART_MARGIN)
            run.flush_mark = capture.offsets_flushed_at()
            run.phase_began = time.monotonic()
        for statement in phase.statements:
            db.execute(statement)
        done = datetime.now(timezone.utc)
        print(f"{db.label}: W{index} [{(end - window).time()}, {end.time()}): {phase.title}",
              flush=True)
        due = max(end, done) + lateness
        time.sleep(max(0.0, (due - datetime.now(timezone.utc)).total_seconds()))
        wait_until_captured(source, max(end, done), capture, db.stream_id)
        errors: list = []
        helper = None
        if phase.restart_capture:
            helper = threading.Thread(target=restart_once_planned,
                                      args=(capture, current, run, errors, db), daemon=True)
            helper.start()
        began = time.monotonic()
        dag_run = dag.test(logical_date=end)
        state = getattr(dag_run, "state", None)
        seconds = time.monotonic() - began
        if helper is not None:
            helper.join(timeout=300)
            if errors:
                raise errors[0]
        run.windows.append((end, state, seconds))
        print(f"{db.label}: W{index} ending {end.isoformat()}: {state} in {seconds:.0f} s",
              flush=True)
        if state != DagRunState.SUCCESS:
            raise SystemExit(f"{db.label}: the DAG run of W{index} (ending {end}) ended {state}")
    return run


# --- the numbers ------------------------------------------------------------------------------
def window_counts(stream_id: str = STREAM_ID) -> dict:
    """events and duplicates summed over the stream's windows in the state store."""
    from airflow_cdc.state import StateStore

    store = StateStore(StateStore.default_url())
    try:
        records = store.list_windows(stream_id)
    finally:
        store.close()
    totals = {"events": 0, "duplicates": 0}
    for record in records:
        for name in totals:
            totals[name] += int((record.counts or {}).get(name) or 0)
    return totals


def streamed_transactions(warehouse: Path, stream_id: str = STREAM_ID) -> int:
    """Distinct source transactions of the streamed (not snapshot) changes in the changelog
    (their ids as :func:`~airflow_cdc.sources.debezium.records.transaction_key` reads them:
    PostgreSQL's txIds, MariaDB's GTIDs)."""
    from demo.compare import read_iceberg_rows

    rows = read_iceberg_rows(warehouse / "cdc" / f"{stream_id}_changelog")
    xids = set()
    for row in rows:
        metadata = json.loads(row.get("source_metadata_json") or "{}")
        if row.get("op") == "READ" or str(metadata.get("snapshot", "false")).lower() not in (
                "false", "none"):
            continue
        if row.get("transaction_id"):
            xids.add(str(row["transaction_id"]))
    return len(xids)


def compare(warehouse: Path, truth: dict | None = None) -> dict:
    """Every target and every source table (``truth``: the tables read straight from the
    database, PostgreSQL's by default), row by row, typed and exact."""
    from demo.datastream import compare_targets

    truth = source_tables() if truth is None else truth
    namespace = warehouse / "current"
    for folder in sorted(namespace.iterdir()) if namespace.is_dir() else []:
        if not folder.name.endswith(("__tombstones", "__history")):  # apply's own tables
            truth.setdefault(folder.name, {})  # a target without its table: all rows unexpected
    return compare_targets(warehouse, truth)


POSTGRES = SourceDatabase(
    label="demo-debezium",
    title=__doc__.splitlines()[0],
    base=".demo-debezium",
    stream_id=STREAM_ID,
    topic_prefix=TOPIC_PREFIX,
    key_columns=KEY_COLUMNS,
    recreate=recreate_database,
    execute=execute,
    source_tables=source_tables,
    capture_config=capture_config,
    phases=phases,
    capture_gone=wait_slot_released,
    cleanup=drop_slot,  # a slot left behind would keep WAL on this machine for ever
)


def main(argv: list[str] | None = None, db: SourceDatabase | None = None) -> int:
    """Run the demo on ``db`` (PostgreSQL by default): the module docstring's steps."""
    db = db or POSTGRES
    parser = argparse.ArgumentParser(description=db.title)
    parser.add_argument("--base", default=str(ROOT / db.base), help="working folder")
    parser.add_argument("--window-seconds", type=int, default=20)
    parser.add_argument("--lateness-seconds", type=float, default=3.0,
                        help="flush lateness: the sink's rotation (0.5 s) plus slack")
    args = parser.parse_args(argv)
    base = Path(args.base).resolve()
    prepare_environment(base)
    sink, logs = base / "sink", base / "logs"
    logs.mkdir(parents=True)
    started = time.monotonic()

    db.recreate()
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                   check=True, stdout=subprocess.DEVNULL)
    windows_start = datetime.now(timezone.utc).replace(microsecond=0)
    os.environ.update(environment(sink, windows_start, args.window_seconds, args.lateness_seconds,
                                  db))
    from airflow.dag_processing.dagbag import DagBag

    from airflow_cdc.sources.debezium.source import DebeziumSource

    bag = DagBag(str(ROOT / "dags"))
    if DAG_ID not in bag.dags:
        raise SystemExit(f"{db.label}: the example DAG does not import: {bag.import_errors}")
    source = DebeziumSource({"prefix": str(sink), "topic_prefix": db.topic_prefix,
                             "key_columns": db.key_columns,
                             "settings": {"flush_lateness_seconds": args.lateness_seconds}})

    capture = CaptureProcess(sink, logs, db.capture_config(sink), label=db.label)
    capture.start()
    try:
        wait_for(lambda: (sink / "topics" / f"__debezium-heartbeat.{db.topic_prefix}").is_dir(),
                 180, "the capture's snapshot and first heartbeat", capture.check_alive,
                 label=db.label)
        print(f"{db.label}: capture streaming after {time.monotonic() - started:.0f} s; "
              f"windows of {args.window_seconds} s from {windows_start.isoformat()}", flush=True)
        run = run_windows(bag.dags[DAG_ID], capture, source, windows_start,
                          timedelta(seconds=args.window_seconds),
                          timedelta(seconds=args.lateness_seconds), db.phases(), db)
    finally:
        capture.stop()
        db.cleanup()
    return summary(db, base, run, capture.runs, started)


def summary(db: SourceDatabase, base: Path, run: DemoRun, capture_runs: int,
            started: float) -> int:
    """Compare the targets with the tables, print the figures and the last line; the exit
    code (0 only with no mismatch and at least one redelivered change dropped)."""
    counts = window_counts(db.stream_id)
    transactions = streamed_transactions(base / "warehouse", db.stream_id)
    result = compare(base / "warehouse", db.source_tables())
    for table, detail in result["tables"].items():
        print(f"{db.label}: {table}: {detail}", flush=True)
    print(f"{db.label}: {len(run.windows)} windows, {capture_runs} capture runs, "
          f"{time.monotonic() - started:.0f} s", flush=True)
    ok = result["mismatches"] == 0 and counts["duplicates"] >= 1
    if counts["duplicates"] < 1:
        print(f"{db.label}: the capture restart redelivered no change (duplicates=0)",
              flush=True)
    print(
        f"{db.label}: {'OK' if ok else 'MISMATCH'} windows={len(run.windows)} "
        f"events={counts['events']} transactions={transactions} "
        f"duplicates={counts['duplicates']} target_rows={result['target_rows']} "
        f"mismatches={result['mismatches']}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
