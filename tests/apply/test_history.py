"""SCD type 2 history: one version per applied change, valid_from/valid_to from commit timestamps."""

from __future__ import annotations

from datetime import timezone

import pytest

from .support import Changes, at, normalized, window

W0, W1 = window(0), window(1)
TYPES = {"id": "INT64", "v": "STRING", "n": "INT64"}


@pytest.fixture(scope="module")
def applied(module_lake):
    lake = module_lake
    items = Changes("Items", TYPES)
    items.add(W0, "INSERT", 1, {"v": "a", "n": 1}, when=at(0, 1))
    items.add(W0, "INSERT", 2, {"v": "x", "n": 2}, when=at(0, 2))
    items.add(W1, "UPDATE", 1, {"n": 2}, when=at(1, 1), image="PARTIAL")
    items.add(W1, "UPDATE", 1, {"v": "b", "n": 3}, when=at(1, 2))
    items.add(W1, "DELETE", 2, when=at(1, 3))
    items.add(W1, "INSERT", 2, {"v": "c", "n": 5}, when=at(1, 4))
    lake.write(items)
    for win in (W0, W1):
        lake.apply(win, targets={"history": ["Items"]})
    return lake


def versions(rows: list[dict]) -> list[tuple]:
    return [
        (r["id"], r["v"], r["n"], r["_cdc_op"], r["valid_from"], r["valid_to"])
        for r in normalized(rows)
    ]


def test_history_keeps_a_version_per_change_with_validity_from_commit_timestamps(applied):
    lake = applied
    utc = timezone.utc
    expected = [
        (1, "a", 1, "INSERT", at(0, 1), at(1, 1)),
        (1, "a", 2, "UPDATE", at(1, 1), at(1, 2)),  # a partial image merged onto the previous version
        (1, "b", 3, "UPDATE", at(1, 2), None),
        (2, "x", 2, "INSERT", at(0, 2), at(1, 3)),  # closed by the delete
        (2, "c", 5, "INSERT", at(1, 4), None),
    ]
    expected = [tuple(v.astimezone(utc) if hasattr(v, "astimezone") else v for v in row) for row in expected]
    assert versions(lake.rows("Items__history", order_by="id,valid_from")) == expected
    assert versions(lake.pyiceberg_rows("Items__history", order_by="id,valid_from")) == expected


def test_the_open_versions_of_the_history_are_the_target(applied):
    lake = applied
    current = [
        {k: r[k] for k in ("id", "v", "n", "_cdc_seq", "_cdc_commit_ts", "_cdc_window")}
        for r in lake.rows("Items__history", order_by="id")
        if r["valid_to"] is None
    ]
    assert normalized(current) == normalized(lake.rows("Items"))



def test_the_history_merge_run_again_on_its_own_result_changes_no_version(module_lake, monkeypatch):
    """A window's history MERGE run a second time, reading the table after the first one's
    commit (the race ``table_commits`` narrows to milliseconds), leaves the history as it was."""
    import airflow_cdc.spark_jobs.apply.table_commits as table_commits

    lake = module_lake.sibling("history_again")
    items = Changes("Items", TYPES)
    items.add(W0, "INSERT", 1, {"v": "a", "n": 1}, when=at(0, 1))
    items.add(W0, "INSERT", 2, {"v": "x", "n": 2}, when=at(0, 2))
    items.add(W1, "UPDATE", 1, {"v": "b", "n": 3}, when=at(1, 2))
    items.add(W1, "INSERT", 3, {"v": "c", "n": 5}, when=at(1, 4))
    lake.write(items)
    lake.apply(W0, targets={"history": ["Items"]})
    seen = []
    merge_history = table_commits.merge_history

    def twice(*args):
        merge_history(*args)
        seen.append(versions(lake.rows("Items__history")))
        merge_history(*args[:-1], {})  # untagged: the window's commit stays the first one
        seen.append(versions(lake.rows("Items__history")))

    monkeypatch.setattr(table_commits, "merge_history", twice)
    lake.apply(W1, targets={"history": ["Items"]})
    once, again = seen
    assert len(once) == 4 and again == once
