"""The SQL text the fold is built from: literals, staged queries, frames over views."""

from __future__ import annotations

import uuid


def test_a_string_literal_reads_back_as_the_same_text(spark):
    from airflow_cdc.spark_jobs.apply.sql import string

    texts = ["plain", "it's", "back\\slash", "\\'", "two\nlines", "tab\there", "é ü \u0001", "{braces} :param ?", "",
             "${env:HOME} ${spark.app.name} $"]  # not substituted by Spark
    row = spark.sql("SELECT " + ", ".join(f"{string(t)} AS c{i}" for i, t in enumerate(texts))).first()
    assert [row[f"c{i}"] for i in range(len(texts))] == texts


def test_a_quoted_name_reads_a_column_whose_name_needs_quoting(spark):
    from airflow_cdc.spark_jobs.apply.sql import name

    frame = spark.createDataFrame([(1,)], "`odd name` int")
    assert frame.selectExpr(f"{name('odd name')} + 1 AS v").first().v == 2


def test_each_stage_of_a_query_reads_the_one_before(spark):
    from airflow_cdc.spark_jobs.apply.sql import Query, frame, temp_views

    numbers = spark.range(6)
    with temp_views(spark, {"numbers": numbers}) as views:
        query = Query(views["numbers"])
        query.select(["id", "id * 10 AS tens"], where="id % 2 = 0")
        query.select(["*", "sum(tens) OVER w AS running"], windows={"w": "ORDER BY id"})
        result = frame(spark, query.sql())
    assert [tuple(r) for r in result.orderBy("id").collect()] == [(0, 0, 0), (2, 20, 20), (4, 40, 60)]


def test_a_shared_stage_is_read_twice_in_one_statement(spark):
    from airflow_cdc.spark_jobs.apply.sql import Query, frame, temp_views

    with temp_views(spark, {"numbers": spark.range(4)}) as views:
        query = Query(views["numbers"])
        query.select(["id", "id * 10 AS tens"])
        shared = query.share()
        query.stage(f"SELECT a.id, b.tens FROM {shared} a JOIN {shared} b ON a.id + 1 = b.id")
        query.select(["id", "tens + 1 AS next_tens"])
        result = frame(spark, query.sql())
    assert sorted(tuple(r) for r in result.collect()) == [(0, 11), (1, 21), (2, 31)]


def test_views_are_gone_after_the_block_and_the_frame_still_reads(spark):
    from airflow_cdc.spark_jobs.apply.sql import frame, temp_views

    with temp_views(spark, {"numbers": spark.range(3)}) as views:
        result = frame(spark, f"SELECT id FROM {views['numbers']}")
    assert not any(t.name == views["numbers"] for t in spark.catalog.listTables())
    assert sorted(r.id for r in result.collect()) == [0, 1, 2]


def test_an_observation_of_a_frame_behind_a_view_reports(spark):
    """spark.sql alone hides the view's plan from the Observation, which then waits forever."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from airflow_cdc.spark_jobs.apply.sql import frame, temp_views

    observation = Observation(f"test_{uuid.uuid4().hex}")
    observed = spark.range(5).observe(observation, F.count(F.lit(1)).alias("rows"))
    with temp_views(spark, {"numbers": observed}) as views:
        result = frame(spark, f"SELECT id FROM {views['numbers']} WHERE id > 2")
    assert result.localCheckpoint(eager=True).count() == 2
    assert observation.get == {"rows": 5}
