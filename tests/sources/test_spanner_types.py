"""Spanner's column types -> canonical types (``sources/spanner/types.py``), and what its change
rows declare. Pure Python: no emulator server, no Spark."""

from __future__ import annotations

import pytest

from airflow_cdc_emulators.spanner.schema import GOOGLESQL, POSTGRESQL, SCALAR_CODES, SpannerType
from airflow_cdc.model import Op
from airflow_cdc.sources.column_types import UnsupportedColumnTypeError, parse_source_type, spark_sql_type
from airflow_cdc.sources.spanner.mapping import change_rows
from airflow_cdc.sources.spanner.source import SpannerChangeStreamSource
from airflow_cdc.sources.spanner.records import parse_change_record
from airflow_cdc.sources.spanner.types import canonical_type, change_row_type


def landed(spanner_type) -> str:
    """The Spark type a column of ``spanner_type`` lands as: through the canonical name."""
    return spark_sql_type(str(canonical_type(spanner_type)))


@pytest.mark.parametrize(
    ("spanner_type", "expected"),
    [
        ({"code": "BOOL"}, "boolean"),
        ({"code": "INT64"}, "bigint"),
        ({"code": "FLOAT64"}, "double"),
        ({"code": "FLOAT32"}, "float"),
        ({"code": "NUMERIC"}, "decimal(38,9)"),
        ({"code": "STRING"}, "string"),
        ({"code": "JSON"}, "string"),
        ({"code": "BYTES"}, "binary"),
        ({"code": "DATE"}, "date"),
        ({"code": "TIMESTAMP"}, "timestamp"),
        ({"code": "ENUM", "proto_type_fqn": "shop.Status"}, "bigint"),
        ({"code": "PROTO", "proto_type_fqn": "shop.Item"}, "binary"),
        ({"code": "UUID"}, "string"),
        ({"code": "INTERVAL"}, "string"),
        ({"code": "int64"}, "bigint"),
        ({"code": 2}, "bigint"),  # TypeCode numbers
        ({"code": 15}, "float"),
    ],
)
def test_spanner_type_objects_map_to_canonical_types_and_spark_types(spanner_type, expected):
    assert landed(spanner_type) == expected


def test_arrays_map_to_arrays_of_the_element_type_in_every_form():
    assert str(canonical_type({"code": "ARRAY", "array_element_type": {"code": "TIMESTAMP"}})) == "ARRAY<TIMESTAMP>"
    assert landed({"code": 8, "array_element_type": {"code": 10}}) == "array<decimal(38,9)>"
    assert landed('{"code":"ARRAY","array_element_type":{"code":"JSON"}}') == "array<string>"
    assert landed("ARRAY<INT64>") == "array<bigint>"
    assert landed("ARRAY<STRING(MAX)>") == "array<string>"


def test_a_whole_column_types_entry_is_accepted():
    entry = {"name": "Balance", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 3}
    assert str(canonical_type(entry)) == "INT64"


@pytest.mark.parametrize(
    ("spanner_type", "canonical"),
    [
        ({"code": "NUMERIC", "type_annotation": "PG_NUMERIC"}, "NUMERIC"),
        ({"code": 10, "type_annotation": 2}, "NUMERIC"),
        ({"code": "JSON", "type_annotation": "PG_JSONB"}, "JSON"),
        ({"code": 11, "type_annotation": 3}, "JSON"),
        ({"code": "INT64", "type_annotation": "PG_OID"}, "INT64"),
        ({"code": "INT64", "type_annotation": "TYPE_ANNOTATION_CODE_UNSPECIFIED"}, "INT64"),
        ({"code": "ARRAY", "array_element_type": {"code": "NUMERIC", "type_annotation": "PG_NUMERIC"}}, "ARRAY<NUMERIC>"),
    ],
)
def test_postgresql_annotations_fold_onto_the_googlesql_type_as_change_rows_always_declared(spanner_type, canonical):
    # Both dialects give identical change rows (test_spanner_source), so a PostgreSQL-dialect
    # numeric column lands as decimal(38,9) like a GoogleSQL NUMERIC, as it always has.
    assert str(canonical_type(spanner_type)) == canonical == change_row_type(spanner_type)


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("INT64", "INT64"),
        ("INT", "INT64"),  # as in Spanner's change stream examples
        ("STRING(MAX)", "STRING"),
        ("STRING(1024)", "STRING"),
        ("BYTES(MAX)", "BYTES"),
        ("ARRAY<STRING(MAX)>", "ARRAY<STRING>"),
        # PostgreSQL-dialect DDL names
        ("bigint", "INT64"),
        ("int8", "INT64"),
        ("character varying(20)", "STRING"),
        ("varchar", "STRING"),
        ("text", "STRING"),
        ("boolean", "BOOL"),
        ("double precision", "FLOAT64"),
        ("float8", "FLOAT64"),
        ("real", "FLOAT32"),
        ("numeric", "NUMERIC"),
        ("jsonb", "JSON"),
        ("bytea", "BYTES"),
        ("oid", "INT64"),
        ("timestamptz", "TIMESTAMP"),
        ("timestamp with time zone", "TIMESTAMP"),
        ("date", "DATE"),
        ("bigint[]", "ARRAY<INT64>"),
    ],
)
def test_ddl_names_of_both_dialects_map_to_canonical_types(name, canonical):
    assert str(canonical_type(name)) == canonical


