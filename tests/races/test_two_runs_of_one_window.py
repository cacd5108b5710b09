"""Invariant I6 through real Airflow: two DAG runs of the same window, in two OS processes.

The example Spanner DAG (``dags/spanner_change_stream_to_iceberg.py``) against the Spanner
emulator: two ``dag.test`` processes start at once for the same 10-minute window, with
logical dates a minute apart, so they are two DAG runs (two run ids, two lease owners
``dag_id/run_id``) of one data interval. The run that plans first holds the window's lease
until its gate completes the window; the other one's plan is refused, naming that owner, and
none of its later tasks run. The targets then hold the source's truth at the window end, once.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_cdc.model import WindowState

from .support import start_dag_run, sync_dags

# Two DAG runs with their spark-submits (minutes on 2 cores): `make races`. The default run
# keeps I6 at the protocol level (tests/state/test_state_race.py, tests/races/test_cleared_window.py).
pytestmark = pytest.mark.races_long

DAG_ID = "spanner_change_stream_to_iceberg"


@pytest.fixture(scope="module")
def race(airflow_db, tmp_path_factory):
    from tests.faults.worlds import SpannerWorld

    base = tmp_path_factory.mktemp("two-runs-of-one-window")
    with SpannerWorld(base) as world:
        end = world.window_ends(1)[0]
        sync_dags(world.env)
        runs = {
            name: start_dag_run(world.env, DAG_ID, logical_date, base / f"{name}.log")
            for name, logical_date in (("a", end), ("b", end + timedelta(minutes=1)))
        }
        results = {name: run.result() for name, run in runs.items()}
        yield {"world": world, "end": end, "runs": runs, "results": results}


def winner_and_loser(race) -> tuple[str, str]:
    succeeded = [name for name, result in race["results"].items() if result["state"] == "success"]
    assert len(succeeded) == 1, race["results"]
    [winner] = succeeded
    [loser] = [name for name in race["results"] if name != winner]
    return winner, loser


def test_two_dag_runs_of_one_window_at_once_commit_it_exactly_once(race):
    from airflow_cdc.state import StateStore
    from tests.faults.matrix import window_commits

    winner, loser = winner_and_loser(race)
    world, results = race["world"], race["results"]
    store = StateStore(world.env["AIRFLOW_CDC_STATE_URL"])
    [record] = store.list_windows(world.stream_id)
    store.close()

    assert results[loser]["state"] == "failed"
    assert (record.end, record.state, record.attempt, record.lease_owner) == (
        race["end"], WindowState.COMPLETE, 1, f"{DAG_ID}/{results[winner]['run_id']}")
    commits = window_commits(world.warehouse / "cdc" / f"{world.stream_id}_changelog")
    assert commits == {world.window_id(race["end"]): 1}


def test_the_losing_run_fails_at_plan_naming_the_lease_owner_and_runs_nothing_else(race):
    winner, loser = winner_and_loser(race)
    results = race["results"]
    owner = f"{DAG_ID}/{results[winner]['run_id']}"
    output = race["runs"][loser].output()

    assert results[loser]["tasks"]["all_changes.plan"] == "failed"
    assert {task: state for task, state in results[loser]["tasks"].items()
            if task != "all_changes.plan"} == {
        task: "upstream_failed" for task in results[loser]["tasks"] if task != "all_changes.plan"}
    assert "WindowLeaseHeldError" in output
    assert f"is being run by '{owner}'" in output
    assert f"so '{DAG_ID}/{results[loser]['run_id']}' cannot run it" in output


def test_targets_and_changelog_hold_the_source_truth_once_after_the_race(race):
    from tests.faults.matrix import asset_events, changelog_duplicates

    world, end = race["world"], race["end"]
    winner, _ = winner_and_loser(race)
    check = world.check(end, [end])
    check.merge(changelog_duplicates(world.warehouse / "cdc" / f"{world.stream_id}_changelog"))
    # The winner's run id: its logical date is the window end or a minute after it.
    check.merge(asset_events(world, [end], run_ids=[race["results"][winner]["run_id"]]))

    assert (check.lost, check.duplicated, check.failed) == ([], [], [])
