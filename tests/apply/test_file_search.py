"""Whether a target MERGE searches for the files to rewrite, and that the session is left as found."""

from __future__ import annotations

import pytest

from airflow_cdc.spark_jobs.apply.targets import RUNTIME_GROUP_FILTER, rewrites_nearly_every_file

from .support import Changes, at, window

W0, W1 = window(0), window(1)


def summary(rows: int, files: int) -> dict[str, str]:
    return {"total-records": str(rows), "total-data-files": str(files)}


def test_a_merge_changing_most_rows_of_few_large_files_rewrites_nearly_every_file():
    assert rewrites_nearly_every_file(summary(200_000, 2), changed_keys=150_000)


def test_a_merge_changing_fewer_keys_than_there_are_files_does_not():
    assert not rewrites_nearly_every_file(summary(1_000_000, 1_000), changed_keys=100)


def test_without_totals_or_changed_keys_the_search_is_kept():
    assert not rewrites_nearly_every_file(None, changed_keys=10)
    assert not rewrites_nearly_every_file({}, changed_keys=10)
    assert not rewrites_nearly_every_file(summary(10, 1), changed_keys=0)


def test_the_session_setting_is_as_before_after_a_merge_that_skipped_the_search(lake):
    items = Changes("Items", {"id": "INT64", "v": "STRING"})
    for key in (1, 2, 3):
        items.add(W0, "INSERT", key, {"v": "a"}, when=at(0, key))
        items.add(W1, "UPDATE", key, {"v": "b"}, when=at(1, key))
    lake.write(items)
    lake.apply(W0)
    conf = lake.spark.conf
    before = conf.get(RUNTIME_GROUP_FILTER, None)
    result = lake.apply(W1)
    assert result.table("Items").target_snapshot_id is not None
    assert {row["id"]: row["v"] for row in lake.rows("Items")} == {1: "b", 2: "b", 3: "b"}
    assert conf.get(RUNTIME_GROUP_FILTER, None) == before


# Each table fails in turn, so whichever group commits first, one case fails in it.
@pytest.mark.parametrize("failing, other", [("Items", "Notes"), ("Notes", "Items")])
def test_a_table_failing_in_one_file_search_group_leaves_the_other_groups_tables_committed(
        lake, monkeypatch, failing, other):
    import airflow_cdc.spark_jobs.apply.table_commits as table_commits

    items = Changes("Items", {"id": "INT64", "v": "STRING"})  # W1 rewrites every file: skips the search
    notes = Changes("Notes", {"id": "INT64", "v": "STRING"})  # new in W1: appended, keeps the search
    for key in (1, 2, 3):
        items.add(W0, "INSERT", key, {"v": "a"}, when=at(0, key))
        items.add(W1, "UPDATE", key, {"v": "b"}, when=at(1, key))
        notes.add(W1, "INSERT", key, {"v": "n"}, when=at(1, 10 + key))
    lake.write(items, notes)
    lake.apply(W0)
    after_w1 = {"Items": {1: "b", 2: "b", 3: "b"}, "Notes": {1: "n", 2: "n", 3: "n"}}
    commit_table = table_commits.commit_table

    def failing_commit(spark, config, work):
        if work.plan.source_table == failing:
            raise RuntimeError(f"{failing}' commit failed")
        return commit_table(spark, config, work)

    with monkeypatch.context() as patched:
        patched.setattr(table_commits, "commit_table", failing_commit)
        with pytest.raises(RuntimeError, match=f"{failing}' commit failed"):
            lake.apply(W1)
    assert {row["id"]: row["v"] for row in lake.rows(other)} == after_w1[other]
    lake.apply(W1)  # the re-run makes the missing commits only
    assert {row["id"]: row["v"] for row in lake.rows(failing)} == after_w1[failing]
