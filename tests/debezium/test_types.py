"""Debezium's logical types -> canonical column types, and their JSON values -> exact values.

Each schema is a Kafka Connect field schema as the JSON converter writes it with
``schemas.enable``; each value is the converter's JSON for it (days, micros, base64 bytes).
The written text is checked through :func:`airflow_cdc.model.value_text`, what the changelog holds.
"""

from __future__ import annotations

import base64
from decimal import Decimal

import pytest

from airflow_cdc.model import value_text
from airflow_cdc.sources.column_types import parse_source_type
from airflow_cdc.sources.debezium.errors import MalformedEventError, UnsupportedDebeziumTypeError
from airflow_cdc.sources.debezium.types import (
    column_conversion,
    declared_column_types,
    declared_conversion,
    row_conversions,
)


def field(kind, name=None, **extra):
    schema = {"type": kind, "optional": True, "field": "c"}
    if name:
        schema["name"] = name
        schema["version"] = 1
    schema.update(extra)
    return schema


def convert(schema, value):
    """(canonical type, changelog text) of ``value`` in a column of ``schema``."""
    conversion = column_conversion("c", schema)
    return conversion.canonical, value_text(conversion.value(value))


def unscaled_base64(unscaled: int) -> str:
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


def decimal_field(scale, precision=None):
    parameters = {"scale": str(scale)}
    if precision is not None:
        parameters["connect.decimal.precision"] = str(precision)
    return field("bytes", "org.apache.kafka.connect.data.Decimal", parameters=parameters)


# --- plain Connect types ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kind, value, expected",
    [
        ("int8", 5, ("INT64", "5")),
        ("int16", -300, ("INT64", "-300")),
        ("int32", 70000, ("INT64", "70000")),
        ("int64", 9_223_372_036_854_775_807, ("INT64", "9223372036854775807")),
        ("float32", Decimal("1.5"), ("FLOAT32", "1.5")),
        ("float64", float("nan"), ("FLOAT64", "NaN")),
        ("boolean", True, ("BOOL", "true")),
        ("string", "héllo", ("STRING", "héllo")),
        ("bytes", "AAEC", ("BYTES", "AAEC")),
    ],
)
def test_plain_connect_types_map_to_canonical_types(kind, value, expected):
    assert convert(field(kind), value) == expected


def test_bytes_that_are_not_base64_are_refused():
    with pytest.raises(MalformedEventError, match="column 'c'"):
        convert(field("bytes"), "not base64!")


# --- dates and times ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["io.debezium.time.Date", "org.apache.kafka.connect.data.Date"])
def test_a_date_is_days_since_the_epoch(name):
    assert convert(field("int32", name), 19_797) == ("DATE", "2024-03-15")
    assert convert(field("int32", name), -1) == ("DATE", "1969-12-31")


@pytest.mark.parametrize(
    "name, value, text",
    [
        ("io.debezium.time.Time", 45_296_789, "12:34:56.789000"),
        ("org.apache.kafka.connect.data.Time", 45_296_789, "12:34:56.789000"),
        ("io.debezium.time.MicroTime", 45_296_789_012, "12:34:56.789012"),
        ("io.debezium.time.NanoTime", 45_296_789_012_345, "12:34:56.789012345"),
        # MySQL TIME is a duration: hours beyond 23, and a sign.
        ("io.debezium.time.MicroTime", 3_020_399_000_000, "838:59:59.000000"),
        ("io.debezium.time.MicroTime", -3_600_000_001, "-01:00:00.000001"),
    ],
)
def test_times_of_day_are_text_with_every_digit(name, value, text):
    assert convert(field("int64", name), value) == ("STRING", text)


@pytest.mark.parametrize(
    "name, value, text",
    [
        ("io.debezium.time.Timestamp", 1_710_505_800_123, "2024-03-15T12:30:00.123000"),
        ("org.apache.kafka.connect.data.Timestamp", 1_710_505_800_123, "2024-03-15T12:30:00.123000"),
        ("io.debezium.time.MicroTimestamp", 1_710_505_800_123_456, "2024-03-15T12:30:00.123456"),
        ("io.debezium.time.NanoTimestamp", 1_710_505_800_123_456_789, "2024-03-15T12:30:00.123456789"),
        ("io.debezium.time.MicroTimestamp", -1, "1969-12-31T23:59:59.999999"),
    ],
)
def test_wall_clock_timestamps_are_datetimes_without_a_zone(name, value, text):
    assert convert(field("int64", name), value) == ("DATETIME", text)


