"""Writes Datastream output files (JSON lines, Avro) as the service lays them out.

For the demo, tests and laptops: events are plain dicts as in seed 001 (timestamps as
datetime). The Avro schema follows the seed's types: generic fields as strings,
``read_timestamp``/``source_timestamp`` as ``timestamp-millis``, ``sort_keys`` as an array
of string/long, ``source_metadata`` and ``payload`` as records (every field nullable).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from airflow_cdc.sources.datastream.events import GENERIC_FIELDS


def _json_value(value: object) -> object:
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return value


def write_json_events(path: str | Path, events: list[dict], extra_lines: list[str] = ()) -> Path:
    """One event per line (``extra_lines`` are written verbatim after them: malformed input)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({k: _json_value(v) for k, v in e.items()}) for e in events]
    target.write_text("\n".join([*lines, *extra_lines]) + "\n")
    return target


def _avro_type(values: list[object]) -> object:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        kind: object = "boolean"
    elif present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        kind = "long"
    elif present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        kind = "double"
    elif present and all(isinstance(v, list) for v in present):
        kind = {"type": "array", "items": "string"}
    else:
        kind = "string"
    return ["null", kind]


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


def write_avro_events(path: str | Path, events: list[dict]) -> Path:
    """One Avro object container file holding ``events`` (all of one source object)."""
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
    fields.append({"name": "payload", "type": _record("payload", [e["payload"] for e in events])})
    schema = fastavro.parse_schema({"type": "record", "name": "datastream_event", "fields": fields})
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as handle:
        fastavro.writer(handle, schema, [{**e, "sort_keys": e.get("sort_keys") or []} for e in events])
    return target
