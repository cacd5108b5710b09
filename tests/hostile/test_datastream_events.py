"""Datastream JSON lines and Avro records of any content end as change rows or dead letters.

The functions under test are the ones the extract's Spark tasks run on every line and every
Avro file (:func:`json_line_results`, :func:`avro_file_results`); what they return is checked
to fit the changelog and dead-letter tables as ``createDataFrame`` would.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import math
import tempfile
from datetime import datetime, timezone
from decimal import Decimal

import fastavro
from hypothesis import given
from hypothesis import strategies as st

from airflow_cdc.sources.datastream.records import TableSettings, avro_file_results, json_line_results
from airflow_cdc.sources.datastream.writer import _json_value, write_avro_events
from tests.datastream.support import mysql, oracle, postgres, sqlserver, window

from .strategies import ODD_TEXT, hostile_lines, json_text
from .support import HALF, as_record, check_dead_letter, fits

STREAM, WINDOW_ID, FILE = "shop", window(0).window_id, "/w/2030/01/01/events.jsonl"
VALID = [
    _json_value(event) for event in (
        mysql({"id": 1, "name": "a", "price": Decimal("2.50")}, pos=10),
        oracle({"ID": 1, "NAME": "x"}),
        postgres({"id": 2, "tags": ["a", "b"], "doc": {"k": [1, 2]}}),
        sqlserver({"id": 3, "ratio": 1.5}),
    )
]


def line_result(line: str) -> tuple:
    return json_line_results(STREAM, WINDOW_ID, TableSettings(), {"_file": f"file:{FILE}", "value": line})


def checked(result: tuple) -> dict:
    kind, values = result[0], result[1]
    assert kind in ("row", "dead"), result
    if kind == "row":
        return as_record(fits("row", values))
    record = check_dead_letter(values)
    assert json.loads(record["source_metadata_json"])["partition"] == record["partition_id"]
    return record


@given(st.sampled_from(VALID).flatmap(hostile_lines))
def test_any_json_line_becomes_a_change_row_or_a_dead_letter_with_a_reason(line):
    record = checked(line_result(line))

    assert record["partition_id"] == FILE


@HALF
@given(st.lists(st.sampled_from(VALID).flatmap(hostile_lines), min_size=1, max_size=6), st.randoms())
def test_every_good_event_among_hostile_lines_becomes_a_change_row(hostile, random):
    good = []
    for index, event in enumerate(VALID):
        event = copy.deepcopy(event)
        event["uuid"] = f"good-{index}"
        good.append(event)
    lines = [json_text(e) for e in good] + hostile
    random.shuffle(lines)

    records = [checked(line_result(line)) for line in lines]

    landed = {r["event_id"] for r in records if "reason" not in r}
    assert {e["uuid"] for e in good} <= landed


def test_a_line_nested_deeper_than_the_parser_reads_is_a_dead_letter_naming_that():
    record = checked(line_result("[" * 100_000 + "]" * 100_000))

    assert record["reason"] == "extract: line nests arrays or objects deeper than the JSON parser reads"


def test_an_event_at_a_source_position_beyond_64_bits_is_a_dead_letter_naming_the_field():
    event = copy.deepcopy(VALID[0])
    event["source_metadata"]["log_position"] = 10**30

    record = checked(line_result(json_text(event)))

    assert record["reason"] == (f"extract: log_position {10**30} does not fit in a signed 64-bit "
                                f"integer: no source position is that large")
    assert record["event_id"] == event["uuid"] and record["source_table"] == "shop_orders"


# --- Avro ------------------------------------------------------------------------------------
_PAYLOAD_FIELDS = [
    {"name": "id", "type": "long"},
    {"name": "ratio", "type": ["null", "double"]},
    {"name": "name", "type": ["null", "string"]},
    {"name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 9}]},
    {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
    {"name": "local", "type": ["null", {"type": "record", "name": "datetime", "logicalType": "datetime",
                                         "fields": [{"name": "date", "type": "int"}, {"name": "time", "type": "long"}]}]},
    {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
]
INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
PAYLOADS = st.fixed_dictionaries({
    "id": INT64,
    "ratio": st.none() | st.floats() | st.sampled_from([math.nan, math.inf, -math.inf]),
    # Avro strings are UTF-8: a lone surrogate cannot be written, so none is read either.
    "name": st.none() | st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
    | st.sampled_from([t for t in ODD_TEXT if t != "\ud800"]),
    "amount": st.none() | st.decimals(allow_nan=False, allow_infinity=False, places=9,
                                      min_value=Decimal("-1e28") + 1, max_value=Decimal("1e28") - 1),
    "at": st.none() | st.datetimes(timezones=st.just(timezone.utc)) | INT64,  # raw micros: any
    "local": st.none() | st.fixed_dictionaries({"date": INT32, "time": INT64}),
    "day": st.none() | st.dates(),
})


@functools.cache
def _event_schema() -> str:
    """The schema Datastream's Avro files have (the writer's), with the payload above, as JSON."""
    with tempfile.TemporaryDirectory(prefix="hostile-avro-") as folder:
        path = write_avro_events(f"{folder}/schema.avro", [mysql({"id": 0}, pos=1)])
        with open(path, "rb") as handle:
            schema = fastavro.reader(handle).writer_schema
    for field in schema["fields"]:
        if field["name"] == "payload":
            field["type"] = {"type": "record", "name": "payload", "fields": _PAYLOAD_FIELDS}
    return json.dumps(schema)


def avro_file(payloads: list[dict]) -> bytes:
    """One Avro file of MySQL CDC events with ``payloads`` (raw Avro values for ``local``)."""
    events = [mysql({"id": 0}, pos=10 + i, uuid=f"avro-{i}") for i in range(len(payloads))]
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(json.loads(_event_schema())),
                    [{**e, "payload": p, "sort_keys": []} for e, p in zip(events, payloads)])
    return out.getvalue()


@given(st.lists(PAYLOADS, min_size=1, max_size=4))
def test_any_avro_payload_value_becomes_a_change_row_or_a_dead_letter_with_a_reason(payloads):
    results = avro_file_results(STREAM, WINDOW_ID, TableSettings(), f"file:{FILE}", avro_file(payloads))

    records = [checked(r) for r in results]
    # One result per record, but one dead letter for the records of an Avro block fastavro
    # cannot read (it decodes logical types, such as timestamps, while reading a block).
    whole_blocks = [r for r in records if r.get("reason", "").startswith(("extract: Avro block ", "extract: file is not readable Avro"))]
    assert len(records) == len(payloads) or (whole_blocks and len(records) <= len(payloads))


@given(st.data())
def test_a_corrupted_avro_file_becomes_rows_and_dead_letters_never_an_error(data):
    content = bytearray(avro_file([{"id": 1, "ratio": 1.5, "name": "é😀", "amount": Decimal("1.5"),
                                    "at": datetime(2030, 1, 1, tzinfo=timezone.utc),
                                    "local": {"date": 1, "time": 2}, "day": None}] * 3))
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.integers(0, len(content) - 1))
        content[where] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        content = content[: data.draw(st.integers(0, len(content)))]

    for result in avro_file_results(STREAM, WINDOW_ID, TableSettings(), FILE, bytes(content)):
        checked(result)


def test_a_datetime_value_beyond_year_9999_is_a_dead_letter_of_its_record_alone():
    good = {"id": 1, "ratio": None, "name": None, "amount": None, "at": None, "day": None,
            "local": {"date": 1, "time": 0}}
    beyond = {**good, "id": 2, "local": {"date": 2**31 - 1, "time": 0}}

    first, second = [checked(r) for r in avro_file_results(
        STREAM, WINDOW_ID, TableSettings(), FILE, avro_file([good, beyond]))]

    assert "reason" not in first and first["keys"] == {"id": "1"}
    assert second["event_id"] == "avro-1" and second["reason"].startswith(
        "extract: record 1 ('avro-1') has a payload value its writer schema's type cannot hold")
