"""Watermarks through the database's own log: where a parallel snapshot's chunks sit in the
order of a key's Debezium changes.

A chunk read over JDBC (:mod:`airflow_cdc.sources.snapshot`) sees each row as it was at some
moment of the read, and that moment is nowhere in the log. So, as DBLog and Flink CDC do, the
snapshot writes a **low watermark** into the log before it reads a batch of chunks and a
**high watermark** after, and waits until the capture has delivered both into the sink:

* every row the batch read takes the **low** watermark's position (as a READ, it sorts before
  any change at that position: :func:`.ordering.ordering_key`): every change before the low
  watermark is older and loses, every change after it is newer and is applied on top. A key
  with no change between the watermarks held one value for the whole read, the value read;
* a key **with** changes between them was read before, between or after them, so its READ row
  holds each column's value at some moment after the low watermark. The changes replay on
  top: a full image replaces the row, a partial image (Debezium's unavailable-value
  placeholder for an unchanged TOASTed column) sets only the columns it carries, and a
  column none of them carries did not change after the low watermark, so the READ row's
  value is right. Dropping such keys' READ rows (DBLog's rule) would leave a key whose
  changes are all partial images with no base row. A delete between the watermarks is newer
  than the READ row and removes the key (I3).

The keys changed between the watermarks are still found (:func:`scan_batch`) and counted in
the batch's marker: how much of a batch the stream changed while it was read.

The watermarks are transactional logical decoding messages on PostgreSQL
(``pg_logical_emit_message(true, 'airflow-cdc.snapshot', '<snapshot>/<batch>/<low|high>')``):
they need no table, pass through the replication slot in commit order with the stream's
changes, and reach the sink as op ``m`` events on ``<topic.prefix>.message`` carrying their
log position. Where the database has no such messages (MySQL, MariaDB), a watermark is a row
inserted into a table the connector captures (``watermark_table``: columns ``id`` (primary
key), ``snapshot_id``, ``batch``, ``kind``); its change event carries the position.

Why not PostgreSQL's exported snapshot (every chunk reader on one ``SET TRANSACTION
SNAPSHOT``)? It makes all chunks consistent with each other, but at a point the stream's
positions cannot name: a snapshot sees the transactions that committed before it, while
Debezium's positions order transactions by the commit LSN of the one before; placing the READ
rows exactly between the transactions they saw and the ones they did not would need the
slot's decoding itself. The watermarks put the snapshot into the stream's own order instead,
and work the same on every database with a log the connector reads.

Only the standard library and this package (no Spark, no Airflow): the snapshot job's driver
calls it with the sink's lister and reader.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from airflow_cdc.model import CdcError, value_text
from airflow_cdc.sources.debezium.records import ChangeEvent, LogicalMessage, change_of, parse_line
from airflow_cdc.sources.debezium.errors import MalformedEventError
from airflow_cdc.sources.debezium.layout import SinkFile, SinkListing, read_sink_file
from airflow_cdc.sources.debezium.ordering import SourcePosition, source_position

MESSAGE_PREFIX = "airflow-cdc.snapshot"
LOW, HIGH = "low", "high"


class WatermarkError(CdcError, RuntimeError):
    """A watermark did not reach the sink, or the two of a batch are out of order."""


@dataclass(frozen=True)
class Watermark:
    """One watermark of batch ``batch`` of snapshot ``snapshot_id``: ``kind`` low or high."""

    snapshot_id: str
    batch: int
    kind: str

    @property
    def text(self) -> str:
        return f"{self.snapshot_id}/{self.batch}/{self.kind}"

    @classmethod
    def parse(cls, text: str) -> Watermark | None:
        parts = text.rsplit("/", 2)
        if len(parts) != 3 or parts[2] not in (LOW, HIGH) or not parts[1].isdigit():
            return None
        return cls(parts[0], int(parts[1]), parts[2])


def postgresql_emit(watermark: Watermark) -> tuple[str, tuple]:
    """(SQL, parameters) writing ``watermark`` into PostgreSQL's WAL as a transactional
    logical decoding message (run it in autocommit, or commit right after)."""
    return ("SELECT pg_logical_emit_message(true, %s, %s)", (MESSAGE_PREFIX, watermark.text))


def table_emit(watermark: Watermark, table: str, quote: str = "`",
               paramstyle: str = "%s") -> tuple[str, tuple]:
    """(SQL, parameters) inserting ``watermark`` as a row of ``table`` (``schema.table`` of
    plain identifiers, quoted with ``quote``): for databases without logical messages."""
    from airflow_cdc.model import validate_identifier

    parts = table.split(".")
    if len(parts) not in (1, 2):
        raise ValueError(f"watermark table {table!r} is not [schema.]table: name it that way")
    quoted = ".".join(f"{quote}{validate_identifier('watermark table', p)}{quote}" for p in parts)
    marks = ", ".join([paramstyle] * 4)
    return (f"INSERT INTO {quoted} (id, snapshot_id, batch, kind) VALUES ({marks})",
            (watermark.text, watermark.snapshot_id, watermark.batch, watermark.kind))


def watermark_of(event: object, watermark_table: str | None = None) -> Watermark | None:
    """The watermark an event is, or None: a logical message with :data:`MESSAGE_PREFIX`, or
    an insert into ``watermark_table``."""
    if isinstance(event, LogicalMessage):
        if event.prefix != MESSAGE_PREFIX:
            return None
        content = ((event.source or {}).get("__message_content"))
        return Watermark.parse(content) if isinstance(content, str) else None
    if (watermark_table and isinstance(event, ChangeEvent) and event.op in ("c", "r")
            and event.source_table == watermark_table and isinstance(event.after, dict)):
        return Watermark.parse(str(event.after.get("id") or ""))
    return None


def message_content(line_value: Mapping) -> str | None:
    """The decoded ``message.content`` (base64 bytes in the JSON converter) of an op m value."""
    message = line_value.get("message") if isinstance(line_value, Mapping) else None
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, str):
        return None
    try:
        return base64.b64decode(content, validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return content  # a converter that writes bytes as text


@dataclass
class BatchScan:
    """What the log says about one batch: its watermarks' positions and the keys of
    ``table`` changed between them (each as its canonical key text, :func:`key_text`)."""

    low: SourcePosition | None = None
    high: SourcePosition | None = None
    high_source: dict | None = None  # the high watermark's source block (name, ts_ms)
    changed_keys: set[str] = field(default_factory=set)
    events_between: int = 0

    @property
    def complete(self) -> bool:
        return self.low is not None and self.high is not None


def key_text(keys: Mapping[str, object]) -> str:
    """A key as canonical text: JSON of its columns' changelog texts, sorted by column, not
    ASCII-escaped (the text Spark's ``to_json`` writes of the same map)."""
    import json

    return json.dumps({name: value_text(keys[name]) for name in sorted(keys)},
                      sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def scan_batch(
    lines: Iterable[tuple[str, str]],
    watermark: Watermark,
    table: str,
    key_columns: Sequence[str],
    *,
    column_types: Mapping[str, Mapping[str, str]] | None = None,
    watermark_table: str | None = None,
) -> BatchScan:
    """Scan (topic, line) pairs of the sink for the low and high watermark of ``watermark``'s
    batch and the keys of ``table`` (``public.orders``) changed strictly between them.

    Lines may come in any order (files of several topics): positions decide. A line that is
    not an event of interest (another table, a heartbeat, a malformed line) is passed over;
    the stream's own windows read and dead-letter what is malformed.
    """
    scan = BatchScan()
    candidates: list[tuple[tuple, list[str]]] = []
    for topic, line in lines:
        try:
            event = _parse_with_content(line, topic)
        except MalformedEventError:
            continue
        mark = watermark_of(event, watermark_table)
        if mark is not None:
            if (mark.snapshot_id, mark.batch) == (watermark.snapshot_id, watermark.batch):
                position = source_position(event.source)
                if mark.kind == LOW:
                    scan.low = position
                else:
                    scan.high = position
                    scan.high_source = {k: v for k, v in event.source.items()
                                        if not k.startswith("__")}
            continue
        if isinstance(event, ChangeEvent) and event.source_table == table and event.op != "t":
            keys = _keys_of(event, table, key_columns, column_types)
            if keys:
                candidates.append((_comparable(source_position(event.source)), keys))
    if not scan.complete:
        return scan
    low, high = _comparable(scan.low), _comparable(scan.high)
    if not low < high:
        raise WatermarkError(
            f"snapshot {watermark.snapshot_id} batch {watermark.batch}: the high watermark at "
            f"{scan.high.text} is not after the low one at {scan.low.text} in the log")
    for position, keys in candidates:
        if low < position < high:
            scan.events_between += 1
            scan.changed_keys.update(keys)
    return scan


def sink_lines(listing: SinkListing, reader, topics: Iterable[str],
               skip: set[str] = frozenset()) -> Iterable[tuple[str, str]]:
    """(topic, line) of the listed files of ``topics``, except the paths in ``skip`` (files
    that existed before the low watermark was written hold nothing after it)."""
    wanted = set(topics)
    for sink_file in listing.files:
        if sink_file.topic in wanted and sink_file.path not in skip:
            for _, line in read_sink_file(reader, sink_file):
                yield sink_file.topic, line


def listed_paths(listing: SinkListing) -> set[str]:
    return {f.path for f in listing.files}


def _parse_with_content(line: str, topic: str):
    """:func:`.records.parse_line`, keeping a logical message's decoded content (in the
    source mapping under a private name, as the envelope's message type has no place for
    it)."""
    event = parse_line(line, topic)
    if isinstance(event, LogicalMessage) and event.prefix == MESSAGE_PREFIX:
        import json

        value = json.loads(line)
        if set(value) == {"schema", "payload"}:
            value = value["payload"]
        content = message_content(value)
        return LogicalMessage(source={**event.source, "__message_content": content},
                              prefix=event.prefix, ts_ms=event.ts_ms)
    return event


def _keys_of(event: ChangeEvent, table: str, key_columns: Sequence[str],
             column_types) -> list[str]:
    """The canonical key texts an event touches: its before and after keys (a key-changing
    update touches two)."""
    texts = []
    # As a delete of the before image and an update to the after image: an update may leave
    # unchanged TOASTed columns out, and only the key columns matter here.
    for op, image in (("d", event.before), ("u", event.after)):
        if not isinstance(image, dict):
            continue
        probe = ChangeEvent(op=op, before=image if op == "d" else None,
                            after=image if op == "u" else None, source=event.source,
                            ts_ms=event.ts_ms, transaction=None, row_schema=event.row_schema)
        try:
            row = change_of(probe, stream="", window_id="", key_columns={table: list(key_columns)},
                            column_types=column_types)
        except MalformedEventError:
            continue  # a before image without its key (REPLICA IDENTITY DEFAULT on a delete)
        texts.append(key_text(row.keys))
    return texts


def _comparable(position: SourcePosition) -> tuple:
    """Position parts with None sorting first (the ordering key's rule)."""
    return tuple((0, 0) if part is None else (1, part) for part in position.parts)


__all__ = [
    "HIGH", "LOW", "MESSAGE_PREFIX", "BatchScan", "SinkFile", "Watermark", "WatermarkError",
    "key_text", "listed_paths", "postgresql_emit", "scan_batch", "sink_lines", "table_emit",
    "watermark_of",
]
