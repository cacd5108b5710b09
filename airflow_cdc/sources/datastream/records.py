"""Datastream's event files as change rows: what one JSON-lines or Avro file's events become.

Pure Python over a file's bytes (no Spark): the source's Spark side
(``airflow_cdc.spark_jobs.sources.datastream``) reads the planned files inside Spark tasks and
hands each file's bytes here.

* JSON lines are split as Spark's text reader splits them and each line is parsed with exact
  decimals (:func:`json_file_results`); Avro goes through fastavro, the payload's column types
  from each file's writer schema (:func:`avro_file_results`). Both give the same plain events,
  mapped by :mod:`.events`, with the column types the pipeline declares (``column_types`` in the
  spec) first.
* Events are keyed by the plan's key columns per table (declared in the spec, looked up into
  the options), else by their metadata (:class:`TableSettings`).
* Malformed lines, files and events become dead letters with the reason; a corrupt Avro block
  too (its bytes), the file's other blocks are read (:mod:`.avro_blocks`).

Each result is a tuple: ("row", changelog tuple, read ms, ROWID-keyed table or None) or
("dead", dead-letter tuple, read ms or None, None).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from airflow_cdc.sources.base import DeadLetter, changelog_tuple, dead_letter_tuple
from airflow_cdc.sources.datastream.avro_blocks import read_avro_blocks
from airflow_cdc.sources.datastream.events import (
    ORACLE_ROW_ID_COLUMN,
    MalformedEventError,
    event_to_change_row,
    json_line_event,
    normalize_value,
    parse_event_time,
)
from airflow_cdc.sources.datastream.types import AvroPayload, DeclaredTypeError


def normal_path(path: str) -> str:
    """A file path as the plan names it: Spark reports local files as ``file:/...``."""
    for prefix in ("file://", "file:"):
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


@dataclass(frozen=True)
class TableSettings:
    """What the pipeline says per source table: key columns and declared column types."""

    keys: dict = field(default_factory=dict)
    types: dict = field(default_factory=dict)


def map_event(stream: str, window_id: str, partition_id: str, event, tables: TableSettings,
              schema_types=None) -> tuple:
    """("row", changelog tuple, read ms, ROWID-keyed table or None) or
    ("dead", dead-letter tuple, read ms or None, None)."""
    try:
        row = event_to_change_row(
            event, stream, window_id, partition_id,
            table_keys=tables.keys, declared_types=tables.types, schema_types=schema_types,
        )
        values = changelog_tuple(row)
    except (MalformedEventError, DeclaredTypeError) as error:
        return dead_letter(stream, window_id, partition_id, event, str(error))
    except Exception as error:  # noqa: BLE001 - whatever an event holds, it never fails the window
        return dead_letter(stream, window_id, partition_id, event,
                           f"event {_event_name(event)} cannot be mapped ({type(error).__name__}: {error})")
    by_row_id = row.source_metadata["keyed_by"] == ORACLE_ROW_ID_COLUMN
    return ("row", values, row.source_metadata["read_timestamp"],
            row.source_table if by_row_id else None)


def _event_name(event) -> str:
    uuid = event.get("uuid") if isinstance(event, dict) else None
    return repr(uuid)[:100] if uuid is not None else "without a uuid"


def _raw_text(raw) -> str:
    """The dead letter's copy of ``raw``: the line itself, or the event as JSON (its repr, cut,
    when even that fails: a structure nested deeper than Python's recursion limit)."""
    if isinstance(raw, str):
        return raw
    try:
        return json.dumps(normalize_value(raw), default=str)
    except Exception:  # noqa: BLE001 - the dead letter must be written whatever the event holds
        try:
            return repr(raw)[:100_000]
        except Exception:  # noqa: BLE001
            return f"<a {type(raw).__name__} that cannot be written as text>"


