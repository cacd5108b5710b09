"""One DAG under Airflow's own services on a short schedule, in wall-clock time: the part
``make live-bigtable``, ``make live-datastream`` and ``make live-debezium`` share.

Each of them runs a writer (a thread or a process) that changes its source while the clock
runs, and :class:`LiveAirflow` runs the DAG:

1. :class:`LiveSchedule` puts the first window at a boundary far enough ahead that the
   services are up before it ends (they take ~30-60 s on a loaded 2-core machine), so the
   first run is scheduled on time; the gate bound of every window is ``window + the source's
   evidence delay + 60 s`` after its end.
2. :class:`LiveAirflow` (a context manager) makes ``<base>/dags`` with the one DAG file, a
   SQLite state store, warehouse and work folders under ``<base>``, the schedule's
   environment (``CDC_START``, catchup on, two active runs, deferrable plan and gate) plus the
   caller's, and starts the scheduler, dag-processor, triggerer and api-server
   (:class:`~demo.services.AirflowServices`); leaving it stops them all.
3. :meth:`LiveAirflow.wait_for_windows` polls until the schedule's windows are COMPLETE in
   the state store (or a DAG run failed, or the caller's abort check gave a reason, or the
   deadline passed), recording each window's gate delay (the instant its gate marked it
   COMPLETE minus its end) and how long after its end it was planned, and logging one line
   per window. Otherwise it logs what a look into the failure needs: the DAG runs, the
   unfinished task instances and their logs' tails, the windows not complete, the tasks
   Airflow failed on a known race of its own, and the services' logs' tails.
4. :func:`summary_line` is the last line all three print:
   ``<name>: <status> windows=<n> max_gate_delay_s=<n> mismatches=<n>``.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GATE_SLACK_SECONDS = 60
# The first window starts at a boundary at least this long after start-up.
START_MARGIN = timedelta(seconds=60)
POLL_SECONDS = 2
# After the last window's end, waiting stops this many gate bounds later.
DEADLINE_BOUNDS = 3
# What Airflow's scheduler logs when it fails a resumed deferred task on the stale success
# event of its deferral (apache/airflow#72716, open in 3.3).
STALE_DEFER_EXIT = "finished with state success, but the task instance's state attribute is running"


def next_boundary(now: datetime, seconds: int, margin: timedelta) -> datetime:
    """The first multiple of ``seconds`` (since the epoch) at least ``margin`` after ``now``."""
    at = (now + margin).timestamp()
    return datetime.fromtimestamp((int(at) // seconds + 1) * seconds, tz=timezone.utc)


def gate_bound_seconds(window_seconds: float, evidence_delay_seconds: float) -> float:
    """How long after its end a window's gate may open: window + evidence delay + 60 s."""
    return window_seconds + evidence_delay_seconds + GATE_SLACK_SECONDS


def recreate(base: Path) -> Path:
    """An empty working folder ``base`` (whatever a previous run left is removed)."""
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    return base


@dataclass(frozen=True)
class LiveSchedule:
    """``windows`` contiguous windows of ``window_seconds`` from ``first``."""

    first: datetime
    window_seconds: int
    windows: int
    gate_bound_seconds: float

    @classmethod
    def starting_after(cls, now: datetime, window_seconds: int, windows: int,
                       gate_bound_seconds: float) -> LiveSchedule:
        """The first window at a boundary at least :data:`START_MARGIN` after ``now``."""
        return cls(next_boundary(now, window_seconds, START_MARGIN), window_seconds, windows,
                   gate_bound_seconds)

    @property
    def last_end(self) -> datetime:
        return self.first + timedelta(seconds=self.window_seconds) * self.windows

    @property
    def deadline(self) -> datetime:
        """When waiting for the windows gives up: some gate bounds after the last end."""
        return self.last_end + timedelta(seconds=self.gate_bound_seconds * DEADLINE_BOUNDS)


@dataclass
class LiveResult:
    windows: list[dict] = field(default_factory=list)
    comparison: dict = field(default_factory=dict)
    failed_runs: list = field(default_factory=list)

    @property
    def max_gate_delay(self) -> float:
        return max((w["gate_delay_s"] for w in self.windows), default=0.0)

    def ok(self, settings) -> bool:
        """``settings`` has ``windows`` and ``gate_bound_seconds``."""
        return (
            len(self.windows) >= settings.windows
            and not self.failed_runs
            and self.comparison.get("mismatches", 1) == 0
            and self.max_gate_delay <= settings.gate_bound_seconds
        )


