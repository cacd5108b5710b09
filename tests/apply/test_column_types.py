"""Source column types -> Spark/Iceberg SQL types (pure Python, no Spark)."""

from __future__ import annotations

import pytest

from airflow_cdc.pipeline.column_types import (
    UnsupportedColumnTypeError,
    merged_spark_type,
    parse_source_type,
    spark_sql_type,
)


@pytest.mark.parametrize(
    ("source_type", "expected"),
    [
        ("BOOL", "boolean"),
        ("INT64", "bigint"),
        ("INT", "bigint"),  # as in Spanner's change stream examples
        ("FLOAT64", "double"),
        ("FLOAT32", "float"),
        ("NUMERIC", "decimal(38,9)"),
        ("STRING", "string"),
        ("STRING(MAX)", "string"),
        ("JSON", "string"),
        ("BYTES", "binary"),
        ("BYTES(1024)", "binary"),
        ("DATE", "date"),
        ("TIMESTAMP", "timestamp"),
        ("ENUM", "bigint"),
        ("PROTO", "binary"),
        ("UUID", "string"),
        ("INTERVAL", "string"),
    ],
)
def test_spanner_type_codes_map_to_spark_types(source_type, expected):
    assert spark_sql_type(source_type) == expected


def test_arrays_map_to_arrays_of_the_element_type_in_every_spelling():
    assert spark_sql_type("ARRAY<INT64>") == "array<bigint>"
    assert spark_sql_type("ARRAY<STRING(MAX)>") == "array<string>"
    assert spark_sql_type({"code": "ARRAY", "array_element_type": {"code": "TIMESTAMP"}}) == "array<timestamp>"
    assert spark_sql_type({"code": 8, "array_element_type": {"code": 10}}) == "array<decimal(38,9)>"
    assert spark_sql_type('{"code":"ARRAY","array_element_type":{"code":"JSON"}}') == "array<string>"


def test_a_whole_column_types_entry_is_accepted():
    entry = {"name": "Balance", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 3}
    assert spark_sql_type(entry) == "bigint"


def test_postgresql_annotations_keep_values_exact():
    assert spark_sql_type({"code": "NUMERIC", "type_annotation": "PG_NUMERIC"}) == "string"
    assert spark_sql_type({"code": "JSON", "type_annotation": "PG_JSONB"}) == "string"
    assert spark_sql_type({"code": "INT64", "type_annotation": "PG_OID"}) == "bigint"
    assert str(parse_source_type({"code": 10, "type_annotation": 2})) == "PG_NUMERIC"


def test_common_names_of_other_sources_map_onto_the_same_types():
    assert [spark_sql_type(t) for t in ("bigint", "varchar(20)", "double precision", "bytea", "jsonb", "boolean")] == [
        "bigint",
        "string",
        "double",
        "binary",
        "string",
        "boolean",
    ]


@pytest.mark.parametrize("source_type", ["STRUCT", {"code": "STRUCT"}, "GEOGRAPHY", {"code": "ARRAY"}, 42, "ARRAY<ARRAY<INT64>>"])
def test_unsupported_types_are_refused_with_a_fix(source_type):
    with pytest.raises(UnsupportedColumnTypeError) as error:
        spark_sql_type(source_type)
    assert repr(source_type) in str(error.value)


def test_type_changes_are_kept_widened_or_refused():
    assert merged_spark_type("double", "float") == "double"  # narrower values fit
    assert merged_spark_type("float", "double") == "double"  # Iceberg promotes float -> double
    assert merged_spark_type("int", "bigint") == "bigint"
    assert merged_spark_type("decimal(10,2)", "decimal(12,2)") == "decimal(12,2)"
    assert merged_spark_type("array<double>", "array<float>") == "array<double>"
    assert merged_spark_type("bigint", "string") is None
    assert merged_spark_type("decimal(38,9)", "decimal(38,2)") is None
    assert merged_spark_type("timestamp", "date") is None
