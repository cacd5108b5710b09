"""Writes Datastream output files (JSON lines, Avro) as the service lays them out.

For the demo, tests and laptops: events are plain dicts as in seed 001 (timestamps as
datetime). The Avro schema follows the seed's types: generic fields as strings,
``read_timestamp``/``source_timestamp`` as ``timestamp-millis``, ``sort_keys`` as an array
of string/long, ``source_metadata`` and ``payload`` as records (every field nullable).

The payload's schema is either given (``payload_schema``: what a Datastream stream of that
table writes, with its logical types, decimals and ``datetime`` records) or derived from
the values: ``Decimal`` as a decimal of precision 38 and the values' largest scale, an aware
``datetime`` as ``timestamp-micros``, a naive one as ``local-timestamp-micros``, ``date`` as
``date``. JSON lines write decimals as number literals with their scale (``20.00``), naive
datetimes and dates as ISO text.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

from airflow_cdc.model import format_ts, value_text
from airflow_cdc.sources.datastream.events import GENERIC_FIELDS

_EPOCH = datetime(1970, 1, 1)
# Datastream's Avro type of a DATETIME column: the wall-clock date and time of day.
DATETIME_RECORD = {
    "type": "record",
    "name": "datetime",
    "logicalType": "datetime",
    "fields": [{"name": "date", "type": "int"}, {"name": "time", "type": "long"}],
}


def _json_value(value: object) -> object:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.isoformat()
        return format_ts(value, timespec="milliseconds")  # Datastream writes milliseconds
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value


def write_json_events(path: str | Path, events: list[dict], extra_lines: list[str] = ()) -> Path:
    """One event per line (``extra_lines`` are written verbatim after them: malformed input)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    lines = [value_text(_json_value(e)) for e in events]  # decimals as exact literals
    target.write_text("\n".join([*lines, *extra_lines]) + "\n")
    return target


def _decimal_type(values: list) -> dict:
    scale = max(max(0, -v.as_tuple().exponent) for v in values)
    return {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": scale}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# (what every present value is, its Avro type or a function of the values), first match wins.
_AVRO_TYPES = (
    (lambda v: isinstance(v, bool), "boolean"),
    (lambda v: isinstance(v, int) and not isinstance(v, bool), "long"),
    (lambda v: isinstance(v, Decimal), _decimal_type),
    (_number, "double"),
    (lambda v: isinstance(v, datetime) and v.tzinfo is not None, {"type": "long", "logicalType": "timestamp-micros"}),
    (lambda v: isinstance(v, datetime) and v.tzinfo is None, {"type": "long", "logicalType": "local-timestamp-micros"}),
    (lambda v: isinstance(v, date) and not isinstance(v, datetime), {"type": "int", "logicalType": "date"}),
    (lambda v: isinstance(v, list), {"type": "array", "items": "string"}),
)


def _avro_type(values: list[object]) -> object:
    """The nullable Avro type of a column holding ``values``: the first of :data:`_AVRO_TYPES`
    every present value is, else string."""
    present = [v for v in values if v is not None]
    for every, kind in _AVRO_TYPES if present else ():
        if all(every(v) for v in present):
            return ["null", kind(present) if callable(kind) else kind]
    return ["null", "string"]


def _record(name: str, rows: list[dict]) -> dict:
    names: list[str] = []
    for row in rows:
        names += [n for n in row if n not in names]
    return {
        "type": "record",
        "name": name,
        "fields": [
            {"name": n, "type": _avro_type([r.get(n) for r in rows]), "default": None}
            for n in names
        ],
    }


def _is_datetime_record(schema: object) -> bool:
    if isinstance(schema, list):
        return any(_is_datetime_record(branch) for branch in schema)
    return schema == "datetime" or (isinstance(schema, dict) and schema.get("logicalType") == "datetime")


def _datetime_record(value: object) -> object:
    """A naive datetime as Datastream's ``datetime`` record (other values as they are)."""
    if not isinstance(value, datetime):
        return value
    since = value.replace(tzinfo=None) - _EPOCH
    return {"date": since.days, "time": since.seconds * 1_000_000 + since.microseconds}


def write_avro_events(path: str | Path, events: list[dict], payload_schema: dict | list | None = None) -> Path:
    """One Avro object container file holding ``events`` (all of one source object).

    ``payload_schema`` is the payload record's schema (a record, or its list of fields);
    naive datetimes given for its ``datetime`` record columns are written as such records.
    """
    import fastavro

    millis = {"type": "long", "logicalType": "timestamp-millis"}
    fields = []
    for name in GENERIC_FIELDS:
        if name in ("read_timestamp", "source_timestamp"):
            fields.append({"name": name, "type": millis})
        elif name == "sort_keys":
            fields.append({"name": name, "type": {"type": "array", "items": ["string", "long"]}})
        else:
            fields.append({"name": name, "type": ["null", "string"], "default": None})
    fields.append({"name": "source_metadata",
                   "type": _record("source_metadata", [e["source_metadata"] for e in events])})
    if payload_schema is None:
        payload = _record("payload", [e["payload"] for e in events])
    elif isinstance(payload_schema, list):
        payload = {"type": "record", "name": "payload", "fields": payload_schema}
    else:
        payload = payload_schema
    fields.append({"name": "payload", "type": payload})
    datetime_columns = {f["name"] for f in payload["fields"] if _is_datetime_record(f["type"])}
    records = []
    for event in events:
        values = {k: (_datetime_record(v) if k in datetime_columns else v) for k, v in event["payload"].items()}
        records.append({**event, "payload": values, "sort_keys": event.get("sort_keys") or []})
    schema = fastavro.parse_schema({"type": "record", "name": "datastream_event", "fields": fields})
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as handle:
        fastavro.writer(handle, schema, records)
    return target
