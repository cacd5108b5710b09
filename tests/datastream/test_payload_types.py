"""Payload column types without Spark: the Avro schema's, JSON values', and the declared mapping."""

from __future__ import annotations

import io
from datetime import datetime
from decimal import Decimal

import pytest

from airflow_cdc.model import change_row_to_record
from airflow_cdc.sources.datastream.events import event_to_change_row, json_line_event
from airflow_cdc.sources.datastream.types import (
    AvroPayload,
    ColumnTypeMappingError,
    declared_column_types,
    json_value_type,
)
from airflow_cdc.sources.datastream.writer import DATETIME_RECORD, write_avro_events, write_json_events

from .support import mysql


def avro_payload(fields: list[dict]) -> AvroPayload:
    """The payload types of a file written with ``fields`` as its payload schema."""
    import fastavro

    buffer = io.BytesIO()
    schema = fastavro.parse_schema({"type": "record", "name": "event", "fields": [
        {"name": "payload", "type": {"type": "record", "name": "payload", "fields": fields}},
    ]})
    fastavro.writer(buffer, schema, [])
    buffer.seek(0)
    return AvroPayload(fastavro.reader(buffer).writer_schema)


def test_avro_schema_types_map_onto_canonical_column_types():
    decimal = {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}
    fields = [
        ("a_long", ["null", "long"], "INT64"),
        ("an_int", "int", "INT64"),
        ("a_float", "float", "FLOAT32"),
        ("a_double", ["null", "double"], "FLOAT64"),
        ("a_bool", "boolean", "BOOL"),
        ("a_string", {"type": "string", "logicalType": "varchar", "maxLength": 8}, "STRING"),
        ("a_uuid", {"type": "string", "logicalType": "uuid"}, "STRING"),
        ("some_bytes", "bytes", "BYTES"),
        ("a_fixed", {"type": "fixed", "name": "f4", "size": 4}, "BYTES"),
        ("a_decimal", ["null", decimal], "NUMERIC(10,2)"),
        ("a_fixed_decimal", {"type": "fixed", "name": "f8", "size": 8, "logicalType": "decimal",
                             "precision": 18, "scale": 4}, "NUMERIC(18,4)"),
        ("too_wide", {"type": "bytes", "logicalType": "decimal", "precision": 65, "scale": 30}, "STRING"),
        ("a_date", {"type": "int", "logicalType": "date"}, "DATE"),
        ("millis", {"type": "long", "logicalType": "timestamp-millis"}, "TIMESTAMP"),
        ("micros", {"type": "long", "logicalType": "timestamp-micros"}, "TIMESTAMP"),
        ("local_millis", {"type": "long", "logicalType": "local-timestamp-millis"}, "DATETIME"),
        ("local_micros", {"type": "long", "logicalType": "local-timestamp-micros"}, "DATETIME"),
        ("a_datetime", ["null", DATETIME_RECORD], "DATETIME"),
        ("again_datetime", ["null", "datetime"], "DATETIME"),  # a reference to the named record
        ("a_time", {"type": "long", "logicalType": "time-micros"}, "STRING"),
        ("a_record", {"type": "record", "name": "inner", "fields": [{"name": "x", "type": "long"}]}, "JSON"),
        ("a_map", {"type": "map", "values": "long"}, "JSON"),
        ("longs", {"type": "array", "items": "long"}, "ARRAY<INT64>"),
        ("decimals", {"type": "array", "items": decimal}, "ARRAY<NUMERIC(10,2)>"),
        ("nested", {"type": "array", "items": {"type": "array", "items": "long"}}, "JSON"),
        ("an_enum", {"type": "enum", "name": "color", "symbols": ["RED"]}, "STRING"),
    ]

    payload = avro_payload([{"name": n, "type": t} for n, t, _ in fields])

    assert payload.types == {n: expected for n, _, expected in fields}


