"""Benchmark: a stream with a backlog drained by Airflow's scheduler, with and without catch-up.

    .venv/bin/python bench/catchup.py                           # Spanner, 2-hour backlog
    .venv/bin/python bench/catchup.py --source debezium         # Debezium on PostgreSQL
    .venv/bin/python bench/catchup.py --backlog-minutes 20      # a shorter run

The source holds a backlog of ``--backlog-minutes`` on a 1-minute schedule:

- ``spanner``: the Spanner emulator on 127.0.0.1 serves a generated history (with partition
  splits and merges) whose last change is now, starting ``--backlog-minutes`` ago.
- ``debezium``: real PostgreSQL changes captured by real Debezium (``airflow-cdc capture
  debezium`` writing the Kafka Connect sink layout, heartbeats every second). A writer commits
  transactions on two tables (multi-table transactions, deletes, key changes:
  :class:`demo.live_debezium.LiveWriter`) in wall-clock time over the last
  ``--accrue-minutes`` of the backlog (by default all of it: a 2-hour backlog takes 2 hours to
  accrue), the way changes pile up while Airflow is down. The capture runs throughout, so
  the sink holds the backlog's files and the heartbeats that prove each interval. The
  baseline's stream accrues at the same time in its own database, over its shorter backlog
  that ends at the same instant.

The example DAG of the source runs on a 1-minute schedule from the backlog's start with
``catchup`` on, the way a paused DAG resumes or an outage ends, under Airflow's real services
(api-server, scheduler, dag-processor, triggerer; LocalExecutor, SQLite) with the settings a
user would choose: Airflow's own ``parallelism`` (32) and ``max_active_runs`` (16),
deferrable waits, and ``max_catchup`` of an hour.

``drain_s`` is the time from the first run's queueing to the last run's end, as Airflow
recorded them; ``ratio`` is ``backlog_s / drain_s``, how many times real time the stream caught
up. The baseline, in the same run, is the old behaviour (one interval per window, no
catch-up) on a shorter backlog (``--baseline-minutes``), since its drain grows with the
backlog at its own ratio. After each drain the target tables are compared with the source's
true state at the backlog's end (``mismatches``).

Prints ``bench catchup: source=<kind> backlog_s=<s> drain_s=<s> ratio=<r> windows=<n>
intervals=<n> mismatches=<n>``, then the baseline's line with ``design=baseline``. Not a
test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

INTERVAL = timedelta(minutes=1)
# Airflow's own defaults ([core] parallelism, [core] max_active_runs_per_dag): what a user
# who turns catch-up on has unless they tune the deployment.
PARALLELISM = 32
MAX_ACTIVE_RUNS = 16


@dataclass
class Drain:
    source: str
    backlog_s: float
    drain_s: float
    windows: int
    intervals: int
    mismatches: int

    @property
    def ratio(self) -> float:
        return self.backlog_s / self.drain_s if self.drain_s else float("inf")

    def line(self, design: str | None = None) -> str:
        return (f"bench catchup: source={self.source} backlog_s={self.backlog_s:.0f} "
                f"drain_s={self.drain_s:.0f} ratio={self.ratio:.1f} windows={self.windows} "
                f"intervals={self.intervals} mismatches={self.mismatches}"
                + (f" design={design}" if design else ""))


def minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


class SpannerBacklog:
    """A generated history served by the Spanner emulator, its last change now."""

    kind = "spanner"
    dag_file = "spanner_change_stream_to_iceberg.py"
    dag_id = "spanner_change_stream_to_iceberg"
    stream_id = "allchanges"
    tables = ("Accounts", "Orders", "Documents")
    real_time = False

    def __init__(self, base: Path, backlog: timedelta, end: datetime | None = None,
                 accrue: timedelta | None = None) -> None:
        # The history is generated when the drain starts, ending then (``end`` and ``accrue``
        # are for sources that accrue in real time).
        self.base = base
        self.backlog = backlog
        self.emulator = None

    def start(self, say) -> None:
        from airflow_cdc_emulators.spanner import SpannerChangeStreamEmulator, generate_history

        self.end = minute(datetime.now(timezone.utc))
        self.begin = self.end - self.backlog
        self.history = generate_history(
            seed=21, start=self.begin, duration=self.backlog, changes_per_second=0.3,
            initial_partitions=2, splits=2, merges=1, three_way_merges=0, quiet_periods=0)
        self.emulator = SpannerChangeStreamEmulator(
            self.history, now=self.end + timedelta(seconds=5)).__enter__()

    def wait_accrued(self, say) -> None:
        return None

    def env(self) -> dict[str, str]:
        return {"SPANNER_EMULATOR_HOST": self.emulator.emulator_host,
                "CDC_SPANNER_STREAM": self.history.stream_name,
                "CDC_SPANNER_TABLES": ",".join(self.tables)}

    def mismatches(self, warehouse: Path) -> int:
        from demo.compare import compare_spanner_history

        return sum(result.mismatches + abs(result.expected_rows - result.target_rows)
                   for result in compare_spanner_history(self.history, warehouse, self.end))

    def stop(self) -> None:
        if self.emulator is not None:
            self.emulator.__exit__(None, None, None)
            self.emulator = None


class DebeziumBacklog:
    """Real PostgreSQL transactions captured by real Debezium, committed in wall-clock time
    over the backlog's last ``accrue`` and frozen at its ``end`` (the truth is then what
    PostgreSQL holds)."""

    kind = "debezium"
    dag_file = "debezium_to_iceberg.py"
    dag_id = "debezium_to_iceberg"
    real_time = True
    topic_prefix = "bench"
    flush_lateness_seconds = 15.0
    rotate_interval_ms = 10_000

    def __init__(self, base: Path, backlog: timedelta, end: datetime,
                 accrue: timedelta | None = None) -> None:
        from demo.live_debezium import LiveSettings

        self.base = base
        self.backlog = backlog
        self.end = end
        self.begin = end - backlog
        self.accrue = min(accrue or backlog, backlog)
        self.stream_id = f"bench_{base.name}"
        self.settings = LiveSettings(database=f"cdc_bench_{base.name}", seed=11)
        self.capture = self.writer = None

    def start(self, say) -> None:
        from demo import live_debezium as live

        self.base.mkdir(parents=True, exist_ok=True)
        live.recreate_database(self.settings)
        self.capture = live.CaptureProcess(self.base, self.settings, self.topic_prefix,
                                           self.rotate_interval_ms).start()
        self.writer = live.LiveWriter(self.settings)
        writes_from = max(self.end - self.accrue, datetime.now(timezone.utc))
        freeze = self.end - live.FREEZE_BEFORE_END
        self.writer.start(writes_from, freeze)
        say(f"{self.base.name}: database {self.settings.database}, capture into "
            f"{self.capture.sink}; transactions from {writes_from:%H:%M:%S} to "
            f"{freeze:%H:%M:%S}, backlog {self.begin:%H:%M} to {self.end:%H:%M}")

    def wait_accrued(self, say) -> None:
        """Until the writer froze and a heartbeat proves the backlog's end in the sink."""
        due = self.end + timedelta(seconds=self.flush_lateness_seconds + 20)
        while datetime.now(timezone.utc) < due or not self.writer.done():
            problem = self.capture.failure()
            if problem:
                raise RuntimeError(problem)
            time.sleep(5)
        if self.writer.errors:
            raise RuntimeError(f"the writer's transactions were refused: {self.writer.errors[:3]}")
        say(f"{self.base.name}: {sum(self.writer.transactions.values())} transactions "
            f"committed, the last at {self.writer.last_commit:%H:%M:%S}")

    def env(self) -> dict[str, str]:
        from demo.live_debezium import KEY_COLUMNS

        return {"CDC_DEBEZIUM_PREFIX": str(self.capture.sink),
                "CDC_DEBEZIUM_TOPIC_PREFIX": self.topic_prefix,
                "CDC_DEBEZIUM_STREAM_ID": self.stream_id,
                "CDC_DEBEZIUM_KEY_COLUMNS": json.dumps(KEY_COLUMNS),
                "CDC_DEBEZIUM_FLUSH_LATENESS_SECONDS": str(self.flush_lateness_seconds)}

    def mismatches(self, warehouse: Path) -> int:
        from demo.datastream import compare_targets
        from demo.live_debezium import TABLES, table_rows

        truth = {f"public_{t}": table_rows(self.settings.database, t) for t in TABLES}
        return compare_targets(warehouse, truth)["mismatches"]

    def stop(self) -> None:
        from demo.postgres import drop_slot

        if self.writer is not None:
            self.writer.stop()
        if self.capture is not None:
            self.capture.stop()
            drop_slot(self.settings.slot)  # a slot left behind keeps PostgreSQL's WAL forever
            self.capture = None


