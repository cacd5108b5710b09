"""One Datastream event -> one changelog row, with the ordering key of its source database.

An event (seed 001) is a JSON object or Avro record with the generic metadata
(``stream_name``, ``read_method``, ``object``, ``schema_key``, ``uuid``, ``read_timestamp``,
``source_timestamp``, ``sort_keys``), ``source_metadata`` specific to MySQL, Oracle,
PostgreSQL or SQL Server, and ``payload``: the whole row. Both file formats are first turned
into the same plain dict (:func:`normalize_value` for Avro values), so JSON and Avro files of
the same events and column types give identical rows. Column types come from
:mod:`.types` (declared, the Avro schema, or inferred from JSON values).

Ordering (seed 001, "順序と整合性"), encoded with :func:`airflow_cdc.model.encode_ordering_key`:

* every backfill event ranks below every CDC event of the same key (rank 0 vs 1);
* MySQL: log_file (name, then its number) and log_position;
* Oracle: scn, then rs_id (its three hexadecimal parts as numbers), then ssn;
* PostgreSQL and SQL Server: source_timestamp, then the LSN compared as numbers
  (``16/B374D848`` and ``00000027:00000ac0:0002`` as integers, never as text);
* then the change type: UPDATE-DELETE ranks before every other change at the same source
  position (see "Row moves" below);
* the event uuid last, so two different events never tie.

Deletes come from ``is_deleted``. Change types INSERT, UPDATE, UPDATE-INSERT, UPDATE-DELETE
and DELETE (UPDATE-DELETE is the old image of a key-changing update: a delete of that key).

Keys, first that applies: the table's key columns given by the pipeline (declared, or looked
up from the source database's primary key at plan time), keyed by the table's identifier
(:func:`object_identifier`); ``source_metadata.primary_keys``; SQL Server's
``replication_index``; for Oracle only, the ``row_id`` (Datastream's Oracle metadata has no
primary_keys, so a ROWID is the key only of a table that truly has none; a row whose ROWID
changes is then a different row). A declared key column missing from a payload makes the
event a dead letter. The changelog's source metadata says which rule gave the key
(``keyed_by``).

Row moves: Oracle logs a row that changes ROWID (partition-key update with row movement, a
table shrink) as an UPDATE-DELETE of the old ROWID and an UPDATE-INSERT of the new one at the
same SCN, possibly with the same rs_id and ssn; MySQL logs a key-changing update (or a swap
of keys in one statement) as such pairs at one log position. Under a real key both events
can have the same key: the delete ranks first, so the row keeps the inserted image instead
of vanishing on a uuid tie-break. Under ROWID keys the pair addresses two rows: the old one
is deleted, the new one inserted.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Mapping, Sequence
from datetime import date, datetime, time, timezone
from decimal import Decimal
from uuid import UUID

from airflow_cdc.model import (
    CdcError,
    ChangeRow,
    Image,
    Op,
    encode_ordering_key,
    format_ts,
)
from airflow_cdc.sources.base import lone_surrogate_in
from airflow_cdc.sources.datastream.types import declared_payload, payload_column_types

UTC = timezone.utc
GENERIC_FIELDS = (
    "stream_name", "read_method", "object", "schema_key", "uuid", "read_timestamp",
    "source_timestamp", "sort_keys",
)
ORACLE_ROW_ID_COLUMN = "row_id"
CHANGE_TYPES = ("INSERT", "UPDATE", "UPDATE-INSERT", "UPDATE-DELETE", "DELETE")
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")
# What a JSON parse gives besides objects and arrays: each is its own changelog value.
_PLAIN_TYPES = frozenset({str, int, bool, float, Decimal, type(None)})


class MalformedEventError(CdcError, ValueError):
    """An event that cannot become a change row; it goes to the dead-letter table."""


_LONE_SURROGATE = (
    "line holds a lone surrogate (a \\udXXX escape without its pair): no UTF-8 text can hold "
    "it, and the changelog would keep U+FFFD in its place")


def source_database(read_method: str) -> str:
    """``mysql``, ``oracle``, ``postgresql`` or ``sqlserver`` from the event's read_method."""
    if not isinstance(read_method, (str, type(None))):
        raise MalformedEventError(
            f"read_method {read_method!r} is a {type(read_method).__name__}, not text naming the "
            f"source (seed 001, generic metadata)")
    method = (read_method or "").lower()
    for prefix, kind in (("mysql", "mysql"), ("oracle", "oracle"), ("postgres", "postgresql"),
                         ("sqlserver", "sqlserver")):
        if method.startswith(prefix):
            return kind
    raise MalformedEventError(
        f"read_method {read_method!r} names no source Datastream supports: expected one "
        f"starting with mysql-, oracle-, postgres or sqlserver- (seed 001, generic metadata)"
    )


