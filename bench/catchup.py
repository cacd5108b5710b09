"""Benchmark: a stream with a backlog drained by Airflow's scheduler, with and without catch-up.

    .venv/bin/python bench/catchup.py                       # Spanner, 2-hour backlog
    .venv/bin/python bench/catchup.py --backlog-minutes 20  # a shorter run

The source holds a backlog: the Spanner emulator on 127.0.0.1 serves a generated history (with
partition splits and merges) whose last change is now, starting ``--backlog-minutes`` ago.
The example DAG (``dags/spanner_change_stream_to_iceberg.py``) runs on a 1-minute schedule
from the backlog's start with ``catchup`` on, the way a paused DAG resumes or an outage ends,
under Airflow's real services (api-server, scheduler, dag-processor, triggerer; LocalExecutor,
SQLite) with the settings a user would choose: ``max_active_runs`` 16 (Airflow's default per
DAG), deferrable waits, and ``max_catchup`` of an hour.

``drain_s`` is the time from the first run's queueing to the last run's end, as Airflow
recorded them; ``ratio`` is ``backlog_s / drain_s``, how many times real time the stream caught
up. The baseline, in the same run, is the old behaviour (one interval per window, no
catch-up) on a shorter backlog (``--baseline-minutes``), since its drain grows with the
backlog at its own ratio. After each drain the target tables are compared with the source's
true state at the backlog's end (``mismatches``).

Prints ``bench catchup: source=spanner backlog_s=<s> drain_s=<s> ratio=<r> windows=<n>
intervals=<n> mismatches=<n>``, the baseline's line first with ``design=baseline``. Not a
test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DAG_FILE = "spanner_change_stream_to_iceberg.py"
DAG_ID = "spanner_change_stream_to_iceberg"
STREAM_ID = "allchanges"
INTERVAL = timedelta(minutes=1)
TABLES = ("Accounts", "Orders", "Documents")


@dataclass
class Drain:
    backlog_s: float
    drain_s: float
    windows: int
    intervals: int
    mismatches: int

    @property
    def ratio(self) -> float:
        return self.backlog_s / self.drain_s if self.drain_s else float("inf")

    def line(self, design: str | None = None) -> str:
        return (f"bench catchup: source=spanner backlog_s={self.backlog_s:.0f} "
                f"drain_s={self.drain_s:.0f} ratio={self.ratio:.1f} windows={self.windows} "
                f"intervals={self.intervals} mismatches={self.mismatches}"
                + (f" design={design}" if design else ""))


def db_time(text: str) -> datetime:
    """A timestamp as Airflow's SQLite metadata DB stores it (UTC, maybe without an offset)."""
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def drain(base: Path, backlog: timedelta, max_catchup: timedelta | None, max_active_runs: int,
          timeout: float, say) -> Drain:
    """One backlog of ``backlog`` drained by the scheduler under ``base``; the figures."""
    from airflow_cdc_emulators.spanner import SpannerChangeStreamEmulator, generate_history
    from demo.compare import compare_table, read_iceberg_rows
    from demo.services import AirflowServices
    from airflow_cdc.state import StateStore

    now = datetime.now(timezone.utc).replace(second=0, microsecond=0)
    start = now - backlog
    intervals = int(backlog / INTERVAL)
    history = generate_history(seed=21, start=start, duration=backlog, changes_per_second=0.3,
                               initial_partitions=2, splits=2, merges=1, three_way_merges=0,
                               quiet_periods=0)
    if base.exists():
        shutil.rmtree(base)
    dags = base / "dags"
    dags.mkdir(parents=True)
    shutil.copy(ROOT / "dags" / DAG_FILE, dags)
    state_url = f"sqlite:///{base / 'cdc_state.db'}"
    store = StateStore(state_url)
    store.migrate()
    with SpannerChangeStreamEmulator(history, now=now + timedelta(seconds=5)) as emulator:
        env = {
            "AIRFLOW_CDC_STATE_URL": state_url,
            "AIRFLOW_CDC_WAREHOUSE": str(base / "warehouse"),
            "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
            "SPANNER_EMULATOR_HOST": emulator.emulator_host,
            "CDC_WINDOW_MINUTES": "1",
            "CDC_START": start.isoformat(),
            "CDC_END": (now - INTERVAL).isoformat(),  # the last interval's start
            "CDC_SPANNER_STREAM": history.stream_name,
            "CDC_SPANNER_TABLES": ",".join(TABLES),
            "CDC_CATCHUP": "true",
            "CDC_MAX_ACTIVE_RUNS": str(max_active_runs),
            "CDC_DEFERRABLE": "true",
            "PYSPARK_PYTHON": sys.executable,
            **({"CDC_MAX_CATCHUP_MINUTES": str(max_catchup.total_seconds() / 60)}
               if max_catchup else {}),
        }
        services = AirflowServices(base, dags, env)
        services.start()
        try:
            def done():
                rows = services.query(
                    "select state, count(*) from dag_run where dag_id = ? group by state", DAG_ID)
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
                "select min(queued_at), max(end_date) from dag_run where dag_id = ?", DAG_ID)
        finally:
            services.stop()
    truth = history.state_at(now - timedelta(microseconds=1))
    mismatches = 0
    for table in history.tables:
        rows = read_iceberg_rows(base / "warehouse" / "current" / table.name)
        result = compare_table(table, truth[table.name], rows)
        mismatches += result.mismatches + abs(result.expected_rows - result.target_rows)
    windows = len(store.list_windows(STREAM_ID))
    say(f"drained {intervals} intervals in {windows} window(s); logs under {base}")
    return Drain(backlog.total_seconds(), (db_time(last) - db_time(first)).total_seconds(),
                 windows, intervals, mismatches)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog-minutes", type=int, default=120)
    parser.add_argument("--baseline-minutes", type=int, default=10,
                        help="the old behaviour's backlog (0: no baseline)")
    parser.add_argument("--max-catchup-minutes", type=int, default=60)
    parser.add_argument("--max-active-runs", type=int, default=16)
    parser.add_argument("--base", default=str(ROOT / "build" / "bench-catchup"))
    args = parser.parse_args(argv)
    base = Path(args.base).resolve()

    def say(text: str) -> None:
        print(f"bench catchup: {text}", file=sys.stderr, flush=True)

    if args.baseline_minutes:
        baseline = drain(base / "baseline", timedelta(minutes=args.baseline_minutes), None,
                         args.max_active_runs, timeout=4 * 3600, say=say)
        print(baseline.line("baseline"), flush=True)
    result = drain(base / "catchup", timedelta(minutes=args.backlog_minutes),
                   timedelta(minutes=args.max_catchup_minutes), args.max_active_runs,
                   timeout=4 * 3600, say=say)
    print(result.line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
