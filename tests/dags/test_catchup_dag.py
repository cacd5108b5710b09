"""Catch-up through the example Spanner DAG (dag.test, one process per DAG run).

A stream 30 minutes behind on a 10-minute schedule with ``max_catchup`` of 30 minutes: the
run of the first interval plans ONE window over all three intervals, across a partition
split and a merge, and reads, commits and applies it; the runs of the two intervals it
covered record their intervals, run no Spark job and pass their gates. Each interval's run
emits its own Asset events with its interval's partition key. Running a covered interval
again, or the covering window's run again, changes nothing (I1); the targets equal the
source's true state at the window's end.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_cdc.model import WindowState

pytestmark = pytest.mark.long  # make test-long (CI runs it)

DAG_ID = "spanner_change_stream_to_iceberg"
START = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
WINDOW = timedelta(minutes=10)
ENDS = [START + WINDOW, START + 2 * WINDOW, START + 3 * WINDOW]
TABLES = ("Accounts", "Orders", "Documents")
GROUP = "all_changes"


@pytest.fixture(scope="module")
def replay(airflow_db, tmp_path_factory):
    from airflow_cdc_emulators.spanner import SpannerChangeStreamEmulator, generate_history

    base = tmp_path_factory.mktemp("catchup")
    history = generate_history(seed=11, start=START, duration=3 * WINDOW, changes_per_second=0.3,
                               initial_partitions=2, splits=1, merges=1, three_way_merges=0,
                               quiet_periods=0)
    saved = dict(os.environ)
    started = datetime.now(timezone.utc)
    os.environ.update({
        "AIRFLOW_CDC_WAREHOUSE": str(base / "warehouse"),
        "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
        "AIRFLOW_CDC_STATE_URL": f"sqlite:///{base / 'cdc_state.db'}",
        "CDC_WINDOW_MINUTES": "10",
        "CDC_START": START.isoformat(),
        "CDC_SPANNER_STREAM": history.stream_name,
        "CDC_SPANNER_TABLES": ",".join(TABLES),
        "CDC_DEFERRABLE": "false",
        "CDC_MAX_CATCHUP_MINUTES": "30",
        "CDC_ASSET_PARTITIONS": "true",
    })
    try:
        with SpannerChangeStreamEmulator(history, now=ENDS[-1]) as emulator:
            os.environ["SPANNER_EMULATOR_HOST"] = emulator.emulator_host
            runs = {end: run_window(end, base) for end in ENDS}
            before = snapshot_state(base)
            reruns = {"covered": run_window(ENDS[1], base)}
            after_covered = snapshot_state(base)
            reruns["covering"] = run_window(ENDS[0], base)
            yield {"history": history, "base": base, "runs": runs, "reruns": reruns,
                   "started": started,
                   "before": before, "after_covered": after_covered,
                   "after_covering": snapshot_state(base)}
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_window(end: datetime, base: Path) -> tuple[int, dict[str, str]]:
    """The DAG run of the interval ending ``end`` in its own process: its exit status (0: the
    run succeeded) and its tasks' states."""
    import subprocess
    import sys

    runner = Path(__file__).resolve().parents[1] / "faults" / "run_window.py"
    done = subprocess.run([sys.executable, str(runner), DAG_ID, end.isoformat()],
                          capture_output=True, text=True, timeout=1800)
    with open(base / f"run-{end:%H%M}.log", "a") as log:
        log.write(done.stdout + done.stderr)
    states = {}
    for line in done.stdout.splitlines():
        if line.startswith("run_window: task "):
            task, _, state = line.removeprefix("run_window: task ").partition(": ")
            states[task] = state
    return done.returncode, states


def store():
    from airflow_cdc.state import StateStore

    return StateStore(os.environ["AIRFLOW_CDC_STATE_URL"])


def snapshot_state(base: Path):
    from demo.compare import latest_metadata

    tables = [base / "warehouse" / "cdc" / "allchanges_changelog"]
    tables += [base / "warehouse" / "current" / t for t in TABLES]
    current = {t.name: json.loads(latest_metadata(t).read_text()).get("current-snapshot-id")
               for t in tables}
    windows = [(w.start, w.end, w.state, w.counts, w.changelog_snapshot_id, w.target_snapshot_ids)
               for w in store().list_windows("allchanges")]
    covered = [(c.start, c.end, c.window_start) for c in store().covered_intervals("allchanges")]
    return current, windows, covered


def test_every_run_succeeds_including_reruns(replay):
    codes = [replay["runs"][end][0] for end in ENDS] + [r[0] for r in replay["reruns"].values()]

    assert codes == [0] * 5


def test_the_first_run_plans_one_window_over_every_interval_behind(replay):
    windows = store().list_windows("allchanges")

    assert [(w.start, w.end, w.state) for w in windows] == [
        (START, ENDS[-1], WindowState.COMPLETE)]


def test_the_runs_of_covered_intervals_record_the_window_that_read_them(replay):
    covered = store().covered_intervals("allchanges")

    assert [(c.start, c.end, c.window_start, c.window_end) for c in covered] == [
        (ENDS[0], ENDS[1], START, ENDS[-1]), (ENDS[1], ENDS[2], START, ENDS[-1])]


def test_covered_runs_skip_extract_commit_and_apply_and_pass_their_gate(replay):
    for end in ENDS[1:]:
        states = replay["runs"][end][1]
        assert {step: states[f"{GROUP}.{step}"] for step in
                ("plan", "extract", "commit", "apply", "gate")} == {
            "plan": "success", "extract": "skipped", "commit": "skipped", "apply": "skipped",
            "gate": "success"}, end


def test_the_catchup_window_crossed_a_split_and_a_merge(replay):
    partitions = store().list_partitions("allchanges")
    windows = store().list_windows("allchanges")

    assert any(len(p.parent_ids) > 1 for p in partitions)  # a merge's child
    assert windows[0].counts["children"] >= 2  # the split's children (and the merge's)


def test_targets_equal_the_true_state_at_the_windows_end(replay):
    from demo.compare import compare_spanner_history

    for result in compare_spanner_history(replay["history"], replay["base"] / "warehouse", ENDS[-1]):
        assert (result.target_rows, result.mismatches) == (result.expected_rows, 0), result.table


def test_rerunning_a_covered_interval_changes_nothing(replay):
    assert replay["after_covered"] == replay["before"]


def test_rerunning_the_covering_windows_run_changes_nothing(replay):
    assert replay["after_covering"] == replay["before"]


def test_each_interval_emits_its_own_asset_events_with_its_partition_key(replay):
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        events = session.execute(
            select(AssetEvent.partition_key, AssetEvent.extra)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetModel.name.like("%allchanges_changelog"))
            .where(AssetEvent.timestamp >= replay["started"])
        ).all()
    keys = sorted({key for key, _ in events})
    by_key = {key: extra for key, extra in events}

    assert keys == [f"{end - WINDOW:%Y-%m-%dT%H:%M:%S}" for end in ENDS]
    assert by_key[keys[1]]["covered_by"] == f"{START:%Y-%m-%dT%H:%M:%S}.000000Z/" \
                                            f"{ENDS[-1]:%Y-%m-%dT%H:%M:%S}.000000Z"
    assert all(extra["window_end"].startswith(f"{ENDS[-1]:%Y-%m-%dT%H:%M:%S}")
               for _, extra in events)
