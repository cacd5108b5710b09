"""Catch-up across a Bigtable partition merge, through the example Bigtable DAG (dag.test,
one process per DAG run) against the Bigtable emulator.

A stream 30 minutes behind on a 10-minute schedule with ``max_catchup`` of 30 minutes, over
a history with a split and a two-way merge inside those 30 minutes (and no lagging cluster,
which would hold the span's evidence back): the first interval's run plans ONE window over
all three intervals and reads the parents and the merge's child in it; the runs of the two
covered intervals record their intervals and pass their gates. The cells and latest tables
equal the emulator's true state at the window's end.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_cdc.model import WindowState

pytestmark = pytest.mark.long  # make test-long (CI runs it)

WINDOW = timedelta(minutes=10)


@pytest.fixture(scope="module")
def world(airflow_db, tmp_path_factory):
    from tests.faults.matrix import run_window
    from tests.faults.worlds import BigtableWorld

    class MergeWorld(BigtableWorld):
        window = WINDOW
        history_config = {"seed": 3, "hours": 0.5, "splits": 1, "two_way_merges": 1,
                          "three_way_merges": 0, "lag_episode": False,
                          "commits_per_second": 1.0}

    with MergeWorld(tmp_path_factory.mktemp("bigtable-catchup")) as world:
        world.env["CDC_MAX_CATCHUP_MINUTES"] = "30"
        world.ends = world.window_ends(3)
        world.before_window(world.ends[-1])
        world.codes = [run_window(world, end, world.base / "runs.log") for end in world.ends]
        world.result = world.check(world.ends[-1], world.ends)
        yield world


def store(world):
    from airflow_cdc.state import StateStore

    return StateStore(world.env["AIRFLOW_CDC_STATE_URL"])


def test_every_run_succeeds(world):
    assert world.codes == [0, 0, 0]


def test_the_first_run_plans_one_window_over_the_three_intervals(world):
    windows = store(world).list_windows(world.stream_id)

    assert [(w.start, w.end, w.state) for w in windows] == [
        (world.start, world.ends[-1], WindowState.COMPLETE)]


def test_the_covered_runs_record_their_intervals_against_that_window(world):
    covered = store(world).covered_intervals(world.stream_id)

    assert [(c.start, c.window_start) for c in covered] == [
        (world.ends[0], world.start), (world.ends[1], world.start)]


def test_the_catchup_window_read_across_a_merge(world):
    partitions = store(world).list_partitions(world.stream_id)

    assert any(len(p.parent_ids) > 1 for p in partitions)  # the merge's child


def test_cells_and_latest_equal_the_true_state_at_the_windows_end(world):
    result = world.result

    assert (result.lost, result.duplicated, result.failed) == ([], [], [])
