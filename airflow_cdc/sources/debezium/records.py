"""One line of a Kafka Connect sink file -> a Debezium event -> a change row (or a truncate).

A line is one Kafka record value as Kafka Connect's JSON converter wrote it: with
``schemas.enable`` the object ``{"schema": ..., "payload": ...}``, without it the payload
alone, and ``null`` for a tombstone (the null value Debezium sends after a delete, so Kafka
compaction can drop the key). :func:`parse_line` recognises every line a Debezium topic holds:

* a **change event** (:class:`ChangeEvent`): ``op`` c (create), u (update), d (delete),
  r (read: a snapshot row), t (truncate), with ``before``, ``after``, ``source``, ``ts_ms``
  and, with ``provide.transaction.metadata``, the ``transaction`` block (``id``,
  ``total_order``, ``data_collection_order``);
* a **logical decoding message** (op m, PostgreSQL ``pg_logical_emit_message``):
  :class:`LogicalMessage`, which the source counts and ignores;
* a **tombstone** (:class:`Tombstone`): counted and skipped; the delete before it carries
  the change;
* a **transaction** boundary (topic ``<prefix>.transaction``): :class:`TransactionEvent`,
  ``status`` BEGIN or END, ``id``, ``ts_ms``, and on END ``event_count`` and
  ``data_collections`` (``data_collection``, ``event_count`` per table), which a window's
  transactions are checked complete against;
* a **heartbeat** (topic ``__debezium-heartbeat.<prefix>``): :class:`Heartbeat`, the value
  ``{"ts_ms": <milliseconds>}`` (schema ``io.debezium.connector.common.Heartbeat``): the
  connector's wall clock when it sent the beat, the source's progress evidence;
* a **schema change** (MySQL and MariaDB, topic ``<prefix>``, on unless
  ``include.schema.changes=false``): :class:`SchemaChange`, the DDL the connector read from
  the binlog (``databaseName``, ``ddl``, ``tableChanges``). Counted, never applied: a
  target's columns follow the schemas of its change events.

Anything else (not JSON, an unknown op, a change without its source or row) raises
:class:`MalformedEventError` naming what is wrong: the source dead-letters the line with that
reason, it never drops one silently.

:func:`change_of` maps a change event to one :class:`~airflow_cdc.model.ChangeRow`:

* ``source_table``: ``<schema>.<table>`` for PostgreSQL, ``<db>.<table>`` for MySQL/MariaDB.
* ``op``: c -> INSERT, u -> UPDATE, d -> DELETE, r -> READ. A **truncate** (op t, PostgreSQL
  with ``skipped.operations`` not containing ``t``) is no row change and
  :class:`~airflow_cdc.model.Op` has no TRUNCATE: it becomes a :class:`Truncate` value (the
  table, its ordering key, commit time and event id), which apply acts on by emptying the
  target of every change ordered before it.
* ``keys``: the table's key columns, taken from the pipeline's ``key_columns`` (table ->
  columns). The Kafka message key (which holds the primary key) is not in the sink's value
  files, and the value schema does not mark key columns, so a table without an entry is
  refused with :class:`KeylessTableError` ("events for tables without a key"): dead letters.
* ``new_values`` (c, r, u: ``after``) and ``old_values`` (d: ``before``; u: ``before`` when
  the table has ``REPLICA IDENTITY FULL``), converted by :mod:`.types`, and ``column_types``.
* ``image``: FULL, except for an update whose ``after`` holds PostgreSQL's **unchanged-TOAST
  placeholder** (``unavailable.value.placeholder``, default ``__debezium_unavailable_value``):
  that column did not change and its value is not in the event, so it is left out of
  ``new_values`` (it keeps its previous value in the target, never that text) and the image
  is PARTIAL. Debezium writes the placeholder as the text itself for text columns, its UTF-8
  bytes (base64 in JSON) for ``bytea``, ``{"<placeholder>": "<placeholder>"}`` for hstore and
  json, the placeholder's bytes as numbers for integer arrays, and as an element of other
  arrays (:func:`is_unavailable`). In a delete's ``before`` such columns are left out too.
* ``ordering_key``: from the source position (:mod:`.ordering`), never ``ts_ms``.
* ``commit_ts``: ``source.ts_us`` (Debezium 2.6+) or ``source.ts_ms``: the commit time (for
  snapshot rows, when the snapshot read them). It only partitions the changelog and dates
  tombstones; it never orders.
* ``event_id``: ``<connector name>/<source table>/<op>/<position>/<key JSON>``; every part comes
  from the event, none from Kafka, so a change a restarted connector delivers again (with a
  new offset) has the same id and lands once.
* ``transaction_id``: the ``transaction`` block's id, else PostgreSQL's ``txId`` or MySQL's
  ``gtid``.

A primary-key change is, in Debezium's PostgreSQL and MySQL connectors, a delete of the old
key (followed by its tombstone) and a create of the new key, at the same source position:
two changes of two different keys, mapped like any other (:mod:`.ordering` ranks the delete
first at an equal position).
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from airflow_cdc.model import ChangeRow, Image, Op, value_text
from airflow_cdc.sources.base import lone_surrogate_in
from airflow_cdc.sources.debezium.errors import KeylessTableError, MalformedEventError
from airflow_cdc.sources.debezium.ordering import (
    POSTGRESQL,
    SourcePosition,
    connector_of,
    ordering_key,
    source_position,
)
from airflow_cdc.sources.debezium.types import ColumnConversion, declared_conversion, row_conversions

UTC = timezone.utc
DEFAULT_PLACEHOLDER = "__debezium_unavailable_value"
HEARTBEAT_TOPIC_PREFIX = "__debezium-heartbeat"
TRANSACTION_TOPIC_SUFFIX = ".transaction"
CHANGE_OPS = {"c": Op.INSERT, "u": Op.UPDATE, "d": Op.DELETE, "r": Op.READ}
ALL_OPS = ("c", "u", "d", "r", "t", "m")
SNAPSHOT_MARKERS = (
    "true", "first", "first_in_data_collection", "last_in_data_collection", "last", "incremental",
)
# Source block fields kept in the change row's metadata, when present.
SOURCE_FIELDS = (
    "version", "connector", "name", "db", "schema", "table", "snapshot", "ts_ms", "ts_us",
    "ts_ns", "sequence", "lsn", "txId", "xmin", "file", "pos", "row", "gtid", "server_id",
    "thread",
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# --- parsed lines ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tombstone:
    """The line ``null``: a Kafka tombstone after a delete. Counted and skipped."""


@dataclass(frozen=True)
class TransactionBlock:
    """A change event's ``transaction`` block (``provide.transaction.metadata``)."""

    id: str
    total_order: int | None = None
    data_collection_order: int | None = None


