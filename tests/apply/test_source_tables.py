"""The commits a source with its own apply makes through ``WindowTables`` (Bigtable's cells)."""

from __future__ import annotations

from airflow_cdc.model import WINDOW_SNAPSHOT_PROPERTY

from .support import window

W0 = window(0)


def _tables(lake):
    from airflow_cdc.spark_jobs.apply.config import ApplyConfig
    from airflow_cdc.spark_jobs.apply.source_tables import WindowTables

    config = {"catalog": "lake", "stream": "s", "window_id": W0.window_id, "changelog_table": "x.changelog",
              "targets": {"namespace": lake.namespace}}
    return WindowTables(lake.spark, ApplyConfig.from_dict(config))


def test_a_merge_whose_window_commit_another_apply_made_meanwhile_is_not_run(module_lake):
    lake = module_lake.sibling("own_merge")
    table = lake.table("Own_latest")
    first, late = _tables(lake), _tables(lake)  # the retry, and an orphan that folded earlier
    first.create(table, "k bigint, v string")
    spark = lake.spark
    first.merge(spark.createDataFrame([(1, "a", "U"), (2, "b", "U")], "k bigint, v string, action string"),
                table, ["k"], {"upserts": 2})
    late.merge(spark.createDataFrame([(1, "stale", "U"), (2, None, "D")], "k bigint, v string, action string"),
               table, ["k"], {"upserts": 1})

    assert sorted(tuple(r) for r in spark.table(table).collect()) == [(1, "a"), (2, "b")]
    tags = [s["summary"].get(WINDOW_SNAPSHOT_PROPERTY) for s in lake.snapshots("Own_latest")]
    assert tags == [W0.window_id]
