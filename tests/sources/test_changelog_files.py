"""The extract's direct write: read tasks write the changelog's Parquet files, the driver
commits them in the window's one tagged commit (spark_jobs/sources/task_files.py,
spark_jobs/changelog_files.py)."""

from __future__ import annotations

import os
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc.model import CHANGELOG_COLUMNS
from airflow_cdc.sources.base import ChangeSource
from airflow_cdc.spark_jobs.sources.base import SparkSide
from airflow_cdc.spark_jobs.sources.task_files import TaskFiles

DAY = datetime(2024, 5, 1, 23, 59, 58, tzinfo=timezone.utc)
NAMES = [name for name, _ in CHANGELOG_COLUMNS]


class PlainSource(ChangeSource):
    """A source that hands every row on as it is read (the change streams' case)."""

    kind = "plain"


class DedupingSide(SparkSide):
    """A Spark side that drops rows (the at-least-once sources' case)."""

    rows_pass_through = False

    def drop_repeats(self, spark, plan, frame):
        return frame


def batch(count: int, start: datetime = DAY, table: str = "orders"):
    """``count`` changelog rows a second apart (an Arrow batch, as a read task has them)."""
    import pyarrow as pa

    from airflow_cdc.spark_jobs.sources.read_frame import _rows_batch

    rows = []
    for n in range(count):
        record = dict.fromkeys(NAMES)
        record.update(stream="s", window_id="w", source_table=table, op="INSERT", image="NEW_ROW",
                      keys={"id": str(n)}, new_values={"id": str(n), "note": None},
                      column_types_json='{"id":"INT64"}', commit_ts=start + timedelta(seconds=n),
                      ordering_key=n.to_bytes(8, "big"), event_id=f"e{n}")
        rows.append(tuple(record[name] for name in NAMES))
    made = _rows_batch("row", rows)
    assert isinstance(made, pa.RecordBatch)
    return made


@pytest.fixture
def table(spark):
    from airflow_cdc.spark_jobs.changelog import create_changelog_table

    name = f"lake.changelog_files.t_{uuid.uuid4().hex[:8]}"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.changelog_files")
    create_changelog_table(spark, name)
    return name


def sink_of(spark, table, min_task_rows=0):
    import dataclasses

    from airflow_cdc.spark_jobs.changelog_files import file_sink

    sink = file_sink(spark, table)
    assert sink is not None
    return dataclasses.replace(sink, min_task_rows=min_task_rows)


def written(sink, *batches):
    files = TaskFiles(sink)
    for each in batches:
        files.write(each)
    return files.close()


def test_a_read_task_with_few_rows_hands_them_back_and_writes_no_file(spark, table):
    files, declared, held = written(sink_of(spark, table, min_task_rows=10), batch(5))
    assert (files, declared, sum(b.num_rows for b in held)) == ([], [], 5)


def test_a_read_task_past_its_threshold_writes_every_row_a_file_per_day(spark, table):
    files, declared, held = written(sink_of(spark, table, min_task_rows=10), batch(5), batch(6, DAY + timedelta(seconds=5)))
    assert held == []
    assert sorted((f.day, f.rows) for f in files) == [("2024-05-01", 2), ("2024-05-02", 9)]
    assert all(os.path.getsize(f.path.removeprefix("file:")) == f.size for f in files)
    assert [(t, n, first) for t, _, n, first in declared] == [("orders", 11, DAY)]


def test_committed_files_are_read_back_by_their_field_ids_in_their_day_partitions(spark, table):
    from airflow_cdc.spark_jobs.changelog_files import ChangelogFiles

    files, declared, _ = written(sink_of(spark, table), batch(3))
    ChangelogFiles(tuple(files), tuple(declared)).append(spark, table, {"airflow-cdc.window-id": "w"}, None)

    rows = spark.sql(f"SELECT keys['id'] AS id, new_values, commit_ts, event_id FROM {table} ORDER BY id").collect()
    assert [(r.id, r.new_values, r.event_id) for r in rows] == [
        (str(n), {"id": str(n), "note": None}, f"e{n}") for n in range(3)]
    assert sorted(r.day for r in spark.sql(f"SELECT partition.commit_ts_day AS day FROM {table}.files")
                  .collect()) == [datetime(2024, 5, 1).date(), datetime(2024, 5, 2).date()]
    [snapshot] = spark.sql(f"SELECT operation, summary FROM {table}.snapshots").collect()
    assert (snapshot.operation, snapshot.summary["airflow-cdc.window-id"]) == ("append", "w")
    bounds = spark.sql(f"SELECT readable_metrics.event_id.lower_bound AS low FROM {table}.files").collect()
    assert sorted(r.low for r in bounds) == ["e0", "e2"]  # metrics from the footers: files prune


def test_a_commit_after_the_snapshot_the_job_read_conflicts_and_deletes_its_files(spark, table):
    from airflow_cdc.spark_jobs.changelog_files import ChangelogFiles
    from airflow_cdc.spark_jobs.commits import current_snapshot_id, is_commit_conflict

    sink = sink_of(spark, table)
    read_at = current_snapshot_id(spark, table)
    winner, loser = (ChangelogFiles(*(tuple(part) for part in written(sink, batch(2))[:2])) for _ in range(2))
    winner.append(spark, table, {"airflow-cdc.window-id": "w"}, read_at)

    with pytest.raises(Exception) as raised:
        loser.append(spark, table, {"airflow-cdc.window-id": "w"}, read_at)
    assert is_commit_conflict(raised.value)
    assert [os.path.exists(f.path.removeprefix("file:")) for f in loser.files] == [False]
    assert spark.table(table).count() == 2


def test_spark_writes_the_rows_of_a_table_or_source_the_read_tasks_cannot_write_for(
    spark, table, monkeypatch
):
    from airflow_cdc.spark_jobs.changelog_files import DirectFileWriter, SparkWriter, changelog_writer

    source = PlainSource({})
    assert isinstance(changelog_writer(spark, table, source, SparkSide(source)), DirectFileWriter)
    # a source that drops rows
    assert isinstance(changelog_writer(spark, table, source, DedupingSide(source)), SparkWriter)
    monkeypatch.setenv("CDC_DIRECT_CHANGELOG", "false")
    assert isinstance(changelog_writer(spark, table, source, SparkSide(source)), SparkWriter)
    monkeypatch.delenv("CDC_DIRECT_CHANGELOG")
    spark.sql(f"ALTER TABLE {table} WRITE ORDERED BY event_id")
    assert isinstance(changelog_writer(spark, table, source, SparkSide(source)), SparkWriter)


def test_a_gcs_location_behind_an_overridden_endpoint_is_left_to_spark():
    from airflow_cdc.spark_jobs.changelog_files import endpoint_overridden

    assert endpoint_overridden("gs://lake/t/data", "http://127.0.0.1:4443/")


def test_a_gcs_location_at_google_and_a_local_one_behind_an_emulator_are_written_directly():
    from airflow_cdc.spark_jobs.changelog_files import endpoint_overridden

    assert not endpoint_overridden("gs://lake/t/data", "")
    assert not endpoint_overridden("file:/tmp/lake/t/data", "http://127.0.0.1:4443/")