@dataclass(frozen=True)
class ChangeEvent:
    """A Debezium data change event (op c, u, d, r or t).

    ``row_schema`` is the Connect struct schema of ``before``/``after`` when the line had a
    schema part (``schemas.enable``), else None.
    """

    op: str
    before: dict | None
    after: dict | None
    source: dict
    ts_ms: int | None
    transaction: TransactionBlock | None = None
    row_schema: dict | None = None

    @property
    def connector(self) -> str:
        return connector_of(self.source)

    @property
    def source_table(self) -> str:
        """``<schema>.<table>`` (PostgreSQL) or ``<db>.<table>`` (MySQL, MariaDB)."""
        return source_table_of(self.source)

    @property
    def snapshot(self) -> str | None:
        """The snapshot marker (``true``, ``first``, ``last``, ``incremental`` ...), None when
        the event was streamed."""
        return snapshot_marker(self.source.get("snapshot"))


@dataclass(frozen=True)
class LogicalMessage:
    """An op m event (``pg_logical_emit_message``): no row change; counted and ignored."""

    source: dict
    prefix: str | None
    ts_ms: int | None


@dataclass(frozen=True)
class TransactionEvent:
    """A BEGIN or END event of the transaction topic.

    ``data_collections`` (END only) are (``data_collection``, ``event_count``) pairs: how many
    change events the transaction produced per table (``schema.table`` / ``db.table``).
    """

    status: str
    id: str
    ts_ms: int | None = None
    event_count: int | None = None
    data_collections: tuple[tuple[str, int], ...] = ()

    @property
    def table_counts(self) -> dict[str, int]:
        return dict(self.data_collections)


