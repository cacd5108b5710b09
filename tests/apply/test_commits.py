"""Window-tagged commits: a commit just made is read from table metadata, and found by search."""

from __future__ import annotations

from airflow_cdc.spark_jobs.commits import (
    _iceberg_table,
    _metadata_snapshots,
    _snapshots_table_commit,
    append_tagged,
    own_window_commit,
    window_commit,
    window_properties,
)

from .support import Changes, at, window

W0, W1 = window(0), window(1)


def _commit(lake, name: str, window_id: str) -> str:
    table = lake.table(name)
    lake.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{lake.namespace}")
    lake.spark.sql(f"CREATE TABLE IF NOT EXISTS {table} (id bigint) USING iceberg")
    append_tagged(lake.spark.range(3), table, window_properties(window_id, {"counts": {"upserts": 3}}))
    return table


def test_the_iceberg_table_is_loaded_through_the_catalog_without_sql(lake):
    table = _commit(lake, "loaded", "w1")
    assert _iceberg_table(lake.spark, table) is not None
    assert _iceberg_table(lake.spark, lake.table("missing")) is None


def test_a_commit_just_made_is_the_one_the_snapshot_search_finds(lake):
    table = _commit(lake, "made", "w1")
    _commit(lake, "made", "w2")
    own = own_window_commit(lake.spark, table, "w2")
    assert own == window_commit(lake.spark, table, "w2")
    assert own.apply_properties() == {"counts": {"upserts": 3}}


def test_a_commit_another_writer_followed_is_still_found(lake):
    table = _commit(lake, "followed", "w1")
    lake.spark.sql(f"INSERT INTO {table} VALUES (9)")  # not tagged: the current snapshot is not ours
    assert own_window_commit(lake.spark, table, "w1") == window_commit(lake.spark, table, "w1")
    assert own_window_commit(lake.spark, table, "w1") is not None


def test_a_tables_commits_made_side_by_side_run_in_the_callers_job_group(lake):
    items = Changes("Items", {"id": "INT64", "v": "STRING"})
    for key in (1, 2):
        items.add(W0, "INSERT", key, {"v": "a"}, when=at(0, key))
    items.add(W1, "UPDATE", 1, {"v": "b"}, when=at(1, 1))
    items.add(W1, "DELETE", 2, when=at(1, 2))  # a target MERGE and a tombstone commit, side by side
    lake.write(items)
    lake.apply(W0)
    context = lake.spark.sparkContext
    tracker = context.statusTracker()
    ungrouped_before = set(tracker.getJobIdsForGroup(None))
    context.setJobGroup("cdc-apply-test", "apply W1")
    try:
        result = lake.apply(W1)
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
        context.setLocalProperty("spark.job.description", None)
    assert result.table("Items").tombstone_snapshot_id is not None
    assert tracker.getJobIdsForGroup("cdc-apply-test")
    assert set(tracker.getJobIdsForGroup(None)) == ungrouped_before


def test_the_metadata_search_finds_the_oldest_tagged_commit_as_the_snapshots_table_does(lake):
    table = _commit(lake, "searched", "w1")
    _commit(lake, "searched", "w2")
    _commit(lake, "searched", "w1")  # a second commit tagged w1 (another writer's): the oldest counts
    assert len(_metadata_snapshots(lake.spark, table)) == 3  # the metadata path, not its fallback
    found = {w: window_commit(lake.spark, table, w) for w in ("w1", "w2", "w3")}
    assert found == {w: _snapshots_table_commit(lake.spark, table, w) for w in ("w1", "w2", "w3")}
    assert found["w3"] is None
    assert found["w2"].parent_id == found["w1"].snapshot_id


def test_the_windows_checkpointed_frames_are_freed_when_the_job_ends(lake):
    items = Changes("Items", {"id": "INT64", "v": "STRING"})
    for key in range(1, 50):
        items.add(W0, "INSERT", key, {"v": "a"}, when=at(0, key))
    lake.write(items)
    context = lake.spark.sparkContext
    persisted_before = {info.id() for info in context._jsc.sc().getRDDStorageInfo()}
    lake.apply(W0, targets={"history": True})  # history checkpoints the ordered changes too
    persisted_after = {info.id() for info in context._jsc.sc().getRDDStorageInfo()}
    assert persisted_after <= persisted_before
