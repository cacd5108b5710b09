"""Truncates (Op.TRUNCATE): the target loses every row ordered before the truncate, changes
after it land, and a change ordered before it never lands, even when it arrives in a later
window; a re-run of the truncating window changes nothing (I1).

Window 0 fills the table; window 1 updates key 1, truncates (between the update and a later
insert of key 5), and re-inserts key 2 after it; window 2 brings a late change of key 3
ordered before the truncate and a new change of key 6 after it; window 1 then runs again.
"""

from __future__ import annotations

import pytest

from airflow_cdc.model import ChangeRow, Image, Op

from .support import STREAM, Changes, at, seq, values_of, window

W0, W1, W2 = window(0), window(1), window(2)
TYPES = {"id": "INT64", "v": "STRING"}
TRUNCATED_AT = at(1, 20)


def truncate_row(win, when) -> ChangeRow:
    return ChangeRow(stream=STREAM, window_id=win.window_id, source_table="Items", op=Op.TRUNCATE,
                     image=Image.FULL, keys={}, new_values=None, old_values=None, column_types={},
                     commit_ts=when, ordering_key=seq(when), event_id=f"truncate@{when.isoformat()}")


@pytest.fixture(scope="module")
def applied(module_lake):
    lake = module_lake
    items = Changes("Items", TYPES)
    for key in range(1, 5):
        items.add(W0, "INSERT", key, {"v": f"a{key}"}, when=at(0, key))
    items.add(W1, "UPDATE", 1, {"v": "before-truncate"}, when=at(1, 10))
    items.rows.append(truncate_row(W1, TRUNCATED_AT))
    items.add(W1, "INSERT", 2, {"v": "after-truncate"}, when=at(1, 30))
    items.add(W1, "INSERT", 5, {"v": "new"}, when=at(1, 40))
    items.add(W2, "UPDATE", 3, {"v": "late"}, when=at(1, 15))  # ordered before the truncate
    items.add(W2, "INSERT", 6, {"v": "w2"}, when=at(2, 5))
    for win in (W0, W1, W2):
        lake.write(items, win=win)
    state = {"W0": lake.apply(W0, targets={"history": ["Items"]})}
    state["W1"] = lake.apply(W1, targets={"history": ["Items"]})
    state["after W1"] = lake.rows("Items")
    state["W2"] = lake.apply(W2, targets={"history": ["Items"]})
    state["after W2"] = lake.rows("Items")
    snapshots = len(lake.snapshots("Items"))
    state["W1 again"] = lake.apply(W1, targets={"history": ["Items"]})
    state["after rerun"] = (lake.rows("Items"), len(lake.snapshots("Items")) - snapshots)
    return lake, state


def test_a_truncate_removes_every_row_ordered_before_it(applied):
    _, state = applied
    assert values_of(state["after W1"], "v") == {2: ("after-truncate",), 5: ("new",)}
    result = state["W1"].table("Items")
    assert (result.truncates, result.truncated_rows) == (1, 3)  # keys 1, 3, 4 (2 was re-inserted)


def test_a_change_of_the_truncating_window_ordered_before_it_is_superseded(applied):
    _, state = applied
    assert state["W1"].table("Items").superseded_changes == 1  # key 1's update


def test_a_late_change_ordered_before_the_truncate_never_lands(applied):
    lake, state = applied
    assert values_of(state["after W2"], "v") == {2: ("after-truncate",), 5: ("new",), 6: ("w2",)}
    assert values_of(lake.pyiceberg_rows("Items"), "v") == values_of(state["after W2"], "v")
    assert state["W2"].table("Items").superseded_changes == 1


def test_rerunning_the_truncating_window_changes_nothing(applied):
    _, state = applied
    rows, new_snapshots = state["after rerun"]
    assert rows == state["after W2"]
    assert new_snapshots == 0
    assert state["W1 again"].table("Items").truncated_rows == 3  # as recorded by its commit


def test_a_truncate_closes_the_open_history_versions_before_it(applied):
    lake, _ = applied
    history = lake.rows("Items__history", order_by="id,valid_from")
    open_keys = sorted(row["id"] for row in history if row["valid_to"] is None)
    assert open_keys == [2, 5, 6]
    closed_at = {row["id"]: row["valid_to"] for row in history if row["id"] in (3, 4)}
    assert all(value is not None for value in closed_at.values())