@dataclass(frozen=True)
class Heartbeat:
    """A heartbeat: the connector's wall clock (``ts_ms``) when it sent the beat."""

    ts_ms: int

    @property
    def at(self) -> datetime:
        return _EPOCH + timedelta(milliseconds=self.ts_ms)


@dataclass(frozen=True)
class SchemaChange:
    """A MySQL/MariaDB schema change event: ``database`` and the ``ddl`` statement."""

    database: str | None
    ddl: str


Event = ChangeEvent | LogicalMessage | Tombstone | TransactionEvent | Heartbeat | SchemaChange


@dataclass(frozen=True)
class Truncate:
    """A truncate (op t) of ``source_table`` at ``ordering_key``: apply empties the target of
    every change ordered before it. Not a :class:`ChangeRow`: it has no key and no values."""

    stream: str
    window_id: str
    source_table: str
    ordering_key: bytes
    commit_ts: datetime
    event_id: str
    transaction_id: str | None = None
    partition_id: str | None = None
    source_metadata: dict = field(default_factory=dict)

    def change_row(self) -> ChangeRow:
        """The changelog row of the truncate: op TRUNCATE, no keys, no values."""
        return ChangeRow(
            stream=self.stream, window_id=self.window_id, source_table=self.source_table,
            op=Op.TRUNCATE, image=Image.FULL, keys={}, new_values=None, old_values=None,
            column_types={}, commit_ts=self.commit_ts, ordering_key=self.ordering_key,
            transaction_id=self.transaction_id, event_id=self.event_id,
            partition_id=self.partition_id, source_metadata=self.source_metadata,
        )


# --- parsing -----------------------------------------------------------------------------------
def parse_line(line: str | bytes, topic: str | None = None) -> Event:
    """The Debezium event of one sink-file line (module docstring), told apart by the value's
    shape; ``topic`` (from the file's name) names it in errors.

    Raises :class:`MalformedEventError` for anything that is none of them.
    """
    decoded = decode_value(line)
    if decoded is None:
        return Tombstone()
    schema, value = decoded
    kind = _kind(value, topic)
    if kind == "transaction":
        return _transaction_event(value)
    if kind == "heartbeat":
        return _heartbeat(value)
    if kind == "schema_change":
        return _schema_change(value)
    return _change_event(value, schema)


def decode_value(line: str | bytes) -> tuple[object, dict] | None:
    """(schema part or None, payload object) of one sink-file line; None for a tombstone.

    Raises :class:`MalformedEventError` for a line that is not one JSON object (or ``null``).
    """
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedEventError("line is not UTF-8 text: the JSON converter writes UTF-8") from None
    text = line.strip()
    if text == "null":
        return None
    if not text:
        raise MalformedEventError("line is empty: a sink file holds one JSON value per line")
    try:
        value = json.loads(text, parse_float=Decimal)
    except ValueError as exc:
        raise MalformedEventError(f"line is not JSON ({exc.args[0] if exc.args else exc})") from None
    except RecursionError:
        raise MalformedEventError("line nests arrays or objects deeper than the JSON parser reads") from None
    if not isinstance(value, dict):
        raise MalformedEventError(f"line is a JSON {type(value).__name__}, not an object or null")
    if lone_surrogate_in(text, value):
        raise MalformedEventError(
            "line holds a lone surrogate (a \\udXXX escape without its pair): no UTF-8 text can "
            "hold it, and the changelog would keep U+FFFD in its place")
    schema = None
    if set(value) == {"schema", "payload"}:  # schemas.enable=true
        schema, value = value["schema"], value["payload"]
        if value is None:
            return None
        if not isinstance(value, dict):
            raise MalformedEventError(f"payload is a JSON {type(value).__name__}, not an object")
    return schema, value


