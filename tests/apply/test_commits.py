"""Window-tagged commits: a commit just made is read from table metadata, and found by search."""

from __future__ import annotations

from spark_jobs.apply.commits import _iceberg_table, append_tagged, own_window_commit, window_commit, window_properties


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
