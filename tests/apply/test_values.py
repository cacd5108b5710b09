"""Value texts -> typed values: the parts that are plain Spark expressions."""

from __future__ import annotations


def test_array_elements_read_every_json_array_as_from_json_does(spark):
    from pyspark.sql import functions as F

    from spark_jobs.apply.values import array_elements

    texts = ['["a","t3"]', '["a"]', '[""]', '["","x"]', '["x,y","z"]', '["é"]', "[]",  # plain: cut apart
             '[null,"a"]', "[1,2]", '["a\\"b","c"]', '["a", "b"]', "not json", None]  # the rest: parsed
    frame = spark.createDataFrame([(t,) for t in texts], "raw string")
    rows = frame.select(
        "raw", F.expr(array_elements("raw")).alias("elements"), F.from_json("raw", "array<string>").alias("parsed")
    ).collect()
    assert [(r.raw, r.elements) for r in rows] == [(r.raw, r.parsed) for r in rows]
    assert {r.raw: r.elements for r in rows}['["x,y","z"]'] == ["x,y", "z"]
