"""Value texts -> typed values: the parts that are plain Spark expressions."""

from __future__ import annotations

import pytest


def test_array_elements_read_every_json_array_as_from_json_does(spark):
    from pyspark.sql import functions as F

    from airflow_cdc.spark_jobs.apply.values import array_elements

    texts = ['["a","t3"]', '["a"]', '[""]', '["","x"]', '["x,y","z"]', '["é"]', "[]",  # plain: cut apart
             '[null,"a"]', "[1,2]", '["a\\"b","c"]', '["a", "b"]', "not json", None]  # the rest: parsed
    frame = spark.createDataFrame([(t,) for t in texts], "raw string")
    rows = frame.select(
        "raw", F.expr(array_elements("raw")).alias("elements"), F.from_json("raw", "array<string>").alias("parsed")
    ).collect()
    assert [(r.raw, r.elements) for r in rows] == [(r.raw, r.parsed) for r in rows]
    assert {r.raw: r.elements for r in rows}['["x,y","z"]'] == ["x,y", "z"]


CONVERSIONS = [
    ("bigint", " 12 ", 12), ("bigint", "1.5", None), ("bigint", "9223372036854775808", None), ("int", "2147483648", None),
    ("double", "NaN", "nan"), ("double", "-Infinity", float("-inf")),
    # Decimals convert exactly or not at all: Spark's cast alone would round 1.005 to 1.01.
    ("decimal(10,2)", "1.005", None), ("decimal(10,2)", "20.00", "20.00"), ("decimal(10,2)", "20.5", "20.50"),
    ("decimal(10,2)", "20.1200", "20.12"), ("decimal(10,2)", " -7 ", "-7.00"), ("decimal(10,2)", "123456789.5", None),
    ("decimal(10,2)", "1.5E+1", "15.00"), ("decimal(10,2)", "1500e-2", "15.00"), ("decimal(10,2)", "2.5E-3", None),
    ("decimal(10,2)", "0E-10", "0.00"), ("decimal(38,0)", "12345678901234567890123", "12345678901234567890123"),
    ("decimal(10,2)", "NaN", None), ("decimal(10,2)", "abc", None),
    ("date", "2024-13-01", None), ("date", "2024-03-10", "2024-03-10"), ("date", "2024-03-10T09:01:35", None),
    ("timestamp_ntz", "2024-03-10T09:01:35", "2024-03-10 09:01:35"),
    ("timestamp_ntz", "2024-03-10 09:01:35.123456", "2024-03-10 09:01:35.123456"),
    ("timestamp_ntz", "2024-03-10", "2024-03-10 00:00:00"),
    ("timestamp_ntz", "2024-03-10T09:01:35Z", None), ("timestamp_ntz", "2024-03-10T09:01:35+02:00", None),
    ("timestamp_ntz", "2024-03-10T25:01:35", None), ("timestamp", "2024-05-01T10:00:00.123456Z", "2024-05-01 10:00:00.123456"),
    ("timestamp", "2024-05-01T10:00:00z", "2024-05-01 10:00:00"), ("timestamp", "2024-05-01T12:00:00+02:00", "2024-05-01 10:00:00"),
    ("timestamp", "Z", None), ("array<string>", '["a\\u0001b"]', "[a\x01b]"), ("array<string>", '["a\x01b"]', None),
]


@pytest.mark.parametrize("ansi", ["false", "true"])
def test_value_texts_convert_exactly_or_to_null_in_ansi_and_legacy_sessions(spark, ansi):
    from pyspark.sql import functions as F

    from airflow_cdc.spark_jobs.apply.values import bad_value, typed_value

    previous = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", ansi)
    try:
        found = []
        for kind in dict.fromkeys(k for k, _, _ in CONVERSIONS):  # one query per type
            texts = [(i, t) for i, (k, t, _) in enumerate(CONVERSIONS) if k == kind]
            frame = spark.createDataFrame(texts, "i int, raw string")
            rows = frame.select("i", "raw", F.expr(typed_value("raw", kind)).cast("string").alias("v"), F.expr(bad_value("raw", kind)).alias("bad")).collect()
            found += [(r.i, (kind, r.raw, r.v, r.bad)) for r in rows]
        found = [conversion for _, conversion in sorted(found)]
    finally:
        spark.conf.set("spark.sql.ansi.enabled", previous)
    expected = [
        (kind, text, None if value is None else str(value).replace("nan", "NaN").replace("-inf", "-Infinity"), value is None)
        for kind, text, value in CONVERSIONS
    ]
    assert found == expected


TIMESTAMP_TEXTS = [
    "2024-05-01T10:00:00Z", "2024-05-01T10:00:00.123456Z", "2024-05-01 10:00:00z", "2024-05-01T10:00:00.123456789Z",
    "2024-05-01T12:00:00+02:00", "2024-05-01T10:00:00+01:00Z", "2024-05-01T10:00:00-05:00Z", "2024-05-01T10:00:00UTCZ",
    "2024-05-01T10:00:00Europe/BerlinZ", "2024-13-01T10:00:00Z", "2024-05-01T10:00:00 Z", "Z", "", None,
]


def test_timestamp_texts_read_as_the_same_instants_in_utc_and_other_session_zones(spark):
    # A UTC session reads plain RFC 3339 UTC texts without their Z (no zone lookup per value);
    # every text must still give the instant it gives in a session of another zone.
    from pyspark.sql import functions as F

    from airflow_cdc.spark_jobs.apply.values import typed_value

    frame = spark.createDataFrame([(t,) for t in TIMESTAMP_TEXTS], "raw string")

    def instants(zone: str) -> list:
        previous = spark.conf.get("spark.sql.session.timeZone")
        spark.conf.set("spark.sql.session.timeZone", zone)
        try:
            rows = frame.select("raw", F.expr(f"unix_micros({typed_value('raw', 'timestamp')})").alias("micros")).collect()
        finally:
            spark.conf.set("spark.sql.session.timeZone", previous)
        return [(r.raw, r.micros) for r in rows]

    utc = instants("UTC")
    assert utc == instants("America/New_York")
    by_text = dict(utc)
    assert by_text["2024-05-01 10:00:00z"] == by_text["2024-05-01T10:00:00Z"] == 1714557600000000
    assert by_text["2024-05-01T10:00:00.123456789Z"] == 1714557600123456
    assert by_text["2024-05-01T12:00:00+02:00"] == 1714557600000000
    # A zone and a Z, or no date: not RFC 3339, so NULL (a bad value) in either session.
    assert [by_text[t] for t in TIMESTAMP_TEXTS[5:10]] == [None] * 5
