"""The apply job's performance strategies change its cost, never its tables: the plain path of
every switch (``spark_jobs/apply/strategies.py``) makes the same rows and counts.

The same history is applied twice, in two namespaces: with every strategy on (the default) and
with every switch off (``strategies.PLAIN``). It is built so that each strategy's own path is
taken when it is on: two new targets (keys guessed), two tables per window (folded and
committed side by side), a table without history (one fold statement) and one with it, a
truncate (the declarations show it), a window that changes nearly every target row (no file
search), a small window against its guard (the guard rows of its keys only; the strategy's
floor is lowered to 10 rows here), and late, revived and dead-lettered changes.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from airflow_cdc.model import ChangeRow, Image, Op
from airflow_cdc.spark_jobs.apply import guard_keys
from airflow_cdc.spark_jobs.apply.commit_threads import side_by_side
from airflow_cdc.spark_jobs.apply.config import ApplyConfig, ApplyConfigError
from airflow_cdc.spark_jobs.apply.strategies import PLAIN, Strategies

from .support import STREAM, Changes, at, seq, window

W0, W1, W2 = window(0), window(1), window(2)
ITEM_TYPES = {"id": "INT64", "v": "STRING", "n": "INT64"}
ORDER_TYPES = {"order_id": "STRING", "amount": "NUMERIC"}
ITEMS = 40
OFF = {field.name: False for field in dataclasses.fields(Strategies)}
COUNTS = ("changes", "upserts", "patches", "deletes", "superseded_changes", "dead_letter_rows", "dead_keys",
          "clashing_keys", "truncates", "truncated_rows", "added_columns")


def _truncate(win, when) -> ChangeRow:
    return ChangeRow(stream=STREAM, window_id=win.window_id, source_table="Orders", op=Op.TRUNCATE,
                     image=Image.FULL, keys={}, new_values=None, old_values=None, column_types={},
                     commit_ts=when, ordering_key=seq(when), event_id=f"truncate@{when.isoformat()}")


def _history() -> tuple[Changes, Changes]:
    items = Changes("Items", ITEM_TYPES)
    for key in range(1, ITEMS + 1):
        items.add(W0, "INSERT", key, {"v": f"a{key}", "n": key}, when=at(0, key))
    for key in range(1, 31):  # nearly every row of the target: the MERGE rewrites every file
        items.add(W1, "UPDATE", key, {"n": 100 + key}, image="PARTIAL", when=at(1, key))
    items.add(W1, "DELETE", 31, when=at(1, 40))
    items.add(W1, "DELETE", 32, when=at(1, 40))
    items.add(W2, "UPDATE", 1, {"v": "late", "n": 0}, when=at(0, 50))  # older than window 1's
    items.add(W2, "INSERT", 31, {"v": "back", "n": 31}, when=at(2, 5))  # revives a deleted key
    items.add(W2, "INSERT", 32, {"v": "zombie", "n": 32}, when=at(0, 55))  # older than its delete
    items.add(W2, "UPDATE", 99, {"n": 9}, image="PARTIAL", when=at(2, 6))  # a key the target lacks
    orders = Changes("Orders", ORDER_TYPES, key="order_id")
    for number, name in enumerate("abc"):
        orders.add(W0, "INSERT", name, {"amount": f"{number}.50"}, when=at(0, number))
    orders.add(W1, "UPDATE", "a", {"amount": "7.25"}, when=at(1, 10))
    orders.rows.append(_truncate(W1, at(1, 20)))
    orders.add(W1, "INSERT", "d", {"amount": "4.00"}, when=at(1, 30))
    orders.add(W2, "UPDATE", "b", {"amount": "9.99"}, when=at(1, 15))  # ordered before the truncate
    orders.add(W2, "UPDATE", "d", {"amount": "5.00"}, when=at(2, 1))
    return items, orders


@pytest.fixture(scope="module")
def both(module_lake):
    """(lake applied with every strategy, lake applied with none, {(namespace, window): result})."""
    taken = module_lake
    plain = taken.sibling("plain")
    items, orders = _history()
    overrides = {"targets": {"history": ["Orders"]}, "policies": {"on_dead_letter": "continue"}}
    results = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(guard_keys, "MIN_GUARD_ROWS", 10)
        for lake, strategies in ((taken, {}), (plain, {"strategies": OFF})):
            for win in (W0, W1, W2):
                lake.write(items, orders, win=win)
            for win in (W0, W1, W2):
                results[lake.namespace, win.window_id] = lake.apply(win, **overrides, **strategies)
    return taken, plain, results


def test_the_plain_paths_make_the_same_tables(both):
    taken, plain, _ = both
    for table, order_by in (
        ("Items", "id"),
        ("Items__tombstones", "id"),
        ("Orders", "order_id"),
        ("Orders__tombstones", "order_id"),
        ("Orders__history", "order_id,_cdc_seq,valid_to"),
    ):
        assert taken.rows(table, order_by) == plain.rows(table, order_by), table
    # A dead letter names its target (its reason, its target_table), whose namespace differs.
    order_by = "source_table,ordering_key"
    mine, theirs = (_same_namespace(lake.rows(f"{STREAM}_dead_letters", order_by)) for lake in (taken, plain))
    assert mine == theirs
    assert mine


def _same_namespace(rows: list[dict]) -> list[dict]:
    def named(value):
        return re.sub(r"\blake\.\w+\.", "lake.<namespace>.", value) if isinstance(value, str) else value

    return [{name: named(value) for name, value in row.items()} for row in rows]


def test_the_plain_paths_count_the_same(both):
    taken, plain, results = both
    for win in (W0, W1, W2):
        for table in ("Items", "Orders"):
            mine = results[taken.namespace, win.window_id].table(table)
            theirs = results[plain.namespace, win.window_id].table(table)
            assert [getattr(mine, c) for c in COUNTS] == [getattr(theirs, c) for c in COUNTS], (win, table)


def test_the_history_takes_each_strategys_own_path(both):
    """The history is what it says: late changes lose, the truncate and the dead letter count."""
    taken, _, results = both
    w1, w2 = results[taken.namespace, W1.window_id], results[taken.namespace, W2.window_id]
    assert w1.table("Items").patches == 30 and w1.table("Orders").truncates == 1
    assert w2.table("Items").superseded_changes == 2 and w2.table("Items").dead_keys == 1
    assert w2.table("Orders").superseded_changes == 1


def test_the_config_turns_a_strategy_off_by_name():
    base = {"stream": "s", "window_id": f"{W0.window_id}", "changelog_table": "cdc.c", "targets": {"namespace": "t"}}
    assert ApplyConfig.from_dict(base).strategies == Strategies()
    config = ApplyConfig.from_dict({**base, "strategies": {"packed_flags": False}})
    assert config.strategies == dataclasses.replace(Strategies(), packed_flags=False)
    assert ApplyConfig.from_dict({**base, "strategies": OFF}).strategies == PLAIN


@pytest.mark.parametrize(
    ("strategies", "message"),
    [
        ({"faster": False}, "strategies: 'faster' is not one of"),
        ({"packed_flags": "no"}, "strategies: packed_flags 'no' must be true or false"),
        (["packed_flags"], "strategies must map switch names to true or false"),
    ],
)
def test_the_config_refuses_an_unknown_switch_or_value(strategies, message):
    base = {"stream": "s", "window_id": f"{W0.window_id}", "changelog_table": "cdc.c", "targets": {"namespace": "t"}}
    with pytest.raises(ApplyConfigError, match=message):
        ApplyConfig.from_dict({**base, "strategies": strategies})


def test_calls_one_after_another_all_run_and_the_first_failure_is_raised():
    ran = []

    def fails(name):
        ran.append(name)
        raise RuntimeError(name)

    with pytest.raises(RuntimeError, match="first"):
        side_by_side([lambda: fails("first"), lambda: ran.append("ok"), lambda: fails("second")], parallel=False)
    assert ran == ["first", "ok", "second"]