@pytest.mark.parametrize(
    "value, text",
    [
        ("2024-03-15T12:30:00.123456Z", "2024-03-15T12:30:00.123456Z"),
        ("2024-03-15T14:30:00.123456+02:00", "2024-03-15T12:30:00.123456Z"),
        ("2024-03-15T00:30:00-05:30", "2024-03-15T06:00:00.000000Z"),
        ("2024-03-15T12:30:00.123456789Z", "2024-03-15T12:30:00.123456789Z"),
    ],
)
def test_a_zoned_timestamp_is_the_same_instant_in_utc(value, text):
    assert convert(field("string", "io.debezium.time.ZonedTimestamp"), value) == ("TIMESTAMP", text)


def test_a_zoned_timestamp_without_a_zone_is_refused():
    with pytest.raises(MalformedEventError, match="io.debezium.time.ZonedTimestamp"):
        convert(field("string", "io.debezium.time.ZonedTimestamp"), "2024-03-15T12:30:00")


@pytest.mark.parametrize(
    "name, kind, value, expected",
    [
        ("io.debezium.time.ZonedTime", "string", "12:30:00.5Z", ("STRING", "12:30:00.5Z")),
        ("io.debezium.time.Year", "int32", 2024, ("INT64", "2024")),
        ("io.debezium.time.MicroDuration", "int64", 90_000_000, ("INT64", "90000000")),
        ("io.debezium.time.Interval", "string", "P1Y2M3DT4H5M6.78S", ("INTERVAL", "P1Y2M3DT4H5M6.78S")),
    ],
)
def test_other_time_types_keep_their_values(name, kind, value, expected):
    assert convert(field(kind, name), value) == expected


# --- decimals -----------------------------------------------------------------------------------
def test_a_decimal_of_38_digits_is_exact():
    unscaled = 12345678901234567890123456789012345678
    canonical, text = convert(decimal_field(10, 38), unscaled_base64(unscaled))

    assert (canonical, text) == ("NUMERIC(38,10)", "1234567890123456789012345678.9012345678")


def test_a_negative_decimal_keeps_its_trailing_zeros():
    assert convert(decimal_field(2, 10), unscaled_base64(-1500)) == ("NUMERIC(10,2)", "-15.00")


def test_a_decimal_without_precision_is_numeric_38():
    assert convert(decimal_field(3), unscaled_base64(1)) == ("NUMERIC(38,3)", "0.001")


def test_a_decimal_wider_than_iceberg_is_exact_text():
    unscaled = 10**45 + 7
    assert convert(decimal_field(5, 50), unscaled_base64(unscaled)) == ("PG_NUMERIC", "10000000000000000000000000000000000000000.00007")


def test_a_decimal_with_a_negative_scale_is_exact_text():
    assert convert(decimal_field(-3, 5), unscaled_base64(12)) == ("PG_NUMERIC", "12000")


def test_a_decimal_written_as_a_number_is_read_exactly():
    # The JSON converter's decimal.format=NUMERIC.
    assert convert(decimal_field(2, 10), Decimal("20.50")) == ("NUMERIC(10,2)", "20.50")


def test_a_variable_scale_decimal_is_exact_text():
    schema = field("struct", "io.debezium.data.VariableScaleDecimal", fields=[
        {"type": "int32", "optional": False, "field": "scale"},
        {"type": "bytes", "optional": False, "field": "value"},
    ])
    value = {"scale": 40, "value": unscaled_base64(-(10**60) - 1)}

    canonical, text = convert(schema, value)

    assert canonical == "PG_NUMERIC"
    assert text == "-100000000000000000000.0000000000000000000000000000000000000001"


def test_every_numeric_canonical_type_is_one_apply_reads():
    for schema in (decimal_field(2, 10), decimal_field(5, 50), decimal_field(3)):
        parse_source_type(column_conversion("c", schema).canonical)