def is_backfill(read_method: str) -> bool:
    return "backfill" in (read_method or "").lower()


def parse_event_time(name: str, value: object) -> datetime:
    """Epoch milliseconds (number or digits), ISO-8601 text (UTC when no offset) or datetime."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    if isinstance(value, bool) or value is None or value == "":
        raise MalformedEventError(f"{name} {value!r} is not a timestamp: Datastream always sets it")
    if isinstance(value, (int, float, Decimal)) or (isinstance(value, str) and value.strip().isdigit()):
        try:
            return datetime.fromtimestamp(int(value) / 1000, tz=UTC)
        except (ValueError, OverflowError, OSError):
            raise MalformedEventError(
                f"{name} {value!r} is not epoch milliseconds of an instant in the years 1 to 9999"
            ) from None
    try:
        parsed = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        raise MalformedEventError(
            f"{name} {value!r} is neither epoch milliseconds nor ISO-8601 text of an instant in "
            f"the years 1 to 9999"
        ) from None


def lsn_number(lsn: object) -> tuple[int, ...]:
    """An LSN as numbers: PostgreSQL ``X/Y`` -> (X<<32 | Y,); SQL Server ``a:b:c`` -> (a, b, c).

    Parts are hexadecimal, as both databases print them; plain decimal text is one number.
    """
    text = str(lsn).strip()
    try:
        if "/" in text:
            high, low = text.split("/", 1)
            parts: tuple[int, ...] = ((int(high, 16) << 32) | int(low, 16),)
        elif ":" in text:
            parts = tuple(int(part, 16) for part in text.split(":"))
        elif text.lower().startswith("0x"):
            parts = (int(text, 16),)
        else:
            parts = (int(text),)
        return tuple(_within_64_bits("lsn", lsn, part) for part in parts)
    except ValueError:
        raise MalformedEventError(
            f"lsn {lsn!r} is not a log sequence number: expected X/Y (PostgreSQL) or "
            f"a:b:c in hexadecimal (SQL Server)"
        ) from None


def rs_id_number(rs_id: object) -> tuple[int, ...]:
    """Oracle's record set id ``0x0073c9.000a4e4c.01d0`` as three numbers."""
    text = str(rs_id or "").strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    try:
        parts = tuple(int(part, 16) for part in text.split(".") if part.strip())
        return tuple(_within_64_bits("rs_id", rs_id, part) for part in parts)
    except ValueError:
        raise MalformedEventError(
            f"rs_id {rs_id!r} is not an Oracle record set id like 0x0073c9.000a4e4c.01d0"
        ) from None


def _log_file_parts(log_file: object) -> tuple[str, int]:
    match = re.match(r"^(.*?)(\d*)$", str(log_file or ""))
    stem, digits = match.group(1), match.group(2)
    return stem, int(digits) if digits else -1


def _int(name: str, value: object) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise MalformedEventError(f"{name} {value!r} is not an integer") from None
    return _within_64_bits(name, value, number)


def _within_64_bits(name: str, value: object, number: int) -> int:
    """``number`` (read from ``value``), refused when an ordering key cannot hold it."""
    if not -(1 << 63) <= number < (1 << 63):
        raise MalformedEventError(
            f"{name} {value!r} does not fit in a signed 64-bit integer: no source position is "
            f"that large")
    return number


