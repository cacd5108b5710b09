"""airflow_cdc.spark_jobs.changelog used in-process by other jobs (extract): extra snapshot properties."""

from __future__ import annotations

from airflow_cdc.spark_jobs.changelog import (
    append_window,
    change_row_tuple,
    changelog_schema,
    create_changelog_table,
    snapshot_summary,
)

from .support import change_rows, open_warehouse, window

WINDOW = window(3)


def test_extra_snapshot_properties_are_committed_in_the_window_snapshot(tmp_path, spark):
    from airflow_cdc.model import change_row_to_json_line

    tables = open_warehouse(spark, tmp_path / "warehouse")
    table = f"{tables.catalog}.cdc.orders_changelog"
    create_changelog_table(spark, table)
    rows = [change_row_tuple(change_row_to_json_line(row)) for row in change_rows(WINDOW, 2)]
    frame = spark.createDataFrame(rows, changelog_schema())

    snapshot_id = append_window(
        spark, table, WINDOW.window_id, frame,
        extra_properties={"airflow-cdc.outcome-file": "/plans/w3.outcome.json"},
    )

    summary = snapshot_summary(spark, table, snapshot_id)
    assert summary["airflow-cdc.window-id"] == WINDOW.window_id
    assert summary["airflow-cdc.outcome-file"] == "/plans/w3.outcome.json"
    assert summary["added-records"] == "2"


def test_a_changelog_table_of_the_old_json_text_format_is_refused_before_any_write(tmp_path, spark):
    import pytest

    from airflow_cdc.spark_jobs.changelog import ChangelogFormatError

    tables = open_warehouse(spark, tmp_path / "warehouse")
    table = f"{tables.catalog}.cdc.legacy_changelog"
    spark.sql(
        f"CREATE TABLE {table} (stream string, window_id string, keys_json string, "
        f"new_values_json string, commit_ts timestamp) USING iceberg"
    )

    with pytest.raises(ChangelogFormatError) as refused:
        create_changelog_table(spark, table)

    message = str(refused.value)
    assert "keys map<string,string> (found: no such column)" in message
    assert "['keys_json', 'new_values_json']" in message and "new changelog table" in message
    assert spark.sql(f"SELECT * FROM {table}.snapshots").count() == 0


def test_a_checked_append_of_an_empty_window_still_makes_its_tagged_commit(tmp_path, spark):
    tables = open_warehouse(spark, tmp_path / "warehouse")
    table = f"{tables.catalog}.cdc.empty_changelog"
    create_changelog_table(spark, table)
    frame = spark.createDataFrame([], changelog_schema())

    snapshot_id = append_window(spark, table, WINDOW.window_id, frame, read_at=None)

    summary = snapshot_summary(spark, table, snapshot_id)
    assert summary["airflow-cdc.window-id"] == WINDOW.window_id
    assert spark.table(table).count() == 0


def test_a_checked_append_after_another_commit_of_the_window_conflicts(tmp_path, spark):
    import pytest

    from airflow_cdc.model import change_row_to_json_line
    from airflow_cdc.spark_jobs.commits import current_snapshot_id, is_commit_conflict

    tables = open_warehouse(spark, tmp_path / "warehouse")
    table = f"{tables.catalog}.cdc.raced_changelog"
    create_changelog_table(spark, table)
    read_at = current_snapshot_id(spark, table)
    rows = [change_row_tuple(change_row_to_json_line(row)) for row in change_rows(WINDOW, 2)]
    frame = spark.createDataFrame(rows, changelog_schema())
    append_window(spark, table, WINDOW.window_id, frame, read_at=read_at)  # the other job's

    with pytest.raises(Exception) as refused:
        append_window(spark, table, WINDOW.window_id, frame, read_at=read_at)

    assert is_commit_conflict(refused.value)
    assert spark.table(table).count() == 2


def test_a_window_whose_rows_interleave_two_days_is_committed_whole(tmp_path, spark):
    from airflow_cdc.model import change_row_to_json_line

    tables = open_warehouse(spark, tmp_path / "warehouse")
    table = f"{tables.catalog}.cdc.midnight_changelog"
    create_changelog_table(spark, table)
    midnight = window(23)  # 23:00-24:00; rows alternate between the two days' partitions
    rows = [change_row_tuple(change_row_to_json_line(row)) for row in change_rows(midnight, 12)]
    rows = [r for pair in zip(rows[:6], rows[6:]) for r in pair]
    frame = spark.createDataFrame(rows, changelog_schema()).repartition(2)

    snapshot_id = append_window(spark, table, midnight.window_id, frame)

    summary = snapshot_summary(spark, table, snapshot_id)
    assert summary["added-records"] == "12"
    days = spark.sql(f"SELECT to_date(commit_ts) AS d, count(*) AS n FROM {table} GROUP BY 1").collect()
    assert sorted(row.n for row in days) == [6, 6]
    assert spark.table(table).select("event_id").distinct().count() == 12
