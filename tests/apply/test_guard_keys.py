"""A small window's guard: only its own keys' guard rows are read, and it decides as the whole
guard does (late older changes lose, deletes stay deleted, newer changes apply).

The same history is applied twice, in two namespaces: with the default config (window 1 has
3 changes against a guard of 40 target rows, so the fold reads the guard of its keys only,
``spark_jobs/apply/guard_keys.py``) and with ``guard_filter_max_rows: 0`` (every key's guard).
The strategy's floor of guard rows (200,000, where it starts to pay) is lowered to 10 here,
so that tables of a few rows take the strategy's path.
"""

from __future__ import annotations

import pytest

from airflow_cdc.spark_jobs.apply import guard_keys
from airflow_cdc.spark_jobs.apply.guard_keys import guard_keys_only

from .support import Changes, Lake, at, values_of, window

W0, W1, W2, W3 = window(0), window(1), window(2), window(3)
TYPES = {"id": "INT64", "v": "STRING"}
KEYS = 40
UNFILTERED = {"guard_filter_max_rows": 0}

SMALL_GUARD_FLOOR = 10


def _history() -> Changes:
    items = Changes("Items", TYPES)
    for key in range(1, KEYS + 1):
        items.add(W0, "INSERT", key, {"v": f"a{key}"}, when=at(0, key))
    items.add(W1, "UPDATE", 1, {"v": "b1"}, when=at(1, 10))
    items.add(W1, "DELETE", 30, when=at(1, 10))
    items.add(W1, "DELETE", 31, when=at(1, 10))
    items.add(W2, "UPDATE", 1, {"v": "late"}, when=at(0, 50))  # older than W1's change of key 1
    items.add(W2, "INSERT", 30, {"v": "zombie"}, when=at(0, 50))  # older than W1's delete of key 30
    items.add(W2, "INSERT", 31, {"v": "back"}, when=at(2, 5))  # newer than W1's delete of key 31
    items.add(W2, "UPDATE", 5, {"v": "c5"}, when=at(2, 5))
    items.add(W3, "UPDATE", 6, {"v": "d6"}, when=at(3, 5))
    return items


@pytest.fixture(scope="module")
def both(module_lake):
    """(lake read with the window's keys' guard, lake read with every key's guard, results)."""
    keyed = module_lake
    whole = keyed.sibling("whole")
    items = _history()
    results = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(guard_keys, "MIN_GUARD_ROWS", SMALL_GUARD_FLOOR)
        for lake, overrides in ((keyed, {}), (whole, UNFILTERED)):
            applied = lake.replay(items, [W0, W1, W2, W3], [W0, W1, W2], **overrides)
            results.update({(lake.namespace, window_id): result for window_id, result in applied.items()})
    return keyed, whole, results


def test_a_small_windows_guard_still_makes_late_older_changes_lose(both):
    keyed, _, results = both
    target = values_of(keyed.rows("Items"), "v")
    assert target[1] == ("b1",)  # the late update lost to window 1's newer one
    assert 30 not in target  # the older insert did not bring the deleted key back
    assert target[31] == ("back",) and target[5] == ("c5",)  # newer changes applied
    assert results[keyed.namespace, W2.window_id].table("Items").superseded_changes == 2


def test_the_window_keys_guard_decides_as_every_keys_guard_does(both):
    keyed, whole, results = both
    assert keyed.rows("Items") == whole.rows("Items")
    assert keyed.rows("Items__tombstones") == whole.rows("Items__tombstones")
    for win in (W1, W2):
        mine, theirs = results[keyed.namespace, win.window_id], results[whole.namespace, win.window_id]
        counts = ("upserts", "patches", "deletes", "superseded_changes", "dead_keys")
        assert [getattr(mine.table("Items"), c) for c in counts] == [getattr(theirs.table("Items"), c) for c in counts]


def _fold_plan(lake: Lake, overrides: dict, monkeypatch) -> str:
    """The physical plan of window 3's fold statement (not applied)."""
    from airflow_cdc.spark_jobs.apply import table_fold

    plans = []
    fold_statement = table_fold.folded_changes

    def folded_changes(*args, **kwargs):
        frame = fold_statement(*args, **kwargs)
        plans.append(frame._jdf.queryExecution().executedPlan().toString())
        return frame

    monkeypatch.setattr(table_fold, "folded_changes", folded_changes)
    with lake.folded(W3, **overrides):
        pass
    [plan] = plans
    return plan


def test_a_small_window_joins_the_guard_with_its_own_keys(both, monkeypatch):
    monkeypatch.setattr(guard_keys, "MIN_GUARD_ROWS", SMALL_GUARD_FLOOR)
    keyed, _, _ = both
    plan = _fold_plan(keyed, {}, monkeypatch)
    assert "LeftSemi" in plan and "BroadcastHashJoin" in plan


def test_with_the_strategy_off_the_fold_reads_every_keys_guard(both, monkeypatch):
    monkeypatch.setattr(guard_keys, "MIN_GUARD_ROWS", SMALL_GUARD_FLOOR)
    keyed, _, _ = both
    assert "LeftSemi" not in _fold_plan(keyed, UNFILTERED, monkeypatch)


@pytest.mark.parametrize(
    ("window_rows", "guard_rows", "max_rows", "expected"),
    [
        (1_000, 2_000_000, 500_000, True),  # small against its guard
        (100_000, 399_999, 500_000, False),  # a guard under 4 rows per change: not worth a join
        (1_000, 199_999, 500_000, False),  # a guard small enough to sort whole
        (600_000, 10_000_000, 500_000, False),  # too many keys to broadcast
        (1_000, 2_000_000, 0, False),  # the strategy turned off
    ],
)
def test_the_guard_is_read_for_the_windows_keys_only_when_the_window_is_small(
    window_rows, guard_rows, max_rows, expected
):
    assert guard_keys_only(window_rows, guard_rows, max_rows) is expected