SOURCES = {"spanner": SpannerBacklog, "debezium": DebeziumBacklog}


def db_time(text: str) -> datetime:
    """A timestamp as Airflow's SQLite metadata DB stores it (UTC, maybe without an offset)."""
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def drain(backlog, max_catchup: timedelta | None, max_active_runs: int, timeout: float,
          say) -> Drain:
    """``backlog`` drained by the scheduler under its base folder; the figures."""
    from demo.services import AirflowServices
    from airflow_cdc.state import StateStore

    base = backlog.base
    intervals = int(backlog.backlog / INTERVAL)
    dags = base / "dags"
    dags.mkdir(parents=True)
    shutil.copy(ROOT / "dags" / backlog.dag_file, dags)
    state_url = f"sqlite:///{base / 'cdc_state.db'}"
    store = StateStore(state_url)
    store.migrate()
    env = {
        "AIRFLOW_CDC_STATE_URL": state_url,
        "AIRFLOW_CDC_WAREHOUSE": str(base / "warehouse"),
        "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
        "AIRFLOW__CORE__PARALLELISM": str(PARALLELISM),
        "CDC_WINDOW_MINUTES": "1",
        "CDC_START": backlog.begin.isoformat(),
        "CDC_END": (backlog.end - INTERVAL).isoformat(),  # the last interval's start
        "CDC_CATCHUP": "true",
        "CDC_MAX_ACTIVE_RUNS": str(max_active_runs),
        "CDC_DEFERRABLE": "true",
        "PYSPARK_PYTHON": sys.executable,
        **backlog.env(),
        **({"CDC_MAX_CATCHUP_MINUTES": str(max_catchup.total_seconds() / 60)}
           if max_catchup else {}),
    }
    services = AirflowServices(base, dags, env)
    services.start()
    try:
        def done():
            rows = services.query(
                "select state, count(*) from dag_run where dag_id = ? group by state",
                backlog.dag_id)
            counts = dict(rows)
            if counts.get("failed"):
                raise RuntimeError(f"{counts['failed']} DAG run(s) failed; logs under "
                                   f"{base / 'home' / 'logs'}")
            return counts.get("success", 0) >= intervals
        began = time.monotonic()
        while not done():
            if time.monotonic() - began > timeout:
                raise TimeoutError(f"the backlog did not drain within {timeout:.0f} s")
            time.sleep(5)
        (first, last), = services.query(
            "select min(queued_at), max(end_date) from dag_run where dag_id = ?", backlog.dag_id)
    finally:
        services.stop()
    windows = len(store.list_windows(backlog.stream_id))
    mismatches = backlog.mismatches(base / "warehouse")
    say(f"drained {intervals} intervals in {windows} window(s); logs under {base}")
    return Drain(backlog.kind, backlog.backlog.total_seconds(),
                 (db_time(last) - db_time(first)).total_seconds(), windows, intervals, mismatches)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=sorted(SOURCES), default="spanner")
    parser.add_argument("--backlog-minutes", type=int, default=120)
    parser.add_argument("--baseline-minutes", type=int, default=10,
                        help="the old behaviour's backlog (0: no baseline)")
    parser.add_argument("--accrue-minutes", type=int, default=None,
                        help="debezium: the writer commits over the backlog's last this many "
                             "minutes (default: the whole backlog, in real time)")
    parser.add_argument("--max-catchup-minutes", type=int, default=60)
    parser.add_argument("--max-active-runs", type=int, default=MAX_ACTIVE_RUNS)
    parser.add_argument("--base", default=None,
                        help="working folder (default build/bench-catchup-<source>)")
    args = parser.parse_args(argv)
    base = Path(args.base or ROOT / "build" / f"bench-catchup-{args.source}").resolve()
    if base.exists():
        shutil.rmtree(base)

    def say(text: str) -> None:
        print(f"bench catchup: {text}", file=sys.stderr, flush=True)

    kind = SOURCES[args.source]
    # A backlog that accrues in real time ends a whole minute after both have started.
    end = minute(datetime.now(timezone.utc)) + timedelta(minutes=args.backlog_minutes + 1)
    accrue = timedelta(minutes=args.accrue_minutes) if args.accrue_minutes else None
    runs = [(None, kind(base / "catchup", timedelta(minutes=args.backlog_minutes), end, accrue),
             timedelta(minutes=args.max_catchup_minutes))]
    if args.baseline_minutes:
        runs.append(("baseline", kind(base / "baseline", timedelta(minutes=args.baseline_minutes),
                                      end, accrue), None))
    try:
        if kind.real_time:
            for _, backlog, _ in runs:
                backlog.start(say)
        for design, backlog, max_catchup in runs:
            if not kind.real_time:
                backlog.start(say)
            backlog.wait_accrued(say)
            try:
                result = drain(backlog, max_catchup, args.max_active_runs, timeout=4 * 3600,
                               say=say)
            finally:
                if not kind.real_time:
                    backlog.stop()
            print(result.line(design), flush=True)
    finally:
        for _, backlog, _ in runs:
            backlog.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
