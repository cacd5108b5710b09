"""Canonical column types -> Spark/Iceberg SQL types (pure Python, no Spark).

Each source's own type names are tested where they are mapped: Spanner's in
``tests/sources/test_spanner_types.py``, Datastream's in ``tests/datastream/test_source_types.py``.
"""

from __future__ import annotations

import pytest

from airflow_cdc.sources.column_types import (
    UnsupportedColumnTypeError,
    common_spark_type,
    merged_spark_type,
    parse_source_type,
    read_type_name,
    spark_sql_type,
)


@pytest.mark.parametrize(
    ("source_type", "expected"),
    [
        ("BOOL", "boolean"),
        ("INT64", "bigint"),
        ("FLOAT64", "double"),
        ("FLOAT32", "float"),
        ("NUMERIC", "decimal(38,9)"),
        ("PG_NUMERIC", "string"),  # exact text: PostgreSQL numerics exceed any decimal
        ("STRING", "string"),
        ("JSON", "string"),
        ("PG_JSONB", "string"),
        ("BYTES", "binary"),
        ("DATE", "date"),
        ("TIMESTAMP", "timestamp"),
        ("DATETIME", "timestamp_ntz"),
        ("ENUM", "bigint"),
        ("PG_OID", "bigint"),
        ("PROTO", "binary"),
        ("UUID", "string"),
        ("INTERVAL", "string"),
        ("ARRAY<INT64>", "array<bigint>"),
        ("ARRAY<DATETIME>", "array<timestamp_ntz>"),
    ],
)
def test_canonical_codes_map_to_spark_types(source_type, expected):
    assert spark_sql_type(source_type) == expected


@pytest.mark.parametrize(
    "source_type",
    ["int64", "STRING(MAX)", "VARCHAR", "BIGINT", "TIMESTAMPTZ", "DECIMAL(10,2)", "NUMERIC(10, 2)",
     "bigint[]", {"code": "INT64"}, '{"code": "INT64"}', "GEOGRAPHY", 42, None],
)
def test_a_name_that_is_not_canonical_is_refused_saying_the_source_must_map_it(source_type):
    with pytest.raises(UnsupportedColumnTypeError) as error:
        spark_sql_type(source_type)
    assert repr(source_type) in str(error.value)
    assert "the source must map its own type names to canonical ones" in str(error.value)


@pytest.mark.parametrize("source_type", ["STRUCT", "STRUCT<a INT64>", "ARRAY<STRUCT<a INT64>>", "ARRAY<ARRAY<INT64>>"])
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
        ("NUMERIC(10,2)", "decimal(10,2)"),
        ("NUMERIC(38,0)", "decimal(38,0)"),
        ("NUMERIC", "decimal(38,9)"),  # Spanner's NUMERIC
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
        ("NUMERIC(0,0)", "precision 0"),
        ("NUMERIC(10,11)", "scale 11: the scale must be from 0 to the precision (10)"),
        ("ARRAY<NUMERIC(40,2)>", "precision 40"),
    ],
)
def test_impossible_decimals_are_refused_with_the_limit_and_a_fix(source_type, says):
    with pytest.raises(UnsupportedColumnTypeError) as error:
        spark_sql_type(source_type)
    assert repr(source_type) in str(error.value) and says in str(error.value)


@pytest.mark.parametrize(
    ("source_type", "says"),
    [
        ("NUMERIC(ten,2)", "not a precision and scale: write e.g. NUMERIC(10,2)"),
        ("STRING(10,2)", "arguments (10,2) its type does not take"),
        ("PG_NUMERIC(10,2)", "arguments (10,2) its type does not take"),
        ("FROBNICATE", "is not a known type: use FOO"),
    ],
)
def test_the_shared_grammar_of_source_type_names_refuses_what_it_cannot_read(source_type, says):
    with pytest.raises(UnsupportedColumnTypeError) as error:
        read_type_name(source_type, {}, known="use FOO")
    assert repr(source_type) in str(error.value) and says in str(error.value)


def test_the_shared_grammar_reads_a_sources_names_through_its_own_table():
    names = {"WHOLE NUMBER": "INT64", "DEC": "NUMERIC"}
    assert str(read_type_name("whole  number[]", names)) == "ARRAY<INT64>"
    assert str(read_type_name("Array< dec(10, 2) >", names)) == "ARRAY<NUMERIC(10,2)>"
    assert str(read_type_name("string(max)", names)) == "STRING"  # canonical codes, lengths free
    with pytest.raises(UnsupportedColumnTypeError):
        read_type_name("DATETIME", names, codes={"INT64"})  # not one of this source's codes


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