def _kind(value: dict, topic: str | None) -> str:
    # The shapes never overlap, so they decide; a topic name could mislead (a table named
    # "transaction" has the topic <prefix>.<schema>.transaction).
    if "op" in value:
        return "change"
    if value.get("status") in ("BEGIN", "END"):
        return "transaction"
    if "ts_ms" in value and (set(value) == {"ts_ms"} or _heartbeat_topic(topic)):
        return "heartbeat"
    if {"ddl", "tableChanges"} <= set(value):
        return "schema_change"
    where = f" of topic {topic!r}" if topic else ""
    if {"id", "type", "aggregate_type"} <= set(value):
        raise MalformedEventError(
            f"line{where} is a Debezium notification ({value.get('aggregate_type')!r} "
            f"{value.get('type')!r}), not a change: name its topic in the stream's "
            f"notification_topic (the connector's notification.sink.topic.name)"
        )
    raise MalformedEventError(
        f"line{where} has no op, no transaction status and is no heartbeat (fields "
        f"{sorted(value)}): not a Debezium change, transaction or heartbeat event"
    )


def _heartbeat_topic(topic: str | None) -> bool:
    return bool(topic) and topic.startswith(HEARTBEAT_TOPIC_PREFIX + ".")


def _change_event(value: dict, schema: object) -> ChangeEvent | LogicalMessage:
    op = value.get("op")
    if op not in ALL_OPS:
        raise MalformedEventError(
            f"op {op!r} is not a Debezium operation (c, u, d, r, t, m)"
            if "op" in value
            else f"change event has no op (fields {sorted(value)})"
        )
    source = value.get("source")
    if not isinstance(source, dict):
        raise MalformedEventError(f"{op} event has no source block")
    ts_ms = _optional_int("ts_ms", value.get("ts_ms"))
    if op == "m":
        message = value.get("message") if isinstance(value.get("message"), dict) else {}
        return LogicalMessage(source=source, prefix=message.get("prefix"), ts_ms=ts_ms)
    connector_of(source)
    if not source.get("table"):
        raise MalformedEventError(f"{op} event has no source.table: the connector names the table there")
    before, after = value.get("before"), value.get("after")
    for name, row in (("before", before), ("after", after)):
        if row is not None and not isinstance(row, dict):
            raise MalformedEventError(f"{op} event's {name} is a JSON {type(row).__name__}, not an object")
    if op in ("c", "r", "u") and after is None:
        raise MalformedEventError(f"{op} event of {source_table_of(source)!r} has no after row")
    if op == "d" and before is None:
        raise MalformedEventError(f"delete event of {source_table_of(source)!r} has no before row")
    return ChangeEvent(
        op=op,
        before=before,
        after=after,
        source=source,
        ts_ms=ts_ms,
        transaction=_transaction_block(value.get("transaction")),
        row_schema=_row_schema(schema),
    )


def _row_schema(schema: object) -> dict | None:
    """The struct schema of ``after`` (or ``before``) in an envelope schema, None without one."""
    if schema is None:
        return None
    fields = schema.get("fields") if isinstance(schema, dict) else None
    if not isinstance(fields, list):
        raise MalformedEventError("schema part is not an envelope struct with fields")
    by_name = {f.get("field"): f for f in fields if isinstance(f, dict) and isinstance(f.get("field"), str)}
    for name in ("after", "before"):
        if isinstance(by_name.get(name), dict) and by_name[name].get("type") == "struct":
            return by_name[name]
    return None  # a truncate's envelope still has them; a message's has none


def _transaction_block(block: object) -> TransactionBlock | None:
    if block is None:
        return None
    if not isinstance(block, dict) or block.get("id") in (None, ""):
        raise MalformedEventError(f"transaction block {block!r} has no id")
    return TransactionBlock(
        id=str(block["id"]),
        total_order=_optional_int("transaction.total_order", block.get("total_order")),
        data_collection_order=_optional_int(
            "transaction.data_collection_order", block.get("data_collection_order")
        ),
    )


