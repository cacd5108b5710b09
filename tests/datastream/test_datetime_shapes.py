"""Wall-clock datetimes however the source encodes them, without Spark.

Datastream writes a DATETIME column as a ``datetime`` record (``date``: days since the epoch,
``date`` logical type or plain int; ``time``: microseconds of the day, ``time-micros`` or plain
long), with or without a record-level ``logicalType``; Avro longs carry instants and wall-clock
readings in millis, micros or nanos. A declared ``DATETIME`` converts each of these, and
dead-letters at extract, naming table, column, value and fix, what holds no datetime.
"""

from __future__ import annotations

import json
from datetime import date, datetime, time, timezone

from airflow_cdc.model import CHANGELOG_NAMES
from airflow_cdc.sources.datastream.records import TableSettings, avro_file_results, json_file_results
from airflow_cdc.sources.datastream.types import declared_column_types
from airflow_cdc.sources.datastream.writer import write_avro_events, write_json_events

from .support import mysql

UTC = timezone.utc
PLACED = datetime(2024, 3, 10, 9, 1, 35)
# Datastream's datetime record as some writers spell it: no record-level logical type, its
# fields with theirs.
SHAPED_RECORD = {
    "type": "record",
    "name": "placed_at_value",
    "fields": [
        {"name": "date", "type": {"type": "int", "logicalType": "date"}},
        {"name": "time", "type": {"type": "long", "logicalType": "time-micros"}},
    ],
}
DECLARED = TableSettings(types=declared_column_types({"shop.orders": {"placed_at": "DATETIME"}}))


def results_of(results: list[tuple]) -> tuple[list[dict], list[str]]:
    """(changelog rows as dicts, dead-letter reasons) of one file's results."""
    rows, reasons = [], []
    for kind, values, _, _ in results:
        if kind == "row":
            rows.append(dict(zip(CHANGELOG_NAMES, values)))
        else:
            reasons.append(values[-1])
    return rows, reasons


def read_avro(tmp_path, payload_schema: list[dict], payloads: list[dict], tables=DECLARED):
    events = [mysql(p, pos=10 + i, obj="shop.orders") for i, p in enumerate(payloads)]
    path = write_avro_events(tmp_path / "orders.avro", events, payload_schema=payload_schema)
    return results_of(avro_file_results("shop", "w", tables, str(path), path.read_bytes()))


def read_json(tmp_path, payloads: list[dict], tables=DECLARED):
    events = [mysql(p, pos=10 + i, obj="shop.orders") for i, p in enumerate(payloads)]
    path = write_json_events(tmp_path / "orders.jsonl", events)
    return results_of(json_file_results("shop", "w", tables, str(path), path.read_bytes()))


def test_a_datetime_record_without_a_logical_type_is_a_datetime_column_by_its_shape(tmp_path):
    schema = [{"name": "id", "type": "long"}, {"name": "placed_at", "type": ["null", SHAPED_RECORD]}]

    [row], dead = read_avro(tmp_path, schema, [{"id": 1, "placed_at": {"date": PLACED.date(), "time": PLACED.time()}}],
                            tables=TableSettings())

    assert dead == []
    assert json.loads(row["column_types_json"])["placed_at"] == "DATETIME"
    assert row["new_values"]["placed_at"] == "2024-03-10T09:01:35"


def test_a_shaped_datetime_record_under_a_declared_datetime_lands_as_its_wall_clock(tmp_path):
    schema = [{"name": "id", "type": "long"}, {"name": "placed_at", "type": ["null", SHAPED_RECORD]}]

    [row], dead = read_avro(tmp_path, schema, [{"id": 1, "placed_at": {"date": PLACED.date(), "time": PLACED.time()}}])

    assert dead == []
    assert (json.loads(row["column_types_json"])["placed_at"], row["new_values"]["placed_at"]) == (
        "DATETIME", "2024-03-10T09:01:35")