def change_rank(event: dict) -> int:
    """0 for an UPDATE-DELETE, 1 for any other change: the old image of a pair goes first."""
    change_type = str((event.get("source_metadata") or {}).get("change_type") or "").upper()
    return 0 if change_type == "UPDATE-DELETE" else 1


def ordering_key(event: dict) -> bytes:
    """Bytes that sort like the source's order of ``event`` (see the module docstring)."""
    source_ts = parse_event_time("source_timestamp", event.get("source_timestamp"))
    if is_backfill(event.get("read_method", "")):
        read_ts = parse_event_time("read_timestamp", event.get("read_timestamp"))
        return _ordering_key(event, None, source_ts, read_ts)
    return _ordering_key(event, source_database(event.get("read_method", "")), source_ts, None)


def _ordering_key(event: dict, kind: str | None, source_ts: datetime, read_ts: datetime | None) -> bytes:
    """:func:`ordering_key` with the event's times and source database (``kind``; None for a
    backfill event) already read."""
    meta = event.get("source_metadata") or {}
    uuid = str(event.get("uuid"))
    rank = change_rank(event)
    if kind is None:
        return encode_ordering_key(0, source_ts, read_ts, rank, uuid)
    if kind == "mysql":
        stem, number = _log_file_parts(meta.get("log_file"))
        return encode_ordering_key(
            1, stem, number, _int("log_position", meta.get("log_position")), rank, uuid
        )
    if kind == "oracle":
        scn = meta.get("scn")
        parts = (None if scn is None else _int("scn", scn),)
        return encode_ordering_key(
            1, *parts, *rs_id_number(meta.get("rs_id")), _int("ssn", meta.get("ssn") or 0),
            rank, uuid,
        )
    lsn = meta.get("lsn")
    if lsn is None:
        raise MalformedEventError(f"{kind} CDC event {uuid} has no source_metadata.lsn")
    return encode_ordering_key(1, source_ts, *lsn_number(lsn), rank, uuid)


def normalize_value(value: object) -> object:
    """A payload value as the changelog holds it (Avro decodes richer Python types).

    Instants are RFC 3339 UTC text with ``Z``; a naive datetime is a wall-clock DATETIME and
    keeps no zone (``2024-03-10T09:01:35``); dates ``YYYY-MM-DD``; times ``HH:MM:SS.ffffff``;
    decimals stay :class:`~decimal.Decimal` (the changelog writes their exact text).
    """
    if type(value) in _PLAIN_TYPES:  # most values: no isinstance chain
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.isoformat()
        return format_ts(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, time):
        return value.isoformat(timespec="microseconds")
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {k: normalize_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalize_value(v) for v in value]
    return value


@functools.lru_cache(maxsize=4096)  # asked per event; a stream has few tables
def object_identifier(name: str) -> str:
    """A Datastream object name as an identifier (``shop.orders`` -> ``shop_orders``)."""
    cleaned = _NOT_IDENTIFIER.sub("_", name)
    return cleaned if not cleaned[:1].isdigit() else f"t_{cleaned}"


def source_table_name(event: dict) -> str:
    """The event's ``object`` as an identifier (``shop.orders`` -> ``shop_orders``)."""
    name = str(event.get("object") or "")
    if not name:
        raise MalformedEventError("event has no object: Datastream names the source table there")
    return object_identifier(name)


