"""The changelog writer, submitted with spark-submit and read back with Spark.

The window history's submits and the refused window run in one warm driver
(the ``warm`` fixture of ``conftest.py``, one Spark application for the module); the empty window runs
cold with :class:`LocalSparkRunner`, a spark-submit of its own, so both runners write here.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from airflow_cdc.spark.iceberg import IcebergCatalog
from airflow_cdc.spark.job import ChangelogWriteResult, SparkJobError, changelog_writer_spec
from airflow_cdc.spark.runners import LocalSparkRunner
from .support import (
    TEST_SPARK_CONF,
    TableReader,
    change_rows,
    expected_records,
    open_warehouse,
    window,
    write_change_rows,
)

TABLE = "cdc.orders_changelog"
WINDOW_1 = window(23)  # 2024-05-01 23:00-24:00
WINDOW_2 = window(24)  # 2024-05-02 00:00-01:00: the next day
ROWS_1 = change_rows(WINDOW_1, 4, first_key=1)  # commits at 23:05 ... 23:35
ROWS_2 = change_rows(WINDOW_2, 2, first_key=100)


@dataclass(frozen=True)
class Observed:
    """What one submit reported and what the table held right after it."""

    result: ChangelogWriteResult
    snapshots: list[dict]
    records: list[dict]


def submit(runner, catalog: IcebergCatalog, folder, step: str, window_id: str, rows,
           table: str = TABLE) -> ChangelogWriteResult:
    rows_file = write_change_rows(folder / f"{step}.jsonl", rows)
    result_file = folder / f"{step}.result.json"
    spec = changelog_writer_spec(
        catalog, table, window_id, rows_file, result_file, conf=TEST_SPARK_CONF
    )
    runner.run(spec)
    return ChangelogWriteResult.read(result_file)


@dataclass(frozen=True)
class History:
    steps: dict[str, Observed]
    tables: TableReader


@pytest.fixture(scope="module")
def history(spark, warm) -> History:
    """Window 1 written, window 1 submitted again, then window 2: observed after each submit.

    Shared by the tests below, which only read it (three submits instead of six).
    """
    runner, catalog, folder = warm
    tables = open_warehouse(spark, folder / "warehouse")
    observed = {}
    for step, w, rows in (
        ("first", WINDOW_1, ROWS_1),
        ("again", WINDOW_1, ROWS_1),
        ("second", WINDOW_2, ROWS_2),
    ):
        result = submit(runner, catalog, folder, step, w.window_id, rows)
        observed[step] = Observed(result, tables.snapshots(TABLE), tables.records(TABLE))
    return History(observed, tables)


def test_first_window_rows_are_in_the_changelog_exactly_as_extracted(history):
    assert history.steps["first"].records == expected_records(ROWS_1)
    assert history.steps["first"].result.rows_written == 4
    assert history.steps["first"].result.skipped is False


def test_first_window_is_one_append_snapshot_tagged_with_the_window(history):
    first = history.steps["first"]
    assert [(s["operation"], s["window_id"], s["added_records"]) for s in first.snapshots] == [
        ("append", WINDOW_1.window_id, 4)
    ]
    assert first.result.snapshot_id == first.snapshots[0]["snapshot_id"]


def test_rerunning_a_window_adds_no_snapshot_and_no_row(history):
    first, again = history.steps["first"], history.steps["again"]
    assert again.snapshots == first.snapshots
    assert again.records == first.records
    assert (again.result.skipped, again.result.rows_written) == (True, 0)
    assert again.result.snapshot_id == first.result.snapshot_id


def test_second_window_appends_a_second_tagged_snapshot(history):
    second = history.steps["second"]
    assert [(s["window_id"], s["added_records"]) for s in second.snapshots] == [
        (WINDOW_1.window_id, 4),
        (WINDOW_2.window_id, 2),
    ]
    assert second.result.snapshot_id == second.snapshots[1]["snapshot_id"]
    assert second.records == expected_records(ROWS_1 + ROWS_2)


def test_changelog_is_partitioned_by_day_of_commit_timestamp(history):
    # Window 1 (2024-05-01 23:xx) and window 2 (2024-05-02 00:xx) land in two day partitions.
    assert history.tables.day_partitions(TABLE) == [("2024-05-01", 4), ("2024-05-02", 2)]


def test_empty_window_commits_one_tagged_snapshot_without_rows(tmp_path, spark):
    # The gate and re-runs must tell "extracted, zero changes" from "never extracted".
    catalog = IcebergCatalog(warehouse=str(tmp_path / "warehouse"))
    result = submit(LocalSparkRunner(master="local[2]"), catalog, tmp_path, "empty", WINDOW_1.window_id, [])
    tables = open_warehouse(spark, tmp_path / "warehouse")
    assert [(s["window_id"], s["added_records"]) for s in tables.snapshots(TABLE)] == [
        (WINDOW_1.window_id, 0)
    ]
    assert tables.records(TABLE) == []
    assert (result.rows_written, result.skipped) == (0, False)


def test_rows_of_another_window_are_refused_before_anything_is_written(tmp_path, spark, warm):
    runner, catalog, folder = warm
    mixed = ROWS_1[:2] + ROWS_2[:1]
    with pytest.raises(SparkJobError) as refused:
        submit(runner, catalog, tmp_path, "mixed", WINDOW_1.window_id, mixed, table="cdc.refused_changelog")
    assert "WindowMismatchError" in refused.value.reason
    assert f"'{WINDOW_2.window_id}' (1 rows)" in refused.value.reason
    assert not open_warehouse(spark, folder / "warehouse").exists("cdc.refused_changelog")
    assert not (tmp_path / "mixed.result.json").exists()
