"""A crash between a table's commits, then a re-run, ends as a clean run (I1).

The target, tombstone and history commits of a table run side by side, so a crash can leave
any of them made. The same windows are applied into three namespaces: once cleanly; once with
the tombstone and history commits failing (``fault_point``), so only the target commit is
made; once with the target commit failing, so only the tombstone and history commits are
made. Each crashed window is then run again.
"""

from __future__ import annotations

import pytest

from airflow_cdc.model import WINDOW_SNAPSHOT_PROPERTY
from airflow_cdc.spark_jobs.apply import InjectedFault

from .support import Changes, Lake, at, values_of, window

W0, W1, W2 = window(0), window(1), window(2)
TYPES = {"id": "INT64", "v": "STRING", "n": "INT64"}
TABLES = ("Items", "Items__tombstones", "Items__history")


def history() -> Changes:
    items = Changes("Items", TYPES)
    for key in (1, 2, 3):
        items.add(W0, "INSERT", key, {"v": f"a{key}", "n": key}, when=at(0, key))
    items.add(W1, "UPDATE", 1, {"n": 10}, when=at(1, 1), image="PARTIAL")
    items.add(W1, "DELETE", 2, when=at(1, 2))
    items.add(W1, "DELETE", 3, when=at(1, 3))
    items.add(W1, "INSERT", 3, {"v": "c", "n": 30}, when=at(1, 4))
    items.add(W1, "INSERT", 4, {"v": "d", "n": 4}, when=at(1, 5))
    items.add(W2, "INSERT", 2, {"v": "zombie", "n": 0}, when=at(0, 30))  # older than the delete
    return items


def contents(lake: Lake) -> dict:
    return {table: lake.rows(table, order_by="id,_cdc_seq") for table in TABLES}


# The commits each crash lets through, by the commits it makes fail.
CRASHES = {
    "only the target committed": ["fail_tombstone_commit", "fail_history_commit"],
    "only the tombstones and history committed": ["fail_target_commit"],
}


def tags_of(lake: Lake, table: str) -> list[str | None]:
    return [s["summary"].get(WINDOW_SNAPSHOT_PROPERTY) for s in lake.snapshots(table)]


@pytest.fixture(scope="module")
def runs(module_lake):
    clean = module_lake
    crashed = {
        name: Lake(clean.spark, clean.warehouse, f"{clean.namespace}_crash{i}") for i, name in enumerate(CRASHES)
    }
    for lake in (clean, *crashed.values()):
        lake.write(history())
        lake.apply(W0, targets={"history": True})
    clean.apply(W1, targets={"history": True})
    after_crash = {}
    for name, lake in crashed.items():
        with pytest.raises(InjectedFault):
            lake.apply(W1, targets={"history": True}, fault_point=CRASHES[name])
        after_crash[name] = {table: W1.window_id in tags_of(lake, table) for table in TABLES}
        lake.apply(W1, targets={"history": True})
    return clean, crashed, after_crash


def test_a_crash_can_leave_the_target_committed_and_the_tombstones_and_history_not(runs):
    _, _, after_crash = runs
    assert after_crash["only the target committed"] == {"Items": True, "Items__tombstones": False, "Items__history": False}


def test_a_crash_can_leave_the_tombstones_and_history_committed_and_the_target_not(runs):
    _, _, after_crash = runs
    assert after_crash["only the tombstones and history committed"] == {
        "Items": False, "Items__tombstones": True, "Items__history": True,
    }


@pytest.mark.parametrize("crash", CRASHES)
def test_rerun_after_the_crash_ends_identical_to_a_clean_run(runs, crash):
    clean, crashed, _ = runs
    assert contents(crashed[crash]) == contents(clean)
    for table in TABLES:
        assert crashed[crash].pyiceberg_rows(table, order_by="id,_cdc_seq") == clean.pyiceberg_rows(
            table, order_by="id,_cdc_seq"
        )


@pytest.mark.parametrize("crash", CRASHES)
def test_rerun_after_the_crash_commits_each_table_once_per_window(runs, crash):
    _, crashed, _ = runs
    for table in TABLES:
        assert tags_of(crashed[crash], table).count(W1.window_id) == 1, table


@pytest.mark.parametrize("crash", CRASHES)
def test_after_the_rerun_an_older_change_cannot_resurrect_the_deleted_key(runs, crash):
    _, crashed, _ = runs
    crashed[crash].apply(W2, targets={"history": True})
    assert values_of(crashed[crash].rows("Items"), "v", "n") == {1: ("a1", 10), 3: ("c", 30), 4: ("d", 4)}
