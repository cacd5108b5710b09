"""What differs between Spark 3.5 and Spark 4 (spark_jobs/spark_line.py), run on the suite's
session: `make test` proves each rule on Spark 3.5, `make test-spark4` on Spark 4.1."""

from __future__ import annotations

import itertools

import pytest

from airflow_cdc.spark_jobs.apply.sql import frame
from airflow_cdc.spark_jobs.spark_line import read_at_snapshot, sql_with_args

_tables = itertools.count()


@pytest.fixture
def table(spark):
    name = f"lake.spark_line.t{next(_tables)}"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.spark_line")
    spark.sql(f"CREATE TABLE {name} (id bigint, v string) USING iceberg")
    return name


def test_named_parameters_are_bound_with_the_iceberg_extensions_on_the_sessions_spark(spark, table):
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")

    rows = sql_with_args(spark, f"SELECT v FROM {table} WHERE id = :id", {"id": 2}).collect()

    assert [r.v for r in rows] == ["b"]


def test_a_table_read_at_a_snapshot_has_only_that_snapshots_rows(spark, table):
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a')")
    first = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()[0].snapshot_id
    spark.sql(f"INSERT INTO {table} VALUES (2, 'b')")

    assert [r.id for r in read_at_snapshot(spark, table, first).collect()] == [1]


def test_a_frame_on_an_analysed_plan_gives_the_querys_rows(spark, table):
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")

    rows = frame(spark, f"SELECT id FROM {table} WHERE v = 'b'").collect()

    assert [r.id for r in rows] == [2]
