"""The ordering-key guard: re-runs are no-ops, late older changes lose, deletes stay deleted.

Window 2 brings changes older than what window 1 applied (out-of-order delivery across
windows); windows 1 and 2 are then run again; window 3 purges tombstones past the horizon.
"""

from __future__ import annotations

import pytest

from airflow_cdc.model import WINDOW_SNAPSHOT_PROPERTY

from .support import Changes, at, seq, values_of, window

W0, W1, W2, W3 = window(0), window(1), window(2), window(3)
TYPES = {"id": "INT64", "v": "STRING"}


@pytest.fixture(scope="module")
def applied(module_lake):
    lake = module_lake
    items = Changes("Items", TYPES)
    for key in range(1, 5):
        items.add(W0, "INSERT", key, {"v": f"a{key}"}, when=at(0, key))
    items.add(W1, "UPDATE", 1, {"v": "b1"}, when=at(1, 10))
    items.add(W1, "DELETE", 2, when=at(1, 10))
    items.add(W1, "UPDATE", 3, {"v": "b3"}, when=at(1, 10))
    items.add(W2, "UPDATE", 1, {"v": "late"}, when=at(0, 30))  # older than W1's change of key 1
    items.add(W2, "INSERT", 2, {"v": "zombie"}, when=at(0, 30))  # older than W1's delete of key 2
    items.add(W2, "UPDATE", 3, {"v": "c3"}, when=at(2, 5))
    items.add(W2, "DELETE", 4, when=at(2, 5))
    items.add(W3, "UPDATE", 1, {"v": "d1"}, when=at(3, 1))
    for win in (W0, W1, W2, W3):
        lake.write(items, win=win)
    state = {}
    for win in (W0, W1, W2):
        state[win.window_id] = lake.apply(win)
    state["after W2"] = (lake.rows("Items"), lake.rows("Items__tombstones"), lake.snapshots("Items"))
    state["W1 again"] = lake.apply(W1)
    state["W2 again"] = lake.apply(W2)
    state["after reruns"] = (lake.rows("Items"), lake.rows("Items__tombstones"), lake.snapshots("Items"))
    # A 2-hour horizon at the end of window 3 (hour 4) purges deletes committed before hour 2.
    state[W3.window_id] = lake.apply(W3, policies={"tombstone_horizon_seconds": 7200})
    return lake, state


def test_a_late_older_change_loses_to_the_newer_row(applied):
    lake, state = applied
    target, _, _ = state["after W2"]
    assert values_of(target, "v")[1] == ("b1",)
    assert state[W2.window_id].table("Items").superseded_changes == 2


def test_an_older_change_after_a_delete_does_not_resurrect_the_key(applied):
    lake, state = applied
    target, tombstones, _ = state["after W2"]
    assert 2 not in values_of(target, "v")
    assert 2 not in values_of(lake.pyiceberg_rows("Items"), "v")
    assert {row["id"]: bytes(row["_cdc_seq"]) for row in tombstones}[2] == seq(at(1, 10))


def test_a_newer_change_in_a_later_window_applies(applied):
    _, state = applied
    target, tombstones, _ = state["after W2"]
    assert values_of(target, "v")[3] == ("c3",)
    assert 4 not in values_of(target, "v") and 4 in values_of(tombstones, "_cdc_window")


def test_running_an_applied_window_again_changes_nothing(applied):
    _, state = applied
    assert state["after reruns"] == state["after W2"]
    assert state["W1 again"].table("Items").already_applied
    assert state["W2 again"].table("Items").target_snapshot_id == state[W2.window_id].table("Items").target_snapshot_id


def test_every_commit_is_tagged_with_its_window(applied):
    lake, _ = applied
    target_tags = [s["summary"].get(WINDOW_SNAPSHOT_PROPERTY) for s in lake.snapshots("Items")]
    tombstone_tags = [s["summary"].get(WINDOW_SNAPSHOT_PROPERTY) for s in lake.snapshots("Items__tombstones")]
    assert target_tags == [w.window_id for w in (W0, W1, W2, W3)]
    assert tombstone_tags == [w.window_id for w in (W1, W2, W3)]


def test_target_rows_carry_the_cdc_columns_of_their_change(applied):
    lake, _ = applied
    row = next(r for r in lake.rows("Items") if r["id"] == 3)
    assert bytes(row["_cdc_seq"]) == seq(at(2, 5))
    assert row["_cdc_window"] == W2.window_id


def test_tombstones_past_the_horizon_are_purged(applied):
    lake, _ = applied
    assert values_of(lake.rows("Items__tombstones"), "_cdc_window") == {4: (W2.window_id,)}
    assert values_of(lake.pyiceberg_rows("Items__tombstones"), "_cdc_window") == {4: (W2.window_id,)}


def test_history_is_off_by_default(applied):
    lake, _ = applied
    assert not lake.exists("Items__history")
