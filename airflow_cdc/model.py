"""The values every layer shares: windows, change rows, partitions and their outcomes.

Pure Python on purpose (no Airflow, no pyspark): Spark executors import this module on
machines without Airflow, and DAG parsing imports it without starting a JVM.

Timestamps are timezone-aware UTC ``datetime`` values with microsecond precision throughout;
a naive datetime is refused where it enters, because mixing the two silently shifts windows.
"""

from __future__ import annotations

import enum
import json
import math
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from functools import cached_property

UTC = timezone.utc
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class CdcError(Exception):
    """Base class of every error airflow-cdc raises on purpose."""


class InvalidIdentifierError(CdcError, ValueError):
    """A name that would be put into SQL or a table name is not a plain identifier."""


class ZeroWidthWindowError(CdcError, ValueError):
    """A window whose start is not before its end (Airflow 3 ``@hourly`` gives such windows)."""


def validate_identifier(kind: str, value: object) -> str:
    """Return ``value`` if it is a plain SQL identifier, else raise naming kind, value and fix.

    Called before any SQL or table name is built from user input.
    """
    if not isinstance(value, str) or not _IDENTIFIER.match(value):
        raise InvalidIdentifierError(
            f"{kind} {value!r} is not an identifier: use letters, digits and _ "
            f"(at most 128, not starting with a digit)"
        )
    return value


def ensure_utc(name: str, value: datetime) -> datetime:
    """Return ``value`` converted to UTC; refuse naive datetimes with a clear message."""
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, got {type(value).__name__}: {value!r}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValueError(
            f"{name} {value.isoformat()} has no time zone: pass an aware datetime "
            f"(for example datetime(..., tzinfo=timezone.utc))"
        )
    value = value.astimezone(UTC)
    if type(value) is not datetime:
        # A subclass (pendulum's, from Airflow's context) may drop the zone in arithmetic.
        value = datetime(value.year, value.month, value.day, value.hour, value.minute,
                         value.second, value.microsecond, tzinfo=UTC)
    return value


def format_ts(value: datetime, *, timespec: str = "microseconds") -> str:
    """RFC 3339 UTC text of an instant, ``YYYY-MM-DDTHH:MM:SS.ffffffZ``: the one writer of
    timestamp text (window ids, changelog values, the Spanner emulator's values, Datastream
    events), so every reader sees one shape.

    The year is always four digits (``0005-01-01T...``): RFC 3339 and Spanner require it, and
    only then does the text sort like the instant it names (``strftime("%Y")`` writes ``5``
    for year 5, which Spanner's client refuses and apply cannot read). ``timespec`` is
    ``datetime.isoformat``'s (``"milliseconds"`` for Datastream's three digits); the fraction
    is cut, never rounded, so the text never names a later instant.
    """
    utc = ensure_utc("timestamp", value)
    return utc.replace(tzinfo=None).isoformat(timespec=timespec) + "Z"