def test_avro_datetime_records_and_times_decode_to_their_wall_clock_text(tmp_path):
    import fastavro

    schema = [{"name": "id", "type": "long"}, {"name": "placed_at", "type": ["null", DATETIME_RECORD]},
              {"name": "opens", "type": {"type": "long", "logicalType": "time-micros"}}]
    event = mysql({"id": 1, "placed_at": {"date": 19792, "time": 32495000000}, "opens": 34200000000})
    path = write_avro_events(tmp_path / "a.avro", [event], payload_schema=schema)
    with path.open("rb") as handle:
        reader = fastavro.reader(handle)
        payload = AvroPayload(reader.writer_schema)
        [record] = list(reader)

    decoded = payload.decode(record["payload"])
    row = event_to_change_row({**record, "payload": decoded}, "shop", "w", "f", schema_types=payload.types)

    assert decoded["placed_at"] == datetime(2024, 3, 10, 9, 1, 35)
    assert row.new_values["placed_at"] == "2024-03-10T09:01:35"  # no zone: a wall-clock time
    assert row.new_values["opens"] == "09:30:00.000000"
    assert row.column_types == {"id": "INT64", "opens": "STRING", "placed_at": "DATETIME"}


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        ("20.00", "NUMERIC(38,2)"),
        ("-0.5", "NUMERIC(38,1)"),
        ("1E+3", "NUMERIC(38,0)"),
        ("1.5E-7", "NUMERIC(38,8)"),
        ("25.0e0", "NUMERIC(38,1)"),
        ("7", "INT64"),
        ("123456789012345678901234567890", "NUMERIC(38,0)"),  # beyond INT64
        ("true", "BOOL"),
        ('"2024-03-10"', "STRING"),  # JSON has no dates: declare the column to type it
        ('{"a": 1.5}', "JSON"),
        ("[1, 2]", "JSON"),
    ],
)
def test_json_values_are_typed_by_their_literal(literal, expected):
    event = json_line_event(f'{{"payload": {{"v": {literal}}}}}')

    assert json_value_type(event["payload"]["v"]) == expected


def test_json_decimals_keep_their_digits_in_the_changelog_inside_json_columns_too(tmp_path):
    event = mysql({"id": 1, "amount": Decimal("20.00"), "tiny": Decimal("1.5E-7"), "doc": {"price": Decimal("3.10")}})
    line = write_json_events(tmp_path / "a.jsonl", [event]).read_text().splitlines()[0]

    record = change_row_to_record(event_to_change_row(json_line_event(line), "shop", "w", "f"))

    assert (record["new_values"]["amount"], record["new_values"]["tiny"]) == ("20.00", "0.00000015")
    assert record["new_values"]["doc"] == '{"price":3.10}'


def test_a_declared_type_wins_over_the_avro_schema_and_over_inference():
    declared = declared_column_types({"shop.orders": {"amount": "decimal(10, 2)", "code": "STRING"}})
    event = mysql({"id": 1, "amount": Decimal("20.5"), "code": 7, "other": Decimal("1.25")}, obj="shop.orders")

    row = event_to_change_row(event, "shop", "w", "f", declared_types=declared, schema_types={"amount": "FLOAT64", "id": "INT64"})

    assert row.column_types == {"amount": "NUMERIC(10,2)", "code": "STRING", "id": "INT64", "other": "NUMERIC(38,2)"}


def test_a_mapping_names_a_table_as_datastream_does_or_by_its_identifier():
    by_object = declared_column_types({"shop.orders": {"placed_at": "datetime2"}})
    by_identifier = declared_column_types({"shop_orders": {"placed_at": "DATETIME"}})

    assert by_object == by_identifier == {"shop_orders": {"placed_at": "DATETIME"}}


@pytest.mark.parametrize(
    ("mapping", "says"),
    [
        ({"shop.orders": {"amount": "DECIMAL(40,2)"}},
         "table 'shop.orders' column 'amount' type 'DECIMAL(40,2)' is not usable: source type 'DECIMAL(40,2)' has "
         "precision 40: Iceberg decimals hold 1 to 38 digits; declare a precision in that range"),
        ({"shop.orders": {"placed_at": "DATETIMEX"}}, "table 'shop.orders' column 'placed_at' type 'DATETIMEX' is not usable"),
        ({"shop.orders": ["amount"]}, "table 'shop.orders' maps to ['amount'], not to its columns' types"),
        ({"shop.orders": {"a": "INT64"}, "shop_orders": {"b": "INT64"}}, "names table 'shop_orders' twice"),
        (["shop.orders"], "give a mapping of source tables to their columns' types"),
    ],
)
def test_a_bad_mapping_is_refused_when_the_dag_is_parsed(mapping, says):
    from airflow_cdc.operators.datastream import datastream_stream_config

    with pytest.raises(ColumnTypeMappingError) as error:
        datastream_stream_config(stream_id="shop", prefix="gs://b/shop", column_types=mapping)

    assert "column_types of Datastream stream 'shop'" in str(error.value) and says in str(error.value)


def test_declaring_column_types_later_keeps_the_streams_recorded_positions():
    from airflow_cdc.operators.datastream import datastream_stream_config

    plain = datastream_stream_config(stream_id="shop", prefix="gs://b/shop")
    typed = datastream_stream_config(stream_id="shop", prefix="gs://b/shop",
                                     column_types={"shop.orders": {"amount": "DECIMAL(10,2)"}})

    assert typed.source_spec["column_types"] == {"shop.orders": {"amount": "DECIMAL(10,2)"}}
    assert typed.fingerprint == plain.fingerprint
    assert datastream_stream_config(stream_id="shop", prefix="gs://b/other").fingerprint != plain.fingerprint
