"""The dead-letter policy: ``fail`` (the default) stops the window before targets change;
``continue`` applies the rest. Either way the dead letters are written once, with the reason."""

from __future__ import annotations

import pytest

from airflow_cdc.model import WINDOW_SNAPSHOT_PROPERTY
from airflow_cdc.spark_jobs.apply import DeadLettersError

from .support import Changes, at, values_of, window

W0 = window(0)


@pytest.fixture(scope="module")
def runs(module_lake):
    lake = module_lake
    items = Changes("Items", {"id": "INT64", "v": "STRING"})
    items.add(W0, "INSERT", 1, {"v": "good"}, when=at(0, 1))
    items.add(W0, "UPDATE", 2, {"v": "orphan"}, when=at(0, 2), image="PARTIAL")
    lake.write(items)
    with pytest.raises(DeadLettersError) as failed:
        lake.apply(W0)
    state = {"error": failed.value, "target after fail": lake.rows("Items") if lake.exists("Items") else []}
    state["dead letters after fail"] = lake.rows("orders_dead_letters", order_by="to_json(keys)")
    state["continued"] = lake.apply(W0, policies={"on_dead_letter": "continue"})
    return lake, state


def test_a_window_with_dead_letters_fails_by_default_before_targets_change(runs):
    _, state = runs
    assert state["error"].result.status == "failed"
    assert "on_dead_letter='fail'" in str(state["error"])
    assert state["target after fail"] == []


def test_the_dead_letters_of_a_failed_window_are_written_with_the_reason(runs):
    _, state = runs
    (row,) = state["dead letters after fail"]
    assert row["keys"] == {"id": "2"} and row["window_id"] == W0.window_id
    assert "does not hold" in row["reason"]


def test_the_continue_policy_applies_the_rest_without_duplicating_dead_letters(runs):
    lake, state = runs
    assert values_of(lake.rows("Items"), "v") == {1: ("good",)}
    assert lake.rows("orders_dead_letters", order_by="to_json(keys)") == state["dead letters after fail"]
    tags = [s["summary"].get(WINDOW_SNAPSHOT_PROPERTY) for s in lake.snapshots("orders_dead_letters")]
    assert tags == [W0.window_id]
    assert state["continued"].dead_letter_rows == 1