@pytest.mark.parametrize("dialect", [GOOGLESQL, POSTGRESQL])
@pytest.mark.parametrize("code", SCALAR_CODES)
def test_every_emulated_column_type_lands_the_same_in_both_dialects(dialect, code):
    for spanner_type in (SpannerType(code), SpannerType("ARRAY", SpannerType(code))):
        declared = change_row_type(spanner_type.type_json(dialect))
        assert declared == str(spanner_type)  # the canonical name is the GoogleSQL type
        assert landed(spanner_type.ddl(dialect)) == spark_sql_type(declared)


@pytest.mark.parametrize(
    "spanner_type",
    ["STRUCT", {"code": "STRUCT"}, "GEOGRAPHY", {"code": "GEOGRAPHY"}, {"code": "ARRAY"}, {"code": 12}, 42,
     "ARRAY<ARRAY<INT64>>", "DATETIME", "{not json"],
)
def test_unsupported_types_are_refused_with_a_fix(spanner_type):
    with pytest.raises(UnsupportedColumnTypeError) as error:
        canonical_type(spanner_type)
    assert repr(spanner_type) in str(error.value)


def record(column_types: list[dict], new_values: dict) -> dict:
    return {
        "commit_timestamp": "2024-05-01T10:00:00.123456Z",
        "record_sequence": "00000001",
        "server_transaction_id": "tx1",
        "is_last_record_in_transaction_in_partition": True,
        "table_name": "Accounts",
        "column_types": [
            {"name": c["name"], "type": c["type"], "is_primary_key": c["name"] == "Id", "ordinal_position": i}
            for i, c in enumerate(column_types, 1)
        ],
        "mods": [{"keys": {"Id": "7"}, "new_values": new_values, "old_values": {}}],
        "mod_type": "INSERT",
        "value_capture_type": "OLD_AND_NEW_VALUES",
        "number_of_records_in_transaction": 1,
        "number_of_partitions_in_transaction": 1,
    }


def test_change_rows_declare_canonical_type_names():
    raw = record(
        [
            {"name": "Id", "type": {"code": "INT64"}},
            {"name": "Balance", "type": {"code": "NUMERIC", "type_annotation": "PG_NUMERIC"}},
            {"name": "Details", "type": '{"code": "JSON", "type_annotation": "PG_JSONB"}'},
            {"name": "Counts", "type": {"code": 8, "array_element_type": {"code": 2}}},
            {"name": "Seen", "type": {"code": "TIMESTAMP"}},
        ],
        {"Balance": "1.5", "Details": '{"a": 1}', "Counts": ["1", None, "3"], "Seen": "2024-05-01T10:00:00Z"},
    )
    [data_change] = parse_change_record({"data_change_record": [raw]})

    [row] = change_rows(data_change, "s", "w", "p")

    assert row.op is Op.INSERT
    assert row.column_types == {
        "Id": "INT64", "Balance": "NUMERIC", "Details": "JSON", "Counts": "ARRAY<INT64>", "Seen": "TIMESTAMP",
    }
    assert all(str(parse_source_type(t)) == t for t in row.column_types.values())
    assert [c.type_name for c in data_change.column_types] == list(row.column_types.values())
    assert row.keys == {"Id": 7} and row.new_values["Counts"] == [1, None, 3]  # INT64 text made ints


def test_a_struct_column_is_declared_as_its_text_and_apply_refuses_it_naming_struct():
    struct = {"code": "STRUCT", "struct_type": {"fields": [{"name": "a", "type": {"code": "INT64"}}]}}
    raw = record([{"name": "Id", "type": {"code": "INT64"}}, {"name": "Pair", "type": struct}], {"Pair": [1]})
    [row] = change_rows(parse_change_record({"data_change_record": [raw]})[0], "s", "w", "p")

    assert row.column_types["Pair"] == "STRUCT<a INT64>"
    with pytest.raises(UnsupportedColumnTypeError, match="STRUCT, which cannot be a table column"):
        spark_sql_type(row.column_types["Pair"])


def test_the_source_maps_its_types_with_its_own_mapping():
    source = SpannerChangeStreamSource.from_spec(
        {"connection": {"project": "p", "instance": "i", "database": "d"}, "stream_name": "Changes"}
    )
    assert source.canonical_type({"code": "ARRAY", "array_element_type": {"code": "INT64"}}) == "ARRAY<INT64>"
    assert source.canonical_type("STRING(MAX)") == "STRING"
    assert source.canonical_type({"code": "NUMERIC", "type_annotation": "PG_NUMERIC"}) == "NUMERIC"