def key_columns(
    event: dict, kind: str, table_keys: Mapping[str, Sequence[str]] | None = None
) -> tuple[list[str], str]:
    """The event's key columns and the rule that gave them (module docstring, "Keys").

    ``table_keys`` maps table identifiers to the pipeline's key columns for them.
    """
    given = (table_keys or {}).get(source_table_name(event))
    if given:
        return [str(k) for k in given], "declared"
    meta = event.get("source_metadata") or {}
    for field, rule in (("primary_keys", True), ("replication_index", kind == "sqlserver")):
        names = meta.get(field)
        if not rule or not names:
            continue
        if not isinstance(names, list):
            raise MalformedEventError(
                f"source_metadata.{field} {names!r} of event {event.get('uuid')} is a "
                f"{type(names).__name__}, not a list of column names")
        return [str(k) for k in names], field
    if kind == "oracle":
        return [ORACLE_ROW_ID_COLUMN], ORACLE_ROW_ID_COLUMN
    raise MalformedEventError(
        f"table {event.get('object')!r} ({kind}) has no primary key in "
        f"source_metadata.primary_keys: Datastream leaves it empty for tables without one; "
        f"add a primary key to the source table or declare its key columns "
        f"(DatastreamPipeline key_columns={{{str(event.get('object'))!r}: [...]}})"
    )


def event_op(event: dict) -> Op:
    meta = event.get("source_metadata") or {}
    change_type = str(meta.get("change_type") or "").upper()
    if change_type and change_type not in CHANGE_TYPES:
        raise MalformedEventError(
            f"change_type {meta.get('change_type')!r} of event {event.get('uuid')} is not one of "
            f"{list(CHANGE_TYPES)}"
        )
    if meta.get("is_deleted") is True or change_type in ("DELETE", "UPDATE-DELETE"):
        return Op.DELETE
    if is_backfill(event.get("read_method", "")):
        return Op.READ
    if change_type in ("UPDATE", "UPDATE-INSERT"):
        return Op.UPDATE
    return Op.INSERT


def event_to_change_row(
    event: dict,
    stream: str,
    window_id: str,
    partition_id: str,
    table_keys: Mapping[str, Sequence[str]] | None = None,
    declared_types: Mapping[str, Mapping[str, str]] | None = None,
    schema_types: Mapping[str, str] | None = None,
) -> ChangeRow:
    """The changelog row of one event; :class:`MalformedEventError` names what is missing.

    ``table_keys``: the pipeline's key columns per table identifier (see :func:`key_columns`);
    ``declared_types`` the pipeline's column types by table identifier
    (:func:`.types.declared_column_types`), ``schema_types`` those of the Avro file's schema.
    """
    uuid, payload, meta = _event_parts(event)
    kind = source_database(event.get("read_method", ""))
    table = source_table_name(event)
    table_types = (declared_types or {}).get(table)
    if table_types:  # values the source encodes otherwise than their declared type
        payload = declared_payload(table, payload, table_types)
    values = {k: normalize_value(v) for k, v in payload.items() if v is not None}
    names, keyed_by = _keyed_values(event, kind, table_keys, table, values)
    op = event_op(event)
    read_ts = parse_event_time("read_timestamp", event.get("read_timestamp"))
    source_ts = parse_event_time("source_timestamp", event.get("source_timestamp"))
    metadata = _event_metadata(event, meta, kind, keyed_by, read_ts, source_ts)
    return ChangeRow(
        stream=stream,
        window_id=window_id,
        source_table=table,
        op=op,
        image=Image.FULL,
        keys={n: values[n] for n in names},
        new_values=None if op is Op.DELETE else values,
        old_values=values if op is Op.DELETE else None,
        column_types=_shared_types(payload_column_types(
            {name: payload.get(name, value) for name, value in values.items()},
            table_types,
            schema_types,
        )),
        commit_ts=source_ts,
        ordering_key=_ordering_key(event, None if is_backfill(event.get("read_method", "")) else kind,
                                   source_ts, read_ts),
        transaction_id=None if meta.get("tx_id") in (None, "") else str(meta.get("tx_id")),
        event_id=str(uuid),
        partition_id=partition_id,
        source_metadata=metadata,
    )


def _event_parts(event) -> tuple[object, dict, dict]:
    """The event's uuid, payload and source_metadata, each required."""
    if not isinstance(event, dict):
        raise MalformedEventError(f"event is a {type(event).__name__}, not an object")
    uuid = event.get("uuid")
    if not uuid:
        raise MalformedEventError("event has no uuid: Datastream gives every event one")
    payload = event.get("payload")
    if not isinstance(payload, dict):
        raise MalformedEventError(f"event {uuid} has no payload object")
    meta = event.get("source_metadata")
    if not isinstance(meta, dict):
        raise MalformedEventError(f"event {uuid} has no source_metadata object")
    return uuid, payload, meta


