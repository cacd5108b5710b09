"""A crash between the target commit and the tombstone commit, then a re-run, ends as a clean run.

The same windows are applied twice, into two namespaces: once cleanly, and once with the job
stopped right after its target commit (``fault_point``) and then run again. History is on, so
the re-run must also produce the history commit that the crash prevented.
"""

from __future__ import annotations

import pytest

from airflow_cdc.model import WINDOW_SNAPSHOT_PROPERTY
from spark_jobs.apply import InjectedFault

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


@pytest.fixture(scope="module")
def runs(module_lake):
    crashed = module_lake
    clean = Lake(crashed.spark, crashed.warehouse, crashed.namespace + "_clean")
    for lake in (crashed, clean):
        lake.write(history())
        lake.apply(W0, targets={"history": True})
    clean.apply(W1, targets={"history": True})
    with pytest.raises(InjectedFault):
        crashed.apply(W1, targets={"history": True}, fault_point="after_target_commit")
    after_crash = {table: crashed.snapshots(table) for table in TABLES}
    crashed.apply(W1, targets={"history": True})
    return crashed, clean, after_crash


def test_the_crash_left_the_target_committed_and_the_tombstones_not(runs):
    _, _, after_crash = runs
    tags = {table: [s["summary"].get(WINDOW_SNAPSHOT_PROPERTY) for s in snaps] for table, snaps in after_crash.items()}
    assert W1.window_id in tags["Items"]
    assert W1.window_id not in tags["Items__tombstones"]
    assert W1.window_id not in tags["Items__history"]


def test_rerun_after_the_crash_ends_identical_to_a_clean_run(runs):
    crashed, clean, _ = runs
    assert contents(crashed) == contents(clean)
    for table in TABLES:
        assert crashed.pyiceberg_rows(table, order_by="id,_cdc_seq") == clean.pyiceberg_rows(table, order_by="id,_cdc_seq")


def test_rerun_after_the_crash_commits_each_table_once_per_window(runs):
    crashed, _, _ = runs
    for table in TABLES:
        tags = [s["summary"].get(WINDOW_SNAPSHOT_PROPERTY) for s in crashed.snapshots(table)]
        assert tags.count(W1.window_id) == 1, table


def test_after_the_rerun_an_older_change_cannot_resurrect_the_deleted_key(runs):
    crashed, _, _ = runs
    crashed.apply(W2, targets={"history": True})
    assert values_of(crashed.rows("Items"), "v", "n") == {1: ("a1", 10), 3: ("c", 30), 4: ("d", 4)}
