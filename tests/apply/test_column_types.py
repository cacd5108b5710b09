"""Source column types -> Spark/Iceberg SQL types (pure Python, no Spark)."""

from __future__ import annotations

import pytest

from airflow_cdc.sources.column_types import (
    UnsupportedColumnTypeError,
    common_spark_type,
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
    assert merged_spark_type("decimal(10,2)", "decimal(10,3)") is None  # would round: Iceberg keeps the scale
    assert merged_spark_type("timestamp", "date") is None
    assert merged_spark_type("timestamp", "timestamp_ntz") is None
    assert merged_spark_type("timestamp_ntz", "timestamp") is None


@pytest.mark.parametrize(
    ("source_type", "expected"),
    [
        ("DATETIME", "timestamp_ntz"),
        ("DATETIME(6)", "timestamp_ntz"),
        ("TIMESTAMP WITHOUT TIME ZONE", "timestamp_ntz"),
        ("timestamp(3) without time zone", "timestamp_ntz"),
        ("TIMESTAMP_NTZ", "timestamp_ntz"),
        ("DATETIME2", "timestamp_ntz"),
        ("SMALLDATETIME", "timestamp_ntz"),
        ("TIMESTAMP", "timestamp"),
        ("TIMESTAMPTZ", "timestamp"),
        ("TIMESTAMP WITH TIME ZONE", "timestamp"),
        ("ARRAY<DATETIME>", "array<timestamp_ntz>"),
    ],
)
def test_wall_clock_datetimes_are_timestamp_ntz_and_instants_stay_timestamp(source_type, expected):
    assert spark_sql_type(source_type) == expected


@pytest.mark.parametrize(
    ("source_type", "expected"),
    [
        ("NUMERIC(10,2)", "decimal(10,2)"),
        ("DECIMAL(10, 2)", "decimal(10,2)"),
        ("decimal(38,0)", "decimal(38,0)"),
        ("NUMERIC(12)", "decimal(12,0)"),
        ("NUMERIC", "decimal(38,9)"),  # Spanner's NUMERIC
        ("DECIMAL", "decimal(38,9)"),
        ("ARRAY<NUMERIC(5,1)>", "array<decimal(5,1)>"),
    ],
)
def test_decimals_keep_their_precision_and_scale(source_type, expected):
    assert spark_sql_type(source_type) == expected


@pytest.mark.parametrize(
    "source_type",
    ["NUMERIC(10,2)", "NUMERIC", "DATETIME", "TIMESTAMP", "ARRAY<NUMERIC(5,1)>", "ARRAY<DATETIME>", "STRING", "PG_NUMERIC"],
)
def test_canonical_names_read_back_as_the_same_type(source_type):
    parsed = parse_source_type(source_type)
    assert str(parsed) == source_type
    assert parse_source_type(str(parsed)) == parsed


@pytest.mark.parametrize(
    ("source_type", "says"),
    [
        ("NUMERIC(39,2)", "precision 39: Iceberg decimals hold 1 to 38 digits"),
        ("NUMERIC(0)", "precision 0"),
        ("DECIMAL(10,11)", "scale 11: the scale must be from 0 to the precision (10)"),
        ("NUMERIC(ten,2)", "not a precision and scale: write e.g. NUMERIC(10,2)"),
        ("VARCHAR(10,2)", "arguments (10,2) its type does not take"),
    ],
)
def test_impossible_decimals_are_refused_with_the_limit_and_a_fix(source_type, says):
    with pytest.raises(UnsupportedColumnTypeError) as error:
        spark_sql_type(source_type)
    assert repr(source_type) in str(error.value) and says in str(error.value)


def test_an_existing_decimal_column_takes_values_of_no_larger_scale_and_widens_for_integer_digits():
    assert merged_spark_type("decimal(10,2)", "decimal(8,1)") == "decimal(10,2)"  # fits as it is
    assert merged_spark_type("decimal(10,2)", "decimal(12,1)") == "decimal(13,2)"  # room for 11 integer digits
    assert merged_spark_type("decimal(10,2)", "bigint") == "decimal(21,2)"  # 19 integer digits
    # Beyond 38 digits the column stays decimal(38,s); apply converts each value exactly or
    # dead-letters it, so values of a declared decimal(38,1) that do fit are kept.
    assert merged_spark_type("decimal(38,2)", "decimal(38,1)") == "decimal(38,2)"
    assert merged_spark_type("decimal(38,9)", "decimal(38,2)") == "decimal(38,9)"
    assert merged_spark_type("bigint", "decimal(10,2)") is None  # Iceberg cannot turn a long into a decimal


def test_a_new_column_declared_several_ways_in_one_window_gets_the_type_that_holds_them_all():
    assert common_spark_type("decimal(38,2)", "decimal(38,1)") == "decimal(38,2)"
    assert common_spark_type("decimal(38,1)", "decimal(38,2)") == "decimal(38,2)"
    assert common_spark_type("decimal(5,1)", "decimal(6,3)") == "decimal(7,3)"
    assert common_spark_type("bigint", "decimal(38,2)") == "decimal(38,2)"
    assert common_spark_type("float", "double") == "double"
    assert common_spark_type("array<decimal(5,1)>", "array<decimal(5,2)>") == "array<decimal(6,2)>"
    assert common_spark_type("bigint", "string") is None
    assert common_spark_type("timestamp", "timestamp_ntz") is None
