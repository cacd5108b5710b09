"""The source databases' type names, as a Datastream pipeline declares them -> canonical types
(``sources/datastream/types.py``). Pure Python: no Spark."""

from __future__ import annotations

import pytest

from airflow_cdc.sources.column_types import UnsupportedColumnTypeError, parse_source_type, spark_sql_type
from airflow_cdc.sources.datastream.source import DatastreamSource
from airflow_cdc.sources.datastream.types import ColumnTypeMappingError, canonical_type, declared_column_types


def landed(source_type) -> str:
    """The Spark type a declared column lands as: through the canonical name."""
    return spark_sql_type(str(canonical_type(source_type)))


@pytest.mark.parametrize(
    ("source_type", "expected"),
    [
        ("bigint", "bigint"),
        ("INT", "bigint"),
        ("integer", "bigint"),
        ("smallint", "bigint"),
        ("int4", "bigint"),
        ("varchar(20)", "string"),
        ("character varying(255)", "string"),
        ("char(3)", "string"),
        ("text", "string"),
        ("double precision", "double"),
        ("double", "double"),
        ("float8", "double"),
        ("real", "float"),
        ("bytea", "binary"),
        ("jsonb", "string"),
        ("boolean", "boolean"),
        ("oid", "bigint"),
        ("time", "string"),
        ("time(6) without time zone", "string"),
        ("bigint[]", "array<bigint>"),
    ],
)
def test_common_names_of_the_source_databases_map_onto_the_canonical_types(source_type, expected):
    assert landed(source_type) == expected


@pytest.mark.parametrize(
    ("source_type", "canonical"),
    [
        ("jsonb", "PG_JSONB"),
        ("oid", "PG_OID"),
        ("DECIMAL(10, 2)", "NUMERIC(10,2)"),
        ("datetime2", "DATETIME"),
        ("varchar(20)[]", "ARRAY<STRING>"),
    ],
)
def test_declared_names_become_the_canonical_names_change_rows_carry(source_type, canonical):
    assert str(canonical_type(source_type)) == canonical
    assert str(parse_source_type(canonical)) == canonical


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
        ("TIMESTAMP(6) WITH LOCAL TIME ZONE", "timestamp"),
        ("DATETIMEOFFSET", "timestamp"),
        ("ARRAY<DATETIME>", "array<timestamp_ntz>"),
    ],
)
def test_wall_clock_datetimes_are_timestamp_ntz_and_instants_stay_timestamp(source_type, expected):
    assert landed(source_type) == expected


@pytest.mark.parametrize(
    ("source_type", "expected"),
    [
        ("NUMERIC(10,2)", "decimal(10,2)"),
        ("DECIMAL(10, 2)", "decimal(10,2)"),
        ("decimal(38,0)", "decimal(38,0)"),
        ("NUMERIC(12)", "decimal(12,0)"),
        ("NUMERIC", "decimal(38,9)"),
        ("DECIMAL", "decimal(38,9)"),
        ("ARRAY<NUMERIC(5,1)>", "array<decimal(5,1)>"),
    ],
)
def test_decimals_keep_their_precision_and_scale(source_type, expected):
    assert landed(source_type) == expected


@pytest.mark.parametrize(
    "source_type",
    ["INT64", "FLOAT32", "STRING(MAX)", "BYTES(1024)", "JSON", "PG_NUMERIC", "PG_JSONB", "UUID", "INTERVAL"],
)
def test_canonical_names_are_declared_as_they_are(source_type):
    assert landed(source_type) == spark_sql_type(source_type.split("(")[0])


@pytest.mark.parametrize(
    ("source_type", "says"),
    [
        ("NUMERIC(39,2)", "precision 39: Iceberg decimals hold 1 to 38 digits"),
        ("NUMERIC(0)", "precision 0"),
        ("DECIMAL(10,11)", "scale 11: the scale must be from 0 to the precision (10)"),
        ("NUMERIC(ten,2)", "not a precision and scale: write e.g. NUMERIC(10,2)"),
        ("VARCHAR(10,2)", "arguments (10,2) its type does not take"),
        ("GEOGRAPHY", "is not a known type: use a canonical type"),
        ("STRUCT", "is not a known type"),
        ("ARRAY<ARRAY<INT64>>", "array of arrays"),
        ({"code": "INT64"}, "is not a type name"),
        (42, "is not a type name"),
    ],
)
def test_impossible_types_are_refused_with_the_limit_and_a_fix(source_type, says):
    with pytest.raises(UnsupportedColumnTypeError) as error:
        canonical_type(source_type)
    assert repr(source_type) in str(error.value) and says in str(error.value)


def test_a_declared_mapping_is_made_canonical_and_refuses_what_the_source_cannot_map():
    assert declared_column_types({"shop.orders": {"a": "varchar(20)", "b": "timestamptz", "c": "decimal(10,2)"}}) == {
        "shop_orders": {"a": "STRING", "b": "TIMESTAMP", "c": "NUMERIC(10,2)"}
    }
    with pytest.raises(ColumnTypeMappingError, match="column 'a' type 'GEOGRAPHY' is not usable"):
        declared_column_types({"shop.orders": {"a": "GEOGRAPHY"}})


def test_the_source_maps_its_types_with_its_own_mapping():
    source = DatastreamSource.from_spec({"prefix": "gs://bucket/shop"})
    assert source.canonical_type("datetime2") == "DATETIME"
    assert source.canonical_type("varchar(20)") == "STRING"
    assert source.canonical_type("NUMERIC(10,2)") == "NUMERIC(10,2)"