@dataclass
class WriterLiveResult(LiveResult):
    """A live run whose writer calls the source's client: OK only when no call was refused."""

    writer_calls: Counter = field(default_factory=Counter)
    writer_errors: list[str] = field(default_factory=list)
    last_end: datetime | None = None

    def ok(self, settings) -> bool:
        return super().ok(settings) and not self.writer_errors


def summary_line(name: str, status: str, result: LiveResult) -> str:
    return (f"{name}: {status} windows={len(result.windows)} "
            f"max_gate_delay_s={result.max_gate_delay:.0f} "
            f"mismatches={result.comparison.get('mismatches', 'unknown')}")


def run_status(result: LiveResult, settings) -> str:
    """OK; MISMATCH when every window ran but the targets differ; FAILED otherwise."""
    if result.ok(settings):
        return "OK"
    if result.comparison.get("mismatches", 0) and len(result.windows) >= settings.windows:
        return "MISMATCH"
    return "FAILED"


def window_summary(record) -> dict:
    """What every live run records of a COMPLETE window (a state store ``WindowRecord``)."""
    return {
        "window_end": record.end.isoformat(),
        "end": record.end,
        "gate_delay_s": round((record.updated_at - record.end).total_seconds(), 1),
        "planned_after_end_s": round((record.created_at - record.end).total_seconds(), 1),
        "low_watermark": record.low_watermark,
    }


def _tail(path: Path, lines: int, width: int = 400) -> str:
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return "\n".join(line[:width] for line in text)


