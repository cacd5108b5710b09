"""A window cleared while the next one runs, through real DAG runs, Spark and Iceberg.

The example Spanner DAG against the Spanner emulator, every DAG run its own OS process
(``run_dag.py``). Window W1's apply is killed with its spark-submit after its first target
commit (crash point ``apply.after_target_commit``): W1's run fails, W1 stays COMMITTED. That
run applies in a Spark application of its own (``CDC_FUSE_APPLY=false``): fused into the
extract's, as by default, the crash would kill the extract task and leave W1 uncommitted. W2's
run starts; once W2 is planned, W1 is cleared and run again (same run id, so the same lease
owner) at the same time. W1's re-run skips extract and commit and applies; W2's apply either
finds W1 applied or is refused naming it (then W2 is cleared and run again). The windows
apply in order either way, and the targets end equal to the source's truth at W2's end.

Marker ``races_long`` (minutes: five spark-submits); ``make races`` runs it.
"""

from __future__ import annotations

import time

import pytest

from airflow_cdc.faults import ARMED_ENV, POINT_ENV
from airflow_cdc.model import WindowState

from .support import start_dag_run, sync_dags

DAG_ID = "spanner_change_stream_to_iceberg"
CRASH = "apply.after_target_commit"
ORDER_REFUSAL = "cannot apply yet: the earlier window"

pytestmark = pytest.mark.races_long


def wait_until_planned(store, stream_id: str, window_start, process, timeout: float = 600) -> None:
    """Wait until the run in ``process`` has planned the window starting at ``window_start``."""
    deadline = time.monotonic() + timeout
    while store.get_window(stream_id, window_start) is None:
        assert process.process.poll() is None, f"the run ended before planning:\n{process.output()[-3000:]}"
        assert time.monotonic() < deadline, "the window was never planned"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cleared(airflow_db, tmp_path_factory):
    from airflow_cdc.state import StateStore
    from tests.faults.worlds import SpannerWorld

    base = tmp_path_factory.mktemp("cleared-window-dags")
    with SpannerWorld(base) as world:
        w1_end, w2_end = world.window_ends(2)
        sync_dags(world.env)
        armed = base / "armed"
        armed.write_text(CRASH)
        crashed = start_dag_run({**world.env, POINT_ENV: CRASH, ARMED_ENV: str(armed), "CDC_FUSE_APPLY": "false"},
                                DAG_ID, w1_end, base / "w1-crashed.log").result()
        store = StateStore(world.env["AIRFLOW_CDC_STATE_URL"])
        after_crash = store.get_window(world.stream_id, w1_end - world.window).state
        next_run = start_dag_run(world.env, DAG_ID, w2_end, base / "w2.log")
        wait_until_planned(store, world.stream_id, w2_end - world.window, next_run)
        rerun = start_dag_run(world.env, DAG_ID, w1_end, base / "w1-cleared.log")
        results = {"w1 crashed": crashed, "w1 cleared": rerun.result(), "w2": next_run.result()}
        outputs = {"w2": next_run.output(), "w1 cleared": rerun.output()}
        if results["w2"]["state"] != "success":  # refused at apply: cleared and run again
            again = start_dag_run(world.env, DAG_ID, w2_end, base / "w2-again.log")
            results["w2 again"] = again.result()
        yield {"world": world, "ends": [w1_end, w2_end], "results": results, "outputs": outputs,
               "armed": armed, "after_crash": after_crash,
               "windows": store.list_windows(world.stream_id)}
        store.close()


def test_the_first_windows_apply_was_killed_and_left_it_committed(cleared):
    assert not cleared["armed"].exists()  # the crash point fired
    assert cleared["results"]["w1 crashed"]["tasks"]["all_changes.apply"] == "failed"
    assert cleared["after_crash"] is WindowState.COMMITTED


def test_the_cleared_window_skips_extract_and_commit_and_applies(cleared):
    result, output = cleared["results"]["w1 cleared"], cleared["outputs"]["w1 cleared"]
    assert result["state"] == "success"
    assert "nothing to extract" in output


def test_the_next_window_applies_only_after_the_cleared_one(cleared):
    results, output = cleared["results"], cleared["outputs"]["w2"]
    if results["w2"]["state"] == "success":
        assert ORDER_REFUSAL not in output
    else:
        assert results["w2"]["tasks"]["all_changes.apply"] == "failed"
        assert ORDER_REFUSAL in output
        assert results["w2 again"]["state"] == "success"
    assert [(w.end, w.state) for w in cleared["windows"]] == [
        (end, WindowState.COMPLETE) for end in cleared["ends"]]


def test_targets_and_changelog_hold_the_source_truth_at_the_second_windows_end(cleared):
    from tests.faults.matrix import changelog_duplicates, window_commits

    world, ends = cleared["world"], cleared["ends"]
    check = world.check(ends[-1], ends)
    changelog = world.warehouse / "cdc" / f"{world.stream_id}_changelog"
    check.merge(changelog_duplicates(changelog))

    assert (check.lost, check.duplicated, check.failed) == ([], [], [])
    assert window_commits(changelog) == {world.window_id(end): 1 for end in ends}