# --- other logical types --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, kind, value, expected",
    [
        ("io.debezium.data.Json", "string", '{"a": [1, 2.50]}', ("JSON", '{"a": [1, 2.50]}')),
        ("io.debezium.data.Uuid", "string", "0f8fad5b-d9cb-469f-a165-70867728950e", ("UUID", "0f8fad5b-d9cb-469f-a165-70867728950e")),
        ("io.debezium.data.Enum", "string", "shipped", ("STRING", "shipped")),
        ("io.debezium.data.EnumSet", "string", "a,b", ("STRING", "a,b")),
        ("io.debezium.data.Xml", "string", "<a/>", ("STRING", "<a/>")),
        ("io.debezium.data.Bits", "bytes", "Aw==", ("BYTES", "Aw==")),
    ],
)
def test_debezium_data_types_map_to_canonical_types(name, kind, value, expected):
    assert convert(field(kind, name), value) == expected


def test_a_geometry_is_kept_as_json():
    schema = field("struct", "io.debezium.data.geometry.Point", fields=[])

    assert convert(schema, {"x": 1.5, "y": 2, "wkb": "AQE=", "srid": None}) == ("JSON", '{"srid":null,"wkb":"AQE=","x":1.5,"y":2}')


def test_an_array_converts_each_element_by_its_type():
    schema = field("array", items={"type": "int32", "optional": True, "name": "io.debezium.time.Date"})

    assert convert(schema, [19_797, None]) == ("ARRAY<DATE>", '["2024-03-15",null]')


def test_an_array_of_decimals_keeps_every_digit():
    schema = field("array", items=decimal_field(2, 10))

    assert convert(schema, [unscaled_base64(1999), unscaled_base64(5)]) == ("ARRAY<NUMERIC(10,2)>", "[19.99,0.05]")


def test_a_nested_array_is_json():
    schema = field("array", items={"type": "array", "items": {"type": "int32"}})

    assert convert(schema, [[1, 2], [3]]) == ("JSON", "[[1,2],[3]]")


def test_a_map_is_json():
    schema = field("map", keys={"type": "string"}, values={"type": "string"})

    assert convert(schema, {"k": "v"}) == ("JSON", '{"k":"v"}')


def test_an_unknown_logical_type_is_refused_naming_type_and_column():
    with pytest.raises(UnsupportedDebeziumTypeError, match="column 'c' has Debezium type 'io.example.Money'"):
        column_conversion("c", field("string", "io.example.Money"))


def test_a_value_of_the_wrong_shape_is_refused_naming_the_column_and_value():
    with pytest.raises(MalformedEventError, match="column 'c': value '2024-03-15' is not a io.debezium.time.Date value"):
        convert(field("int32", "io.debezium.time.Date"), "2024-03-15")


def test_a_row_schema_gives_every_column_its_conversion():
    conversions = row_conversions({"type": "struct", "fields": [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "name": "io.debezium.data.Json", "field": "doc"},
    ]})

    assert {name: c.canonical for name, c in conversions.items()} == {"id": "INT64", "doc": "JSON"}


# --- without schemas ------------------------------------------------------------------------------
def test_an_undeclared_column_is_a_string_kept_as_is():
    conversion = declared_conversion("c", None)

    assert (conversion.canonical, value_text(conversion.value(42))) == ("STRING", "42")


def test_a_declared_canonical_type_takes_values_as_they_are():
    conversion = declared_conversion("c", "NUMERIC(10,2)")

    assert (conversion.canonical, conversion.value(Decimal("20.50"))) == ("NUMERIC(10,2)", Decimal("20.50"))


def test_a_declared_semantic_type_converts_like_the_schema():
    assert declared_conversion("c", "io.debezium.time.Date").value(19_797) == "2024-03-15"


def test_a_declared_base64_decimal_names_its_precision_and_scale():
    conversion = declared_conversion("c", "org.apache.kafka.connect.data.Decimal(10,2)")

    assert (conversion.canonical, value_text(conversion.value(unscaled_base64(1999)))) == ("NUMERIC(10,2)", "19.99")


def test_a_declared_base64_decimal_without_scale_is_refused():
    with pytest.raises(UnsupportedDebeziumTypeError, match=r"Decimal\(10,2\)"):
        declared_conversion("c", "org.apache.kafka.connect.data.Decimal")


def test_declared_column_types_are_checked_naming_table_and_column():
    assert declared_column_types({"public.orders": {"amount": " NUMERIC(10,2) "}}) == {"public.orders": {"amount": "NUMERIC(10,2)"}}
    with pytest.raises(UnsupportedDebeziumTypeError, match="table 'public.orders': column 'amount' is declared 'MONEY'"):
        declared_column_types({"public.orders": {"amount": "MONEY"}}, "shop")