def test_a_datetime_record_with_a_logical_type_and_logically_typed_fields_decodes(tmp_path):
    record = {**SHAPED_RECORD, "logicalType": "datetime"}
    schema = [{"name": "id", "type": "long"}, {"name": "placed_at", "type": ["null", record]}]

    [row], dead = read_avro(tmp_path, schema, [{"id": 1, "placed_at": {"date": date(2024, 3, 10), "time": time(9, 1, 35)}}],
                            tables=TableSettings())

    assert dead == []
    assert row["new_values"]["placed_at"] == "2024-03-10T09:01:35"


def test_a_record_with_more_than_date_and_time_stays_a_json_column(tmp_path):
    record = {"type": "record", "name": "stamp", "fields": [
        {"name": "date", "type": "int"}, {"name": "time", "type": "long"}, {"name": "zone", "type": "string"}]}
    schema = [{"name": "id", "type": "long"}, {"name": "stamp", "type": record}]

    [row], _ = read_avro(tmp_path, schema, [{"id": 1, "stamp": {"date": 19792, "time": 0, "zone": "CET"}}],
                         tables=TableSettings())

    assert json.loads(row["column_types_json"])["stamp"] == "JSON"
    assert json.loads(row["new_values"]["stamp"]) == {"date": 19792, "time": 0, "zone": "CET"}


def test_avro_nanosecond_timestamps_land_as_datetime_and_timestamp_to_the_microsecond(tmp_path):
    schema = [{"name": "id", "type": "long"},
              {"name": "local_at", "type": {"type": "long", "logicalType": "local-timestamp-nanos"}},
              {"name": "paid_at", "type": {"type": "long", "logicalType": "timestamp-nanos"}}]
    nanos = 1710061295_250000_999

    [row], dead = read_avro(tmp_path, schema, [{"id": 1, "local_at": nanos, "paid_at": nanos}], tables=TableSettings())

    assert dead == []
    types = json.loads(row["column_types_json"])
    assert (types["local_at"], types["paid_at"]) == ("DATETIME", "TIMESTAMP")
    assert (row["new_values"]["local_at"], row["new_values"]["paid_at"]) == (
        "2024-03-10T09:01:35.250000", "2024-03-10T09:01:35.250000Z")


def test_a_declared_datetime_converts_a_json_datetime_record(tmp_path):
    [row], dead = read_json(tmp_path, [{"id": 1, "placed_at": {"date": 19792, "time": 32495000000}}])

    assert dead == []
    assert (json.loads(row["column_types_json"])["placed_at"], row["new_values"]["placed_at"]) == (
        "DATETIME", "2024-03-10T09:01:35")


def test_a_declared_datetime_converts_an_avro_instant_to_its_utc_wall_clock(tmp_path):
    schema = [{"name": "id", "type": "long"},
              {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-micros"}}]

    [row], dead = read_avro(tmp_path, schema, [{"id": 1, "placed_at": datetime(2024, 3, 10, 9, 1, 35, 250000, tzinfo=UTC)}])

    assert dead == []
    assert row["new_values"]["placed_at"] == "2024-03-10T09:01:35.250000"


def test_a_declared_datetime_holding_a_bare_number_is_dead_lettered_naming_table_column_value_and_fix(tmp_path):
    rows, [reason] = read_json(tmp_path, [{"id": 1, "placed_at": 1710061295}])

    assert rows == []
    assert "table 'shop_orders' column 'placed_at'" in reason
    assert "declared DATETIME" in reason and "1710061295" in reason
    assert "declare the column INT64" in reason


def test_a_declared_datetime_record_whose_time_is_no_time_of_day_is_dead_lettered(tmp_path):
    rows, [reason] = read_json(tmp_path, [{"id": 1, "placed_at": {"date": 19792, "time": 86400000000}}])

    assert rows == []
    assert "table 'shop_orders' column 'placed_at'" in reason and "86400000000" in reason
    assert "microseconds of the day" in reason


def test_other_rows_of_a_file_land_when_one_value_cannot_convert(tmp_path):
    rows, dead = read_json(tmp_path, [{"id": 1, "placed_at": True},
                                      {"id": 2, "placed_at": "2024-03-10 09:01:35"}])

    assert [r["keys"]["id"] for r in rows] == ["2"] and len(dead) == 1
    assert rows[0]["new_values"]["placed_at"] == "2024-03-10 09:01:35"  # text: apply reads it exactly
