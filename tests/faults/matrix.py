"""The reliability matrix: every source, a SIGKILL at every crash point, then a re-run.

For one source (a *world*: its history served by its emulator, or its files, and its example
DAG configured by environment), the windows run one after the other, each as its own OS process
(``run_window.py``: real Airflow, ``dag.test``, real spark-submits). Window *k* is crashed at
crash point *k* (:data:`airflow_cdc.faults.POINTS`, in protocol order): the point is armed
(:mod:`airflow_cdc.faults`), the run is killed there (the Airflow task process, or the whole
spark-submit of the Spark step), and the window is run again the way an operator would (same
run id, every task again). The window after the last point runs without a crash. After every
window the world is checked against the source's truth at that window's end:

* lost: target rows missing, different, or present though deleted (a lost delete), plus
  changelog rows missing against the source's count where the source gives one;
* duplicated: a key twice in a target, an event id twice in the changelog, more than one
  changelog commit for a window, more than one asset event per outlet and window;
* failed: the point was never reached (its arming file still there), the re-run or a later
  window did not succeed, or a window is not COMPLETE in the state store.

``python tests/faults/matrix.py [--source s ...] [--point p ...]`` (``make faults``) prints one
line per source and point and, last, ``faults: points=<n> sources=<n> lost=0 duplicated=0
failed=0``; the exit status is 0 only when the three are zero.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from airflow_cdc.faults import ARMED_ENV, POINT_ENV, POINTS  # noqa: E402

RUNNER = Path(__file__).with_name("run_window.py")
# The matrix also crashes catch-up windows (two intervals each) of these sources at the points
# inside a window's work: reading, recording and applying a span of several intervals.
CATCHUP_SOURCES = ("spanner_change_stream", "bigtable_change_stream")
CATCHUP_POINTS = ("extract.reading", "commit.in_transaction", "apply.after_target_commit")
CATCHUP_INTERVALS = 2
RUN_TIMEOUT = 20 * 60


@dataclass
class Check:
    """What a check after a window found."""

    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def merge(self, other: "Check") -> "Check":
        self.lost += other.lost
        self.duplicated += other.duplicated
        self.failed += other.failed
        return self


@dataclass
class PointResult:
    source: str
    point: str | None
    window_end: datetime
    crash: str  # how the crashed run ended: "killed", "failed", "not reached"
    check: Check
    seconds: float

    def line(self) -> str:
        first = (self.check.lost + self.check.duplicated + self.check.failed)[:1]
        return (
            f"faults: source={self.source} point={self.point or 'none'} "
            f"window_end={self.window_end.isoformat()} crash={self.crash} "
            f"lost={len(self.check.lost)} duplicated={len(self.check.duplicated)} "
            f"failed={len(self.check.failed)} seconds={self.seconds:.0f}"
            + (f" first_problem={first[0]!r}" if first else "")
        )


# --- running a window ---------------------------------------------------------------------
def run_window(world, end: datetime, log: Path, point: str | None = None) -> int:
    """One DAG run of the window ending at ``end`` in its own process; its exit status."""
    env = {k: v for k, v in os.environ.items() if k not in (POINT_ENV, ARMED_ENV)}
    env.update(world.env)
    if point is not None:
        env[POINT_ENV] = point
        env[ARMED_ENV] = str(world.armed_file)
    with open(log, "a") as out:
        out.write(f"\n=== window ending {end.isoformat()} point={point}\n")
        out.flush()
        process = subprocess.run(
            [sys.executable, str(RUNNER), world.dag_id, end.isoformat()],
            env=env, stdout=out, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT,
            start_new_session=True,
        )
    return process.returncode


def run_world(world, points: list[str], say=print, catchup: int = 1) -> list[PointResult]:
    """The world's windows, window k crashed at ``points[k]``, the last one without a crash.

    With ``catchup`` above 1 each window is a catch-up window of that many intervals (the
    example DAG's ``max_catchup``): the run of its first interval plans it and is the one
    crashed and run again; the runs of the intervals it covers follow, without a crash.
    """
    results = []
    span = world.window * catchup
    if catchup > 1:
        world.env["CDC_MAX_CATCHUP_MINUTES"] = str(span.total_seconds() / 60)
    ends = ([world.start + span * (i + 1) for i in range(len(points) + 1)] if catchup > 1
            else world.window_ends(len(points) + 1))
    log = world.base / "runs.log"
    intervals: list[datetime] = []
    for index, end in enumerate(ends):
        point = points[index] if index < len(points) else None
        began = time.monotonic()
        world.before_window(end)
        check, crash = Check(), "none"
        runs = [end - span + world.window * (k + 1) for k in range(catchup)]
        if point is not None:
            world.armed_file.write_text(point)
            status = run_window(world, runs[0], log, point)
            reached = not world.armed_file.exists()
            world.armed_file.unlink(missing_ok=True)
            crash = ("killed" if status == -9 else "failed") if reached else "not reached"
            if not reached:
                check.failed.append(f"crash point {point} was not reached (run status {status})")
        for run_end in runs:
            status = run_window(world, run_end, log)
            if status != 0:
                check.failed.append(f"the run of the interval ending {run_end.isoformat()} "
                                    f"ended with status {status} (see {log})")
        intervals += runs
        check.merge(world.check(end, ends[: index + 1]))
        check.merge(common_checks(world, ends[: index + 1], span, intervals))
        result = PointResult(world.name, point, end, crash, check, time.monotonic() - began)
        say(result.line())
        results.append(result)
    return results


# --- checks every world shares ------------------------------------------------------------
def common_checks(world, ends: list[datetime], span=None,
                  intervals: list[datetime] | None = None) -> Check:
    """State store, changelog commits and asset events after the windows ending at ``ends``
    and the DAG runs of the intervals ending at ``intervals`` (default: one per window).

    With catch-up (``span`` longer than the world's window) the windows are the protocol's
    choice: a catch-up window reads as many intervals as the source says are ready, up to
    ``span``. Then every interval must have exactly one record (a window starting at it, or a
    covered interval), every window must be COMPLETE with exactly one changelog commit.
    """
    check = Check()
    from airflow_cdc.state import StateStore

    span = span or world.window
    store = StateStore(world.env["AIRFLOW_CDC_STATE_URL"])
    try:
        windows = store.list_windows(world.stream_id)
        covered = {c.start for c in store.covered_intervals(world.stream_id)}
    finally:
        store.close()
    records = {r.window.end: r for r in windows}
    if span == world.window:
        for end in ends:
            record = records.get(end)
            if record is None or record.state.value != "COMPLETE":
                check.failed.append(
                    f"window ending {end.isoformat()} is "
                    f"{'missing' if record is None else record.state.value} in the state store")
        if len(records) != len(ends):
            check.failed.append(f"the state store holds {len(records)} windows, not {len(ends)}")
    else:
        starts = {r.start for r in windows}
        for end in intervals or ends:
            start = end - world.window
            count = (start in starts) + (start in covered)
            if count != 1:
                check.failed.append(f"the interval ending {end.isoformat()} has {count} "
                                    f"records (windows and covered intervals)")
        check.failed += [f"window {r.window.window_id} is {r.state.value}" for r in windows
                         if r.state.value != "COMPLETE"]
    changelog = world.warehouse / "cdc" / f"{world.stream_id}_changelog"
    commits = window_commits(changelog)
    # A window proven empty writes no changelog commit (its snapshot id stays None).
    expected = ({r.window.window_id: int(r.changelog_snapshot_id is not None) for r in windows}
                if span != world.window else {world.window_id(end): 1 for end in ends})
    for window_id, wanted in expected.items():
        if commits.get(window_id, 0) != wanted:
            target = check.duplicated if commits.get(window_id, 0) > wanted else check.failed
            target.append(f"{commits.get(window_id, 0)} changelog commits of window {window_id}")
    check.merge(changelog_duplicates(changelog))
    check.merge(asset_events(world, intervals or ends))
    return check


def window_commits(table_dir: Path) -> Counter:
    """Changelog snapshots per window tag."""
    from pyiceberg.table import StaticTable

    from demo.compare import latest_metadata
    from airflow_cdc.model import WINDOW_SNAPSHOT_PROPERTY

    if not table_dir.exists():
        return Counter()
    table = StaticTable.from_metadata(str(latest_metadata(table_dir)))
    tags = Counter()
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if WINDOW_SNAPSHOT_PROPERTY in summary:
            tags[summary[WINDOW_SNAPSHOT_PROPERTY]] += 1
    return tags


def changelog_rows(table_dir: Path) -> list[dict]:
    from demo.compare import read_iceberg_rows

    return read_iceberg_rows(table_dir) if table_dir.exists() else []


def changelog_duplicates(table_dir: Path) -> Check:
    check = Check()
    seen = Counter(
        (r["source_table"], r["event_id"], r["op"], json.dumps(r["keys"], sort_keys=True, default=str))
        for r in changelog_rows(table_dir)
    )
    for key, count in seen.items():
        if count > 1:
            check.duplicated.append(f"changelog event {key} {count} times")
    return check


def asset_events(world, ends: list[datetime], run_ids: list[str] | None = None) -> Check:
    """Exactly one asset event per outlet and DAG run interval ending at ``ends`` (none lost,
    none doubled), among the events of the runs ``run_ids`` (default: run_window.py's, whose
    run id is the interval end). An event names its interval (``interval_end``), else its
    window (one interval per window)."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    check = Check()
    with create_session() as session:
        rows = session.execute(
            select(AssetModel.uri, AssetEvent.extra).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetEvent.source_dag_id == world.dag_id)
            # only this world's runs (run_window.py: run id = the window end) in a shared DB
            .where(AssetEvent.source_run_id.in_(run_ids or [f"manual__{end.isoformat()}" for end in ends]))
            .where(AssetEvent.timestamp >= world.created_at)  # not an earlier world's runs
        ).all()
    per = Counter((uri, (extra or {}).get("interval_end") or (extra or {}).get("window_end"))
                  for uri, extra in rows)
    uris = {uri for uri, _ in per}
    if not uris:
        check.failed.append(f"no asset event of {world.dag_id}")
    from airflow_cdc.model import format_ts

    for end in ends:
        for uri in uris:
            count = max(per.get((uri, format_ts(end)), 0), per.get((uri, end.isoformat()), 0))
            if count == 0:
                check.lost.append(f"no asset event of {uri} for the interval ending {end.isoformat()}")
            elif count > 1:
                check.duplicated.append(f"{count} asset events of {uri} for the interval ending {end.isoformat()}")
    return check


def compare_rows(name: str, expected: dict, actual_rows: list[dict], key_of) -> Check:
    """Target rows (``actual_rows``) against ``expected`` ({key: row}); rows compared by the
    columns ``expected`` names."""
    check = Check()
    actual: dict = {}
    for row in actual_rows:
        key = key_of(row)
        if key in actual:
            check.duplicated.append(f"{name}: key {key} twice")
        actual[key] = row
    for key, row in expected.items():
        got = actual.get(key)
        if got is None:
            check.lost.append(f"{name}: key {key} missing")
        elif any(got.get(c) != v for c, v in row.items()):
            diff = {c: (v, got.get(c)) for c, v in row.items() if got.get(c) != v}
            check.lost.append(f"{name}: key {key} differs {diff}")
    for key in actual.keys() - expected.keys():
        check.lost.append(f"{name}: key {key} present though deleted or never written")
    return check


# --- the matrix ---------------------------------------------------------------------------
@contextmanager
def airflow_home(base: Path):
    """One Airflow metadata DB for the whole matrix (each world its own DAG ids and state)."""
    home = base / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    saved = dict(os.environ)
    os.environ.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "PYSPARK_PYTHON": sys.executable,
    })
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                   check=True, stdout=subprocess.DEVNULL, env=dict(os.environ))
    try:
        yield home
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main(argv: list[str] | None = None) -> int:
    from tests.faults.worlds import WORLDS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=str(ROOT / "build" / "faults"), help="working folder")
    parser.add_argument("--source", action="append", choices=sorted(WORLDS),
                        help="only these sources (repeatable; default all)")
    parser.add_argument("--point", action="append", choices=list(POINTS),
                        help="only these crash points (repeatable; default all, in protocol order)")
    parser.add_argument("--catchup", type=int, default=None,
                        help="only catch-up windows of this many intervals (the run of each "
                             "window's first interval is the one crashed); default: every "
                             f"source without, then {', '.join(CATCHUP_SOURCES)} with "
                             f"{CATCHUP_INTERVALS} at {', '.join(CATCHUP_POINTS)}")
    args = parser.parse_args(argv)
    base = Path(args.base).resolve()
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    points = args.point or list(POINTS)
    sources = args.source or list(WORLDS)
    if args.catchup is not None:
        plan = [(name, args.catchup, points) for name in sources]
    else:
        plan = [(name, 1, points) for name in sources]
        plan += [(name, CATCHUP_INTERVALS, list(args.point or CATCHUP_POINTS))
                 for name in CATCHUP_SOURCES if name in sources]
    results: list[PointResult] = []
    started = time.monotonic()
    with airflow_home(base):
        for name, catchup, world_points in plan:
            folder = base / (name if catchup == 1 else f"{name}-catchup{catchup}")
            with WORLDS[name](folder) as world:
                if catchup > 1:
                    world.name = f"{name}+catchup{catchup}"
                results += run_world(world, world_points,
                                     say=lambda line: print(line, flush=True), catchup=catchup)
    lost = sum(len(r.check.lost) for r in results)
    duplicated = sum(len(r.check.duplicated) for r in results)
    failed = sum(len(r.check.failed) for r in results)
    print(f"faults: {len(results)} windows in {time.monotonic() - started:.0f} s, logs under {base}",
          flush=True)
    catchups = [f"{name}+catchup{catchup}" for name, catchup, _ in plan if catchup > 1]
    if catchups:
        print(f"faults: catch-up windows crashed in {', '.join(catchups)}", flush=True)
    print(f"faults: points={len(points)} sources={len(sources)} lost={lost} "
          f"duplicated={duplicated} failed={failed}", flush=True)
    return 0 if lost == duplicated == failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
