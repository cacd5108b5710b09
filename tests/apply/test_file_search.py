"""Whether a target MERGE searches for the files to rewrite, and that the session is left as found."""

from __future__ import annotations

from spark_jobs.apply.targets import RUNTIME_GROUP_FILTER, rewrites_nearly_every_file

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