class LiveAirflow:
    """Airflow's services running ``dags/<dag_file>`` on ``schedule`` with everything under
    ``base`` (which must exist); ``env`` adds to or overrides the DAG's environment."""

    def __init__(self, name: str, base: Path, dag_file: str, schedule: LiveSchedule,
                 env: Mapping[str, str], *, log: Callable[[str], None] = print) -> None:
        from demo.services import AirflowServices

        self.name = name
        self.base = base
        self.schedule = schedule
        self.log = log
        self.dag_id = Path(dag_file).stem
        dags = base / "dags"
        dags.mkdir()
        shutil.copy(ROOT / "dags" / dag_file, dags)
        self.state_url = f"sqlite:///{base / 'cdc_state.db'}"
        self.warehouse = base / "warehouse"
        self.env = {
            "AIRFLOW_CDC_STATE_URL": self.state_url,
            "AIRFLOW_CDC_WAREHOUSE": str(self.warehouse),
            "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
            "CDC_START": schedule.first.isoformat(),
            "CDC_CATCHUP": "true",  # a slow run never makes the scheduler skip a window
            # Two runs: the next window's plan waits for its evidence (and for this window to
            # commit) while this window applies, as the README suggests for short windows.
            "CDC_MAX_ACTIVE_RUNS": "2",
            "CDC_DEFERRABLE": "true",
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            **env,
        }
        self.services = AirflowServices(base, dags, self.env)
        self.store = None

    # --- start and stop -----------------------------------------------------------------------
    def __enter__(self) -> LiveAirflow:
        from airflow_cdc.state import StateStore

        try:
            self.services.start()
            self.store = StateStore(self.state_url)
            self.store.migrate()
        except BaseException:
            self.services.stop()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.services.stop()

    def wait_for(self, what: str, check: Callable[[], object], timeout: float):
        """Poll ``check`` until truthy; a TimeoutError names ``what`` and the logs' tails."""
        return self.services.wait_for(what, check, timeout)

    # --- the windows --------------------------------------------------------------------------
    def failed_runs(self) -> list[str]:
        return [row[0] for row in self.services.query(
            "select run_id from dag_run where dag_id = ? and state = 'failed'", self.dag_id)]

    def complete_windows(self, stream_id: str, seen: set) -> list:
        """Window records of ``stream_id`` from the schedule's first window on that turned
        COMPLETE since the last call (``seen`` holds the starts already returned)."""
        from airflow_cdc.model import WindowState

        found = []
        for record in self.store.list_windows(stream_id, states=[WindowState.COMPLETE]):
            if record.start in seen or record.start < self.schedule.first:
                continue
            seen.add(record.start)
            found.append(record)
        return found

    def wait_for_windows(self, result: LiveResult, stream_id: str, *,
                         details: Callable[[dict], dict] = lambda counts: {},
                         describe: Callable[[dict], str] = lambda window: "",
                         abort: Callable[[], str | None] = lambda: None) -> bool:
        """Record the schedule's windows into ``result`` as they complete; True once all did.

        Each is :func:`window_summary` plus ``details(counts)`` (from the window's counts) and
        is logged as ``<name>: window ending HH:MM:SS complete, gate delay <n>s`` followed by
        ``describe(window)``. Stops at the first failed DAG run (``result.failed_runs``), when
        ``abort()`` returns a reason (a writer or capture that died: no window can complete
        any more), or at the schedule's deadline; each logs :meth:`diagnostics`.
        """
        seen: set[datetime] = set()
        wanted = self.schedule.windows
        aborted: list[str] = []

        def windows_done():
            reason = abort()
            if reason:
                aborted.append(reason)
                return True
            failed = self.failed_runs()
            if failed:
                result.failed_runs = failed
                return True
            for record in self.complete_windows(stream_id, seen):
                window = {**window_summary(record), **details(record.counts or {})}
                result.windows.append(window)
                self.log(f"{self.name}: window ending {record.end:%H:%M:%S} complete, gate "
                         f"delay {window['gate_delay_s']:.0f}s{describe(window)}")
            return len(result.windows) >= wanted

        budget = (self.schedule.deadline - datetime.now(timezone.utc)).total_seconds()
        try:
            self.services.wait_for(f"{wanted} complete windows", windows_done, max(budget, 1),
                                   every=POLL_SECONDS)
        except TimeoutError as error:
            self.log(f"{self.name}: {str(error).splitlines()[0]}\n{self.diagnostics(stream_id)}")
            return False
        if aborted:
            self.log(f"{self.name}: stopped waiting: {aborted[0]}\n{self.diagnostics(stream_id)}")
            return False
        if result.failed_runs:
            self.log(f"{self.name}: failed DAG runs {result.failed_runs}\n"
                     f"{self.diagnostics(stream_id)}")
            return False
        return True

    # --- on failure ---------------------------------------------------------------------------
    def diagnostics(self, stream_id: str) -> str:
        """The DAG runs, unfinished task instances (with their logs' tails), the windows of
        ``stream_id`` not complete, and the tails of the services' logs."""
        parts = ["--- DAG runs (run_id, state, start, end)"]
        parts += [f"  {row}" for row in self.services.query(
            "select run_id, state, start_date, end_date from dag_run where dag_id = ? "
            "order by id", self.dag_id)]
        unfinished = self.services.query(
            "select run_id, task_id, state, try_number from task_instance where dag_id = ? "
            "and (state is null or state not in ('success', 'skipped')) order by run_id",
            self.dag_id)
        parts.append("--- task instances not done (run_id, task_id, state, try)")
        parts += [f"  {row}" for row in unfinished]
        logs = self.base / "home" / "logs" / f"dag_id={self.dag_id}"
        for run_id, task_id, state, _try in unfinished:
            if state not in ("failed", "up_for_retry", "upstream_failed"):
                continue
            for path in sorted((logs / f"run_id={run_id}" / f"task_id={task_id}").rglob("*.log")):
                parts.append(f"--- {path.relative_to(self.base)}\n{_tail(path, 20)}")
        if self.store is not None:
            from airflow_cdc.model import WindowState

            parts.append("--- windows not complete (start, state, failure, note)")
            parts += [f"  {w.start.isoformat()} {w.state.value} {w.failure_reason} "
                      f"{w.completeness_note}"
                      for w in self.store.list_windows(stream_id)
                      if w.state != WindowState.COMPLETE]
        parts += self.known_races()
        parts.append(self.services.log_tails())
        return "\n".join(parts)

    def known_races(self) -> list[str]:
        """Task instances Airflow's scheduler failed on a stale defer-exit event (a known
        Airflow race, not a pipeline failure): the scheduler log names each one."""
        log = self.services.logs / "scheduler.log"
        if not log.exists():
            return []
        found = [line for line in log.read_text(errors="replace").splitlines()
                 if STALE_DEFER_EXIT in line]
        if not found:
            return []
        return [f"--- Airflow failed {len(found)} resumed deferred task(s) on the stale success "
                f"event of their deferral (apache/airflow#72716: a trigger that fires at once "
                f"makes the race likely on a loaded machine):",
                *(f"  {line[:400]}" for line in found)]