def parse_ts(text: str) -> datetime:
    """Inverse of :func:`format_ts`; also accepts any ISO-8601 text with an offset."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return ensure_utc("timestamp", value)


class Op(str, enum.Enum):
    """What happened to a row. READ marks rows of a snapshot (backfill), not changes.

    TRUNCATE is a table-level change (Debezium's op ``t``): a changelog row without keys or
    values saying every row of ``source_table`` ordered before its ``ordering_key`` is gone.
    Apply empties the target of those rows and keeps the position as the table's guard, so a
    change ordered before it that arrives later is never applied (``spark_jobs/apply/truncates.py``).
    """

    INSERT = "INSERT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    READ = "READ"
    TRUNCATE = "TRUNCATE"


class Image(str, enum.Enum):
    """Whether ``new_values`` carries the whole row or only the changed columns.

    Spanner NEW_VALUES and OLD_AND_NEW_VALUES give PARTIAL images; NEW_ROW,
    NEW_ROW_AND_OLD_VALUES, Datastream and Debezium give FULL ones.
    """

    FULL = "FULL"
    PARTIAL = "PARTIAL"


class WindowState(str, enum.Enum):
    PLANNED = "PLANNED"
    EXTRACTED = "EXTRACTED"
    COMMITTED = "COMMITTED"
    APPLIED = "APPLIED"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class PartitionState(str, enum.Enum):
    CREATED = "CREATED"  # reported by some but not all of its parents
    READY = "READY"  # every parent reported it: it may be read
    RUNNING = "RUNNING"  # read in a window and continues in the next
    FINISHED = "FINISHED"  # the source said it ended (I5)


@dataclass(frozen=True)
class Window:
    """One half-open window ``[start, end)`` of one stream; one Airflow DAG run owns it."""

    stream_id: str
    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        validate_identifier("stream id", self.stream_id)
        object.__setattr__(self, "start", ensure_utc("window start", self.start))
        object.__setattr__(self, "end", ensure_utc("window end", self.end))
        if self.start >= self.end:
            raise ZeroWidthWindowError(
                f"window of stream {self.stream_id!r} is empty: start {format_ts(self.start)} "
                f"is not before end {format_ts(self.end)}. CDC DAGs need a data interval of "
                f"non-zero width: schedule them with CronDataIntervalTimetable or "
                f"DeltaDataIntervalTimetable, not a cron string (Airflow 3 turns '@hourly' "
                f"into CronTriggerTimetable, whose interval is zero-width)"
            )

    @cached_property
    def window_id(self) -> str:
        """Stable text id, used as the Iceberg snapshot tag and in file names.

        Computed once per window (the window's fields never change): readers name every
        change row's window with it, so its two timestamp texts are written once, not per row.
        """
        return f"{format_ts(self.start)}/{format_ts(self.end)}"

    @property
    def inclusive_end(self) -> datetime:
        """The last instant inside the window: sources with inclusive end bounds query to it."""
        return self.end - timedelta(microseconds=1)


@dataclass(frozen=True)
class ChangeRow:
    """One changed source row, source-agnostic: one row of a stream's changelog table.

    ``keys``, ``new_values`` and ``old_values`` map column names to JSON-compatible values;
    ``column_types`` maps column names to the source's type names (for typing targets).
    ``ordering_key`` is bytes that sort like the source's order for one key
    (see :func:`encode_ordering_key`).
    """

    stream: str
    window_id: str
    source_table: str
    op: Op
    image: Image
    keys: dict
    new_values: dict | None
    old_values: dict | None
    column_types: dict
    commit_ts: datetime
    ordering_key: bytes
    transaction_id: str | None = None
    event_id: str | None = None
    partition_id: str | None = None
    source_metadata: dict = field(default_factory=dict)


# The changelog table's columns, in order, with Iceberg/Spark SQL types. spark_jobs builds
# its schema from this list, so the Airflow side and the Spark side cannot drift apart.
# Keys and values are maps of column name -> value text (see value_text): a column set to
# NULL (present, null) differs from one a partial image leaves out (absent), SQL reads them
# as ``new_values['amount']``, and apply needs no JSON parsing, only a cast per folded value.
CHANGELOG_COLUMNS: tuple[tuple[str, str], ...] = (
    ("stream", "string"),
    ("window_id", "string"),
    ("source_table", "string"),
    ("op", "string"),
    ("image", "string"),
    ("keys", "map<string,string>"),
    ("new_values", "map<string,string>"),
    ("old_values", "map<string,string>"),
    ("column_types_json", "string"),
    ("commit_ts", "timestamp"),
    ("ordering_key", "binary"),
    ("transaction_id", "string"),
    ("event_id", "string"),
    ("partition_id", "string"),
    ("source_metadata_json", "string"),
)
CHANGELOG_PARTITIONING = "days(commit_ts)"
# Snapshot summary property that tags the one changelog commit of a window (I1).
WINDOW_SNAPSHOT_PROPERTY = "airflow-cdc.window-id"


@dataclass(frozen=True)
class PartitionPosition:
    """Where a window reads one partition from: recorded at plan time (window_partitions)."""

    partition_id: str
    start: datetime
    resume_position: str | None = None
    parent_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", ensure_utc("partition start", self.start))
        object.__setattr__(self, "parent_ids", tuple(self.parent_ids))


@dataclass(frozen=True)
class ChildPartition:
    """A partition a parent reported (Spanner child_partitions_record, Bigtable CloseStream).

    ``handover`` is where this parent hands the child over, when the source says (Bigtable's
    continuation token for the piece of the child this parent covered); the child is read
    from all its parents' hand-overs together (:func:`child_resume_position`).
    """

    partition_id: str
    start: datetime
    parent_ids: tuple[str, ...]
    handover: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", ensure_utc("child start", self.start))
        object.__setattr__(self, "parent_ids", tuple(self.parent_ids))


def child_resume_position(handovers: Mapping[str, str | None]) -> str | None:
    """A child's resume position: its parents' hand-overs by parent id, as JSON text.

    None when no parent handed over a position (Spanner: a child is read from its start).
    The source reads it back with :func:`parent_handovers`.
    """
    given = {parent: position for parent, position in handovers.items() if position is not None}
    if not given:
        return None
    return _dumps({"handovers": dict(sorted(given.items()))})


def parent_handovers(resume_position: str | None) -> dict[str, str] | None:
    """The hand-overs of a child's resume position, or None for any other position."""
    if not resume_position or not resume_position.startswith('{"handovers"'):
        return None
    return dict(json.loads(resume_position)["handovers"])


def all_parents_reported(parent_ids: Iterable[str], reported_by: Iterable[str]) -> bool:
    """Whether a child partition may be read: every one of its parents has reported it.

    The protocol's child rule (seed 000, "query workflow"): a child with several parents (a
    Spanner merge) is read once, after its last parent reported it, so the records of a key
    are read in commit timestamp order across the split or merge. The extract's rounds
    (:mod:`airflow_cdc.pipeline.partition_lineage`) and the state store's commit
    (:mod:`airflow_cdc.state.outcomes`) both decide with this one function.
    """
    return set(parent_ids) <= set(reported_by)


@dataclass(frozen=True)
class PartitionOutcome:
    """What reading one partition in one window found.

    ``finished`` is set only when the source said the partition ended (I5); otherwise the
    partition continues in the next window from ``resume_position`` / ``watermark``.
    """

    partition_id: str
    finished: bool
    watermark: datetime
    records: int = 0
    resume_position: str | None = None
    children: tuple[ChildPartition, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "watermark", ensure_utc("partition watermark", self.watermark))
        object.__setattr__(self, "children", tuple(self.children))


@dataclass(frozen=True)
class Readiness:
    """Step 0 of the protocol: whether a window may be planned now, and if not, why not.

    A DAG run for ``[s, e)`` starts at ``e``, but a source's evidence for the window can
    arrive later (Datastream's allowed lateness). Planning waits until it can exist, so the
    window reads it and its gate can open; ``retry_at`` is the earliest instant asking again
    can change the answer (None: poll). A plain value, so sources can answer with it and the
    pipeline and the Airflow side act on it.
    """

    ready: bool
    reason: str
    retry_at: datetime | None = None
    #: Plan options a ready answer decided (JSON): the first plan of the window records them
    #: (Bigtable: a window the stall policy opened unconfirmed).
    options: dict = field(default_factory=dict)


# --- ordering keys -------------------------------------------------------------------------
# A tuple is encoded into bytes whose unsigned lexicographic order equals the tuple's order.
# Each element carries a one-byte type tag, so None sorts first and types never interleave.
_TAG_NONE, _TAG_INT, _TAG_BYTES = 0x01, 0x02, 0x03


def _escape(raw: bytes) -> bytes:
    # 0x00 inside the value becomes 0x00 0xFF; the value ends with 0x00 0x01, which sorts
    # below any continuation, so a prefix sorts before its extensions.
    return raw.replace(b"\x00", b"\x00\xff") + b"\x00\x01"


def encode_ordering_key(*parts: object) -> bytes:
    """Encode ``parts`` (None, int, str, bytes, aware datetime) as order-preserving bytes.

    ``encode_ordering_key(a...) < encode_ordering_key(b...)`` exactly when the tuple ``a`` is
    less than ``b``, element by element (datetimes compare as instants, ints as numbers,
    strings by UTF-8 bytes). Ints must fit in a signed 64-bit integer. A tuple's bytes are
    its parts' bytes one after the other: ``encode_ordering_key(a, b) == encode_ordering_key(a)
    + encode_ordering_key(b)``.
    """
    out = bytearray()
    for part in parts:
        if part is None:
            out.append(_TAG_NONE)
        elif isinstance(part, bool):
            raise TypeError("booleans are not ordering key parts: use 0 or 1")
        elif isinstance(part, datetime):
            delta = ensure_utc("ordering key timestamp", part) - datetime(1970, 1, 1, tzinfo=UTC)
            micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
            out.append(_TAG_INT)
            out += struct.pack(">Q", micros + (1 << 63))
        elif isinstance(part, int):
            if not -(1 << 63) <= part < (1 << 63):
                raise OverflowError(f"ordering key integer {part} does not fit in 64 bits")
            out.append(_TAG_INT)
            out += struct.pack(">Q", part + (1 << 63))
        elif isinstance(part, str):
            out.append(_TAG_BYTES)
            out += _escape(part.encode("utf-8"))
        elif isinstance(part, (bytes, bytearray)):
            out.append(_TAG_BYTES)
            out += _escape(bytes(part))
        else:
            raise TypeError(
                f"ordering key part {part!r} has type {type(part).__name__}: "
                f"use None, int, str, bytes or an aware datetime"
            )
    return bytes(out)


# --- JSON text parsed fast ------------------------------------------------------------------
# A performance strategy with one interface, :func:`loads_json` (``json.loads`` is the plain
# path): saves most of the CPU of parsing the column types, keys and values of a change
# (``bench/extract.py``; figures in docs/performance.md).

# A run of 19 or more digits: a number orjson could turn into a float (an integer beyond
# 64 bits) rather than keep exact, as json.loads does; a value orjson parsed with a float in
# it, from a text with such a run, is parsed again by json.loads. JSON numbers are ASCII
# digits, so the run is looked for as one (``\d`` also matches other scripts' digits, slower).
_LONG_DIGITS = re.compile(r"[0-9]{19}")


def loads_json(text: str):
    """``json.loads(text)``, the same value, parsed by orjson where it can.

    orjson rejects what the json module accepts beyond the standard (``NaN``, ``Infinity``,
    lone surrogates, exponents out of range) and would round integers beyond 64 bits to
    floats: those texts, and any orjson refuses, are parsed by ``json.loads``, so its value
    and its error are the answer. Without orjson installed (it is optional on a cluster's
    executors), ``json.loads`` parses every text.
    """
    if _orjson_loads is not None:
        try:
            value = _orjson_loads(text)
        except ValueError:  # orjson.JSONDecodeError is one
            return json.loads(text)
        # The digits are looked for only where orjson gave a float. Saves: the search cost
        # six times orjson's parse of a change's values (2.0 us against 0.34 us for 140
        # characters); the parse and this check now take 0.8 us (2026-12-04).
        if not (_holds_float(value) and _LONG_DIGITS.search(text)):
            return value
    return json.loads(text)


def _holds_float(value) -> bool:
    """Whether a parsed JSON value is or holds a float."""
    kind = type(value)
    if kind is float:
        return True
    if kind is dict:
        value = value.values()
    elif kind is not list:
        return False
    for item in value:
        if _holds_float(item):
            return True
    return False


try:
    from orjson import loads as _orjson_loads
except ImportError:  # pragma: no cover - the package depends on it; clusters may lack it
    _orjson_loads = None


# --- changelog records ---------------------------------------------------------------------
def value_text(value: object) -> str | None:
    """The changelog's text for one column value; apply types it from the column's type.

    Strings stay as they are; booleans are ``true``/``false``; numbers, lists and dicts are
    their compact JSON (floats ``NaN``/``Infinity`` included); decimals are their exact
    fixed-point text, trailing zeros kept (``20.00``), inside JSON too; timestamps are
    :func:`format_ts` text; bytes are base64. None stays None (a column set to NULL).
    """
    if value is None or isinstance(value, str):
        return value
    if type(value) is int:  # the commonest value after text: its JSON is its str, without json.dumps
        return str(value)
    if type(value) is float and math.isfinite(value):  # json writes a finite float as its repr
        return repr(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return decimal_text(value)
    if isinstance(value, (datetime, bytes, bytearray)):
        return _json_default(value)  # the same text they have inside JSON
    return _dumps(value)


def value_texts(values: dict | None) -> dict[str, str | None] | None:
    """``values`` as a changelog map: column -> :func:`value_text`, in column-name order.

    The order is canonical so the same change always gives the same map (apply hashes it to
    tell a redelivery from a clash).
    """
    if values is None:
        return None
    # Text and NULL, the commonest values, are their own text: no call for them.
    return {
        str(name): value if value is None or type(value) is str else value_text(value)
        for name, value in sorted(values.items())
    }


def change_row_to_record(row: ChangeRow) -> dict:
    """The changelog table row for ``row``: one value per :data:`CHANGELOG_COLUMNS` entry."""
    return dict(zip(CHANGELOG_NAMES, change_row_values(row)))


def change_row_values(row: ChangeRow) -> tuple:
    """:func:`change_row_to_record`'s values as one tuple, in :data:`CHANGELOG_COLUMNS` order
    (what Spark tasks hand back: no dict per row)."""
    return (
        row.stream,
        row.window_id,
        row.source_table,
        Op(row.op).value,
        Image(row.image).value,
        value_texts(row.keys),
        value_texts(row.new_values),
        value_texts(row.old_values),
        _shared_dumps(row.column_types, "column_types"),
        ensure_utc("commit_ts", row.commit_ts),
        bytes(row.ordering_key),
        row.transaction_id,
        row.event_id,
        row.partition_id,
        _shared_dumps(row.source_metadata, "source_metadata"),
    )


# The changelog's column names, in the order change_row_values gives its values.
CHANGELOG_NAMES = (
    "stream", "window_id", "source_table", "op", "image", "keys", "new_values", "old_values",
    "column_types_json", "commit_ts", "ordering_key", "transaction_id", "event_id", "partition_id",
    "source_metadata_json",
)
if CHANGELOG_NAMES != tuple(name for name, _ in CHANGELOG_COLUMNS):  # pragma: no cover
    raise AssertionError("change_row_values is out of step with CHANGELOG_COLUMNS")


def change_row_to_json_line(row: ChangeRow) -> str:
    """One JSON line for hand-over files (rows files between Airflow and Spark).

    Values keep their JSON types (the line is a ChangeRow, not a changelog row); bytes travel
    as lowercase hex (the ordering key) or base64 (values), timestamps as :func:`format_ts` text.
    """
    return _dumps(
        {
            "stream": row.stream,
            "window_id": row.window_id,
            "source_table": row.source_table,
            "op": Op(row.op).value,
            "image": Image(row.image).value,
            "keys": row.keys,
            "new_values": row.new_values,
            "old_values": row.old_values,
            "column_types": row.column_types,
            "commit_ts": format_ts(ensure_utc("commit_ts", row.commit_ts)),
            "ordering_key": bytes(row.ordering_key).hex(),
            "transaction_id": row.transaction_id,
            "event_id": row.event_id,
            "partition_id": row.partition_id,
            "source_metadata": row.source_metadata,
        }
    )


def change_row_from_json_line(line: str) -> ChangeRow:
    """Inverse of :func:`change_row_to_json_line` (timestamps and bytes in values stay text)."""
    rec = json.loads(line)
    return ChangeRow(
        stream=rec["stream"],
        window_id=rec["window_id"],
        source_table=rec["source_table"],
        op=Op(rec["op"]),
        image=Image(rec["image"]),
        keys=rec["keys"],
        new_values=rec["new_values"],
        old_values=rec["old_values"],
        column_types=rec["column_types"],
        commit_ts=parse_ts(rec["commit_ts"]),
        ordering_key=bytes.fromhex(rec["ordering_key"]),
        transaction_id=rec["transaction_id"],
        event_id=rec["event_id"],
        partition_id=rec["partition_id"],
        source_metadata=rec["source_metadata"],
    )


def decimal_text(value: Decimal) -> str:
    """A decimal's exact text without an exponent (``20.00``, ``0.00000015``, ``1000``)."""
    return format(value, "f")


class _HoldsDecimal(Exception):
    pass


# The last (object, text) _shared_dumps wrote, one per kind of object (column types,
# source metadata: a row asks for both, in turn): the object is held, so its id is not reused.
_LAST_SHARED: dict = {}


def _shared_dumps(value: object, kind: str) -> str:
    """:func:`_dumps` of an object many consecutive rows share (the column types and the
    metadata of one source record), written once for them: a performance strategy, the
    plain path is :func:`_dumps` per row (saves a JSON encode per change; ``bench/extract.py``).
    One entry per ``kind``, since a row asks for both kinds in turn and one shared entry
    would always hold the other."""
    last = _LAST_SHARED.get(kind)  # one read: another thread may replace it meanwhile
    if last is None or last[0] is not value:
        last = _LAST_SHARED[kind] = (value, _dumps(value))
    return last[1]


def _dumps(value: object) -> str:
    """Compact JSON text with sorted keys: the same value always gives the same text, so
    re-runs write identical bytes (apply's redelivery hash reads these texts)."""
    try:
        return _ENCODER.encode(value)
    except _HoldsDecimal:
        return _exact_dumps(value)


def _exact_dumps(value: object) -> str:
    """:func:`_dumps` text with decimals written as their exact number literals.

    The json module can only write a decimal as a float (rounding it, dropping trailing
    zeros) or as a string; values holding one (rare: JSON payloads parsed with exact
    decimals) are written here, piece by piece, in the same compact sorted form.
    """
    if isinstance(value, Decimal):
        return decimal_text(value) if value.is_finite() else json.dumps(str(value))
    if isinstance(value, dict):
        items = sorted((str(k), v) for k, v in value.items())
        return "{" + ",".join(f"{json.dumps(k)}:{_exact_dumps(v)}" for k, v in items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_exact_dumps(v) for v in value) + "]"
    return json.dumps(value, separators=(",", ":"), default=_json_default)


def _json_default(value: object) -> object:
    if isinstance(value, Decimal):
        raise _HoldsDecimal
    if isinstance(value, datetime):
        return format_ts(value)
    if isinstance(value, (bytes, bytearray)):
        import base64

        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"value {value!r} of type {type(value).__name__} is not JSON-serializable")


# json.dumps with options builds a JSONEncoder per call (a third of the time of a short
# value's text); :func:`_dumps` uses this one, which writes the same text.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_json_default)