def _transaction_event(value: dict) -> TransactionEvent:
    status, tx_id = value.get("status"), value.get("id")
    if status not in ("BEGIN", "END") or tx_id in (None, ""):
        raise MalformedEventError(
            f"transaction event needs status BEGIN or END and an id, got status {status!r}, id {tx_id!r}"
        )
    collections = []
    if status == "END":
        raw = value.get("data_collections")
        if not isinstance(raw, list):
            raise MalformedEventError(f"END event of transaction {tx_id!r} has no data_collections list")
        for item in raw:
            if not isinstance(item, dict) or not item.get("data_collection"):
                raise MalformedEventError(
                    f"END event of transaction {tx_id!r}: data_collections entry {item!r} has "
                    f"no data_collection"
                )
            count = _optional_int("data_collections.event_count", item.get("event_count"))
            collections.append((str(item["data_collection"]), count or 0))
    return TransactionEvent(
        status=status,
        id=str(tx_id),
        ts_ms=_optional_int("ts_ms", value.get("ts_ms")),
        event_count=_optional_int("event_count", value.get("event_count")),
        data_collections=tuple(collections),
    )


def _heartbeat(value: dict) -> Heartbeat:
    ts_ms = _optional_int("heartbeat ts_ms", value.get("ts_ms"))
    if ts_ms is None:
        raise MalformedEventError(f"heartbeat has no ts_ms (fields {sorted(value)})")
    _instant("heartbeat ts_ms", ts_ms, 1_000)
    return Heartbeat(ts_ms)


def _schema_change(value: dict) -> SchemaChange:
    ddl, database = value.get("ddl"), value.get("databaseName")
    if not isinstance(ddl, str) or not (database is None or isinstance(database, str)):
        raise MalformedEventError(
            f"schema change event has ddl {ddl!r} and databaseName {database!r}: the MySQL and "
            f"MariaDB connectors write the statement and the database as text"
        )
    return SchemaChange(database, ddl)