def dead_letter(stream: str, window_id: str, partition_id: str, raw, reason: str) -> tuple:
    is_event = isinstance(raw, dict)
    table, uuid = (raw.get("object"), raw.get("uuid")) if is_event else (None, None)
    dead = DeadLetter(
        partition_id=partition_id,
        raw=_raw_text(raw),
        reason=reason,
        source_table=table if isinstance(table, str) else None,
        event_id=uuid if isinstance(uuid, str) else None,
    )
    read_ms = None
    if is_event:
        try:
            read_ms = int(parse_event_time("read_timestamp", raw.get("read_timestamp")).timestamp() * 1000)
        except (MalformedEventError, ValueError, TypeError, OverflowError):
            read_ms = None
    return ("dead", dead_letter_tuple(stream, window_id, dead), read_ms, None)


def json_line_results(stream: str, window_id: str, tables: TableSettings, row) -> tuple:
    """The result of one line (``row``: ``value``, the line, and ``_file``, its file)."""
    return _json_line(stream, window_id, tables, normal_path(row["_file"]), row["value"])


def _json_line(stream: str, window_id: str, tables: TableSettings, path: str, line: str) -> tuple:
    try:
        event = json_line_event(line)
    except MalformedEventError as error:
        return dead_letter(stream, window_id, path, line, str(error))
    return map_event(stream, window_id, path, event, tables)


def avro_file_results(stream: str, window_id: str, tables: TableSettings, path: str,
                      content: bytes) -> list[tuple]:
    """Every event of one Avro file through fastavro, block by block: a corrupt block is one
    dead letter (its bytes, number and byte range) and the file's other blocks are read; a
    file whose header is unreadable is one dead letter."""
    path = normal_path(path)
    try:
        blocks = read_avro_blocks(content)
        payload = AvroPayload(blocks.writer_schema)
    except Exception as error:  # noqa: BLE001 - an unreadable header makes the file a dead letter
        return [dead_letter(stream, window_id, path, avro_bytes_text(path, content, 0, len(content)),
                            f"file is not readable Avro ({type(error).__name__}: {error})")]
    records = blocks.records
    results = [
        dead_letter(stream, window_id, path, avro_bytes_text(path, content, block.start, block.end),
                    f"Avro block {block.index} of file {path} (bytes {block.start}-{block.end}) is "
                    f"corrupt ({block.error}): its records are not read, the file's other blocks "
                    f"are; the block's bytes are kept here")
        for block in blocks.corrupt
    ]
    for index, record in enumerate(records):
        if isinstance(record, dict) and "payload" in record:
            try:
                record = {**record, "payload": payload.decode(record["payload"])}
            except Exception as error:  # noqa: BLE001 - one record's values fail it alone
                results.append(dead_letter(
                    stream, window_id, path, record,
                    f"record {index} ({_event_name(record)}) has a payload value its writer schema's "
                    f"type cannot hold (table {record.get('object')!r} {error}): correct the source's "
                    f"value"))
                continue
        results.append(map_event(stream, window_id, path, record, tables, payload.types))
    return results


def avro_bytes_text(path: str, content: bytes, start: int, end: int) -> str:
    """Bytes ``[start, end)`` of an Avro file as dead-letter text (base64, with where they lie)."""
    import base64

    return json.dumps({"file": path, "bytes": [start, end],
                       "base64": base64.b64encode(content[start:end]).decode("ascii")})


def json_file_results(stream: str, window_id: str, tables: TableSettings, path: str,
                      content: bytes) -> list[tuple]:
    """Every event of one JSON-lines file, as Spark's text reader splits it: lines end at
    ``\n``, ``\r\n`` or ``\r``; a leading byte-order mark is skipped; bytes that are no UTF-8
    become U+FFFD; blank lines are skipped (as Spark's JSON reader does)."""
    path = normal_path(path)
    if content.startswith(b"\xef\xbb\xbf"):
        content = content[3:]
    results = []
    for line in content.splitlines():
        text = line.decode("utf-8", "replace")
        if text.strip():
            results.append(_json_line(stream, window_id, tables, path, text))
    return results