def _keyed_values(event: dict, kind: str, table_keys, table: str, values: dict) -> tuple[list, str]:
    """The event's key columns and what keyed it (:func:`key_columns`); an Oracle row keyed by
    its ROWID gets it among ``values``. Refused when a key column has no value."""
    uuid = event.get("uuid")
    names, keyed_by = key_columns(event, kind, table_keys)
    if keyed_by == ORACLE_ROW_ID_COLUMN:
        row_id = event["source_metadata"].get("row_id")
        if not row_id:
            raise MalformedEventError(
                f"Oracle event {uuid} of keyless table {event.get('object')!r} has no row_id"
            )
        values[ORACLE_ROW_ID_COLUMN] = str(row_id)
    missing = [n for n in names if n not in values]
    if missing and keyed_by == "declared":
        raise MalformedEventError(
            f"event {uuid} of table {table!r} (object "
            f"{event.get('object')!r}) lacks its declared key column(s) {missing} (or they are "
            f"null); its columns are {sorted(values)}: fix key_columns of the pipeline for "
            f"this table"
        )
    if missing:
        raise MalformedEventError(
            f"event {uuid} of {event.get('object')!r}: payload lacks key column(s) {missing}"
        )
    return names, keyed_by


def _event_metadata(event: dict, meta: dict, kind: str, keyed_by: str, read_ts, source_ts) -> dict:
    """The change row's source metadata: the event's generic fields, its times in
    milliseconds, the source database, what keyed it, and its source_metadata."""
    metadata = {name: event.get(name) for name in GENERIC_FIELDS if name != "uuid"}
    metadata["read_timestamp"] = _millis(read_ts)
    metadata["source_timestamp"] = _millis(source_ts)
    metadata["source_database"] = kind
    metadata["keyed_by"] = keyed_by
    # Avro records carry every field of their schema (None when unset), JSON only those set.
    metadata["source_metadata"] = {k: normalize_value(v) for k, v in meta.items() if v is not None}
    return metadata


# Column types by their items: the events of one table mostly have the same ones.
_SHARED_TYPES: dict[tuple, dict[str, str]] = {}


def _shared_types(types: dict[str, str]) -> dict[str, str]:
    """``types``, or an equal dict an earlier event of the window got, so consecutive rows
    hold one object and the changelog writes its JSON text once for them
    (``model._shared_dumps``). A performance strategy, with :func:`normalize_value`'s plain
    types and one parse of the event's times and table name per event. Saves, all four: CPU
    per JSON line read into a changelog tuple (``bench/extract.py --source datastream``,
    docs/performance.md)."""
    key = tuple(types.items())
    shared = _SHARED_TYPES.get(key)
    if shared is None:
        if len(_SHARED_TYPES) >= 4096:
            _SHARED_TYPES.clear()
        shared = _SHARED_TYPES.setdefault(key, types)
    return shared


def _millis(value: datetime) -> int:
    return int(round(value.timestamp() * 1000))


def json_line_event(line: str) -> dict:
    """The event of one JSON line, numbers with a fraction read as exact decimals.

    Spark's JSON reader turns ``20.00`` into the double ``20.0`` (and 30-digit decimals into
    rounded doubles) before any code sees it, so lines are parsed here, where the literal's
    digits and scale survive (:func:`.types.json_value_type`).
    """
    try:
        event = json.loads(line, parse_float=Decimal)
    except ValueError:
        raise MalformedEventError("line is not a JSON object") from None
    except RecursionError:
        raise MalformedEventError(
            "line nests arrays or objects deeper than the JSON parser reads") from None
    if not isinstance(event, dict):
        raise MalformedEventError(f"line is not a JSON object but a {type(event).__name__}")
    if lone_surrogate_in(line, event):
        raise MalformedEventError(_LONE_SURROGATE)
    return event