def _instant(name: str, ticks: int, per_second: int) -> datetime:
    """``ticks`` (``per_second`` of them a second) since the epoch as an instant; refused
    naming ``name`` when no timestamp of the years 1 to 9999 is that far from the epoch."""
    try:
        return _EPOCH + timedelta(microseconds=ticks * (1_000_000 // per_second))
    except OverflowError:
        raise MalformedEventError(
            f"{name} {ticks!r} is not an instant in the years 1 to 9999") from None


def _optional_int(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedEventError(f"{name} {value!r} is not an integer")
    return value


# --- helpers the source shares -----------------------------------------------------------------
def source_table_of(source: Mapping) -> str:
    """``<schema>.<table>`` (PostgreSQL) or ``<db>.<table>`` (MySQL, MariaDB) of a source block."""
    table = source.get("table")
    container = source.get("schema") if source.get("connector") == POSTGRESQL else source.get("db")
    if not table or not container:
        raise MalformedEventError(
            f"source block names no table (schema/db {container!r}, table {table!r})"
        )
    return f"{container}.{table}"


def snapshot_marker(value: object) -> str | None:
    """``source.snapshot`` as its marker text, None for a streamed event (``false``/absent)."""
    if value is None or value is False:
        return None
    if value is True:
        return "true"
    text = str(value).lower()
    return text if text in SNAPSHOT_MARKERS else None


def is_unavailable(value: object, placeholder: str = DEFAULT_PLACEHOLDER) -> bool:
    """Whether ``value`` is Debezium's unavailable-value placeholder in any of its forms:
    the text, its UTF-8 bytes in base64, ``{placeholder: placeholder}`` (as an object or JSON
    text), an integer array of its bytes, or an array holding one of these."""
    texts, raw = _placeholder_forms(placeholder)
    if isinstance(value, str):
        return value in texts
    if isinstance(value, dict):
        return len(value) == 1 and value.get(placeholder) == placeholder
    if isinstance(value, list) and value:
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return len(value) == len(raw) and tuple(v & 0xFF for v in value) == raw
        return any(is_unavailable(v, placeholder) for v in value if v is not None)
    return False


@functools.lru_cache(maxsize=8)
def _placeholder_forms(placeholder: str) -> tuple[frozenset[str], tuple[int, ...]]:
    raw = placeholder.encode("utf-8")
    texts = frozenset((
        placeholder,
        base64.b64encode(raw).decode("ascii"),
        json.dumps({placeholder: placeholder}, separators=(",", ":")),
        json.dumps({placeholder: placeholder}),
    ))
    return texts, tuple(raw)


# --- change rows -------------------------------------------------------------------------------
def change_of(
    event: ChangeEvent,
    *,
    stream: str,
    window_id: str,
    key_columns: Mapping[str, Sequence[str]],
    partition_id: str | None = None,
    column_types: Mapping[str, Mapping[str, str]] | None = None,
    placeholder: str = DEFAULT_PLACEHOLDER,
) -> ChangeRow | Truncate:
    """The change row (or :class:`Truncate`) of ``event`` (module docstring).

    ``key_columns`` maps source tables (``public.orders``) to their key columns;
    ``column_types`` declares types for lines without schemas (:mod:`.types`);
    ``placeholder`` is the connector's ``unavailable.value.placeholder``. Raises
    :class:`KeylessTableError` for a table without key columns and
    :class:`MalformedEventError` for anything else that cannot be mapped.
    """
    table = event.source_table
    position = source_position(event.source)
    key_order = ordering_key(position, event.op)
    commit_ts = _commit_ts(event)
    metadata = _metadata(event, position)
    transaction_id = _transaction_id(event)
    if event.op == "t":  # table-level: no key needed
        return Truncate(
            stream=stream,
            window_id=window_id,
            source_table=table,
            ordering_key=key_order,
            commit_ts=commit_ts,
            event_id=f"{_connector_name(event)}/{table}/t/{position.text}",
            transaction_id=transaction_id,
            partition_id=partition_id,
            source_metadata=metadata,
        )
    names = _key_names(table, key_columns)
    conversions = _conversions(event, table, column_types)
    op = CHANGE_OPS[event.op]
    image_row = event.before if event.op == "d" else event.after
    assert image_row is not None  # parse_line checked it
    values, unchanged = _converted(image_row, conversions, placeholder, table)
    if unchanged and event.op in ("c", "r"):
        raise MalformedEventError(
            f"{event.op} event of {table!r} holds the unavailable-value placeholder in "
            f"{unchanged}: only updates and deletes can leave a column out"
        )
    keys = _keys(event, table, names, values, unchanged, image_row)
    old_values = None
    if event.op == "d":
        new_values, old_values = None, values
    else:
        new_values = values
        if event.op == "u" and event.before is not None:
            old_values = _converted(event.before, conversions, placeholder, table)[0]
    if unchanged:
        metadata["unchanged_columns"] = sorted(unchanged)
    present = set(values) | set(old_values or ())
    return ChangeRow(
        stream=stream,
        window_id=window_id,
        source_table=table,
        op=op,
        image=Image.PARTIAL if unchanged and event.op == "u" else Image.FULL,
        keys=keys,
        new_values=new_values,
        old_values=old_values,
        column_types={name: conversions(name).canonical for name in sorted(present)},
        commit_ts=commit_ts,
        ordering_key=key_order,
        transaction_id=transaction_id,
        event_id=event_id(event, position, keys),
        partition_id=partition_id,
        source_metadata=metadata,
    )


def _key_names(table: str, key_columns: Mapping[str, Sequence[str]]) -> list[str]:
    """The key columns declared for ``table``; a table without any is refused."""
    names = list(key_columns.get(table) or ())
    if not names:
        known = ", ".join(sorted(key_columns)) or "none"
        raise KeylessTableError(
            f"events for tables without a key: table {table!r} has no key columns (tables with "
            f"keys: {known}); declare them in key_columns ({{{table!r}: [...]}}), or give the "
            f"table a primary key and declare it"
        )
    return names


def _keys(event: ChangeEvent, table: str, names: list[str], values: Mapping, unchanged,
          image_row: Mapping) -> dict:
    """The row's key values; a key column left out, unavailable or null is refused."""
    keys = {}
    for name in names:
        if name in unchanged or values.get(name) is None:
            raise MalformedEventError(
                f"{event.op} event of {table!r} lacks key column {name!r} (or it is null); its "
                f"columns are {sorted(image_row)}: fix key_columns for this table"
            )
        keys[name] = values[name]
    return keys


def event_id(event: ChangeEvent, position: SourcePosition, keys: Mapping[str, object]) -> str:
    """``<connector name>/<source table>/<op>/<position>/<key JSON>``: the same for every
    delivery of one change (no Kafka offset in it)."""
    key_text = json.dumps({k: value_text(v) for k, v in keys.items()}, sort_keys=True, separators=(",", ":"))
    return f"{_connector_name(event)}/{event.source_table}/{event.op}/{position.text}/{key_text}"


def _connector_name(event: ChangeEvent) -> str:
    """The connector's logical name (``topic.prefix``), else its kind."""
    return str(event.source.get("name") or event.connector)


class _Conversions:
    """Column -> conversion, from the row schema, or from declarations (STRING otherwise)."""

    def __init__(
        self, by_schema: dict[str, ColumnConversion] | None, declared: Mapping[str, str], table: str
    ):
        self.by_schema, self.declared, self.table = by_schema, declared, table
        self.cache: dict[str, ColumnConversion] = {}

    def __call__(self, column: str) -> ColumnConversion:
        if self.by_schema is not None:
            try:
                return self.by_schema[column]
            except KeyError:
                raise MalformedEventError(
                    f"column {column!r} of {self.table!r} is not in the event's schema part"
                ) from None
        if column not in self.cache:
            self.cache[column] = declared_conversion(column, self.declared.get(column))
        return self.cache[column]


def _conversions(event: ChangeEvent, table: str, column_types: Mapping | None) -> _Conversions:
    if event.row_schema is not None:
        try:
            return _Conversions(row_conversions(event.row_schema), {}, table)
        except MalformedEventError as exc:
            raise type(exc)(f"table {table!r}: {exc}") from None
    return _Conversions(None, dict((column_types or {}).get(table) or {}), table)


def _converted(
    row: Mapping, conversions: _Conversions, placeholder: str, table: str
) -> tuple[dict, list[str]]:
    values, unchanged = {}, []
    for column, raw in row.items():
        if raw is not None and is_unavailable(raw, placeholder):
            unchanged.append(column)
            continue
        try:
            values[column] = conversions(column).value(raw)
        except MalformedEventError as exc:
            raise type(exc)(f"table {table!r}: {exc}") from None
    return values, unchanged


def _commit_ts(event: ChangeEvent) -> datetime:
    source = event.source
    for name, per_second in (("ts_us", 1_000_000), ("ts_ms", 1_000)):
        ticks = source.get(name)
        if isinstance(ticks, int) and not isinstance(ticks, bool):
            return _instant(f"source.{name} of the {event.op} event of {event.source_table!r}",
                            ticks, per_second)
    if event.ts_ms is not None:
        return _instant(f"ts_ms of the {event.op} event of {event.source_table!r}", event.ts_ms, 1_000)
    raise MalformedEventError(f"{event.op} event of {event.source_table!r} has no source.ts_ms nor ts_ms")


_POSTGRESQL_TRANSACTION = re.compile(r"^(\d+):\d+$")


def transaction_key(transaction_id: str) -> str:
    """The part of a transaction metadata id that names the transaction.

    Debezium's PostgreSQL connector writes ids ``<txId>:<LSN>`` whose LSN differs between the
    BEGIN event, the change events and the END event of one transaction (each carries the
    LSN it was emitted at), so the ``txId`` names it; other connectors' ids (MySQL's GTID
    ``<server uuid>:<n>``) are the same on all of them and are kept whole.
    """
    found = _POSTGRESQL_TRANSACTION.match(transaction_id)
    return found.group(1) if found else transaction_id


def _transaction_id(event: ChangeEvent) -> str | None:
    if event.transaction is not None:
        return transaction_key(event.transaction.id)
    if event.connector == POSTGRESQL:
        tx = event.source.get("txId")
        return None if tx is None else str(tx)
    gtid = event.source.get("gtid")
    return None if gtid in (None, "") else str(gtid)


def _metadata(event: ChangeEvent, position: SourcePosition) -> dict:
    metadata = {name: event.source[name] for name in SOURCE_FIELDS if event.source.get(name) is not None}
    metadata["snapshot"] = event.snapshot
    metadata["position"] = position.text
    if event.ts_ms is not None:
        metadata["event_ts_ms"] = event.ts_ms
    if event.transaction is not None:
        metadata["transaction"] = {
            "id": event.transaction.id,
            "total_order": event.transaction.total_order,
            "data_collection_order": event.transaction.data_collection_order,
        }
    return {k: v for k, v in metadata.items() if v is not None}
