"""Change stream records as typed values, parsed from what the Spanner client returns.

GoogleSQL rows carry one ``ChangeRecord`` column of type ARRAY<STRUCT<...>>; the Python client
returns STRUCTs as positional lists, so names come from the result metadata. PostgreSQL rows
carry one JSON object. Both are first turned into plain dicts, then into the record classes
below, which use the specification's own field names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from airflow_cdc.model import CdcError, UTC, loads_json, parse_ts
from airflow_cdc.sources.spanner.types import change_row_type


class ChangeRecordParseError(CdcError):
    """A change stream row does not have the documented shape."""


@dataclass(frozen=True)
class ColumnType:
    name: str
    type: dict  # Spanner's type structure, e.g. {"code": "ARRAY", "array_element_type": {...}}
    is_primary_key: bool
    ordinal_position: int

    @property
    def type_name(self) -> str:
        """The canonical type name change rows declare: INT64, ARRAY<STRING>, NUMERIC, JSON ...
        (PG annotations folded; see :func:`airflow_cdc.sources.spanner.types.change_row_type`)."""
        return change_row_type(self.type)


class ColumnTypes(tuple):
    """A data change record's column types (a tuple of :class:`ColumnType`).

    Records with the same column types share one, decoded once (the section *Shared column
    types* below), and so share its :attr:`row_types`.
    """

    @cached_property
    def row_types(self) -> dict[str, str]:
        """Column name -> the canonical type name change rows declare (never changed)."""
        return {column.name: column.type_name for column in self}

    @cached_property
    def integer_columns(self) -> frozenset[str]:
        """The INT64 and ARRAY<INT64> columns: their values arrive as JSON text (``mapping.py``)."""
        return frozenset(name for name, kind in self.row_types.items() if kind in ("INT64", "ARRAY<INT64>"))


@dataclass(frozen=True)
class Mod:
    keys: dict
    new_values: dict
    old_values: dict


@dataclass(frozen=True)
class DataChangeRecord:
    commit_timestamp: datetime
    record_sequence: str
    server_transaction_id: str
    is_last_record_in_transaction_in_partition: bool
    table_name: str
    column_types: tuple[ColumnType, ...]
    mods: tuple[Mod, ...]
    mod_type: str
    value_capture_type: str
    number_of_records_in_transaction: int
    number_of_partitions_in_transaction: int
    transaction_tag: str
    is_system_transaction: bool


@dataclass(frozen=True)
class HeartbeatRecord:
    timestamp: datetime


@dataclass(frozen=True)
class ChildPartition:
    token: str
    parent_partition_tokens: tuple[str, ...]


@dataclass(frozen=True)
class ChildPartitionsRecord:
    start_timestamp: datetime
    record_sequence: str
    child_partitions: tuple[ChildPartition, ...]


@dataclass(frozen=True)
class MalformedRecord:
    """A data change or heartbeat record without the documented shape: the reader sends it
    whole to the dead-letter table with ``reason``; the rest of the partition is read on.

    A heartbeat only moves the watermark, so losing one holds the gate back, never data; a
    child partitions record names where the partition continues, so a malformed one fails
    the read instead (:class:`ChangeRecordParseError`). The transaction fields are those the
    record still names (None otherwise), so the window's transaction check counts it.
    """

    kind: str
    raw: str
    reason: str
    table_name: str | None = None
    server_transaction_id: str | None = None
    record_sequence: str | None = None
    number_of_records_in_transaction: int | None = None


Record = DataChangeRecord | HeartbeatRecord | ChildPartitionsRecord | MalformedRecord

def parse_result_row(row: list, fields: list | None, dialect: str) -> list[Record]:
    """The records in one result row of a change stream query.

    ``fields`` is the result metadata (``StreamedResultSet.fields``), needed for GoogleSQL.
    """
    from airflow_cdc.sources.spanner.query import GOOGLE_SQL

    if dialect == GOOGLE_SQL:
        if not fields:
            raise ChangeRecordParseError("GoogleSQL change stream row arrived without metadata")
        change_records = _named(row[0], fields[0].type_)
    else:
        change_records = [_plain_json(row[0])]
    return _records_of(change_records)


def parse_protobuf_row(row: list, results, dialect: str) -> list[Record]:
    """:func:`parse_result_row` for a row of a query run with ``lazy_decode=True``: the
    row's protobuf values, ``results`` the client's ``StreamedResultSet``.

    A performance strategy. GoogleSQL's ChangeRecord column goes from protobuf values
    straight to the dicts :func:`_named` makes of the client's values (:func:`_protobuf_decoder`:
    one walk instead of the client's decode and then ours; JSON text parsed once, not into a
    JsonObject first). Saves: the client's decode of every value before ours
    (``bench/extract.py``, docs/performance.md). Any other row (PostgreSQL's JSONB, a
    ChangeRecord type holding a type the walk does not know) is decoded by the client
    (``decode_row``) and parsed by :func:`parse_result_row`, with the same result.
    """
    from airflow_cdc.sources.spanner.query import GOOGLE_SQL

    fields = results.fields
    if dialect == GOOGLE_SQL and fields:
        decode = _protobuf_decoder(fields[0].type_)
        if decode is not None:
            return _records_of(decode(row[0]))
    return parse_result_row(results.decode_row(row), fields, dialect)


def _records_of(change_records) -> list[Record]:
    records: list[Record] = []
    for change_record in change_records or []:
        records.extend(parse_change_record(change_record))
    return records


def parse_change_record(change_record: dict) -> list[Record]:
    """Records of one ChangeRecord value: exactly one of its three fields holds entries."""
    if not isinstance(change_record, dict):
        raise ChangeRecordParseError(f"ChangeRecord {change_record!r} is not a struct/object")
    records: list[Record] = []
    for raw in _entries(change_record.get("data_change_record")):
        records.append(_data_change(raw))
    for raw in _entries(change_record.get("heartbeat_record")):
        records.append(_heartbeat(raw))
    for raw in _entries(change_record.get("child_partitions_record")):
        records.append(_child_partitions(raw))
    return records


def _entries(value) -> list:
    # GoogleSQL: ARRAY<STRUCT> with zero or one element; PostgreSQL: an object or absent.
    # Anything else is one entry, which the record's parser finds malformed.
    if value is None:
        return []
    if isinstance(value, dict):
        return [value] if value else []
    if isinstance(value, list):
        return [v for v in value if v]
    return [value]


def _heartbeat(raw) -> HeartbeatRecord | MalformedRecord:
    try:
        return HeartbeatRecord(timestamp=_ts(_field(raw, "timestamp")))
    except Exception as exc:  # noqa: BLE001 - a bad heartbeat is no evidence, never a failure
        return MalformedRecord(
            "heartbeat_record", _raw_text(raw),
            f"heartbeat_record is malformed ({_problem(exc)}): it is no progress evidence")


def _child_partitions(raw) -> ChildPartitionsRecord:
    try:
        children = _field(raw, "child_partitions", None) or []
        if not isinstance(children, list):
            raise TypeError(f"child_partitions is a {type(children).__name__}, not an array")
        return ChildPartitionsRecord(
            start_timestamp=_ts(_field(raw, "start_timestamp")),
            record_sequence=str(_field(raw, "record_sequence")),
            child_partitions=tuple(
                ChildPartition(
                    token=_text(_field(child, "token"), "child token"),
                    parent_partition_tokens=tuple(
                        str(p) for p in (_field(child, "parent_partition_tokens", None) or []) if p
                    ),
                )
                for child in children
            ),
        )
    except Exception as exc:  # noqa: BLE001 - named and raised: the partition cannot go on
        raise ChangeRecordParseError(
            f"child_partitions_record is malformed ({_problem(exc)}): {_raw_text(raw)[:500]}. "
            f"It names where the partition continues, so the read stops rather than lose them"
        ) from exc


def _field(raw, name: str, *default):
    """``raw[name]`` of a record struct; TypeError when ``raw`` is no struct, KeyError when
    the field is missing and no default is given."""
    if not isinstance(raw, dict):
        raise TypeError(f"it is a {type(raw).__name__}, not a struct/object")
    if default:
        return raw.get(name, default[0])
    return raw[name]


def _text(value, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} {value!r} is not a non-empty string")
    return value


def _object(value, name: str) -> dict:
    """A JSON object (``keys``, ``new_values``, a column type), or {} for NULL."""
    value = _json_value(value)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{name} is a JSON {type(value).__name__}, not an object")
    return value


def _problem(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"field {exc.args[0]!r} is missing"
    return f"{type(exc).__name__}: {exc}"


def _raw_text(raw) -> str:
    """The record as text for the dead-letter table (JSON where it can be, else its repr)."""
    try:
        return json.dumps(_plain_json(raw), default=str, sort_keys=True)
    except Exception:  # noqa: BLE001 - the record is kept whatever it holds
        try:
            return repr(raw)[:100_000]
        except Exception:  # noqa: BLE001
            return f"<a {type(raw).__name__} that cannot be written as text>"


MOD_TYPES = ("INSERT", "UPDATE", "DELETE")


def _data_change(raw) -> DataChangeRecord | MalformedRecord:
    """The record, or a :class:`MalformedRecord` naming the record and what is wrong."""
    try:
        mod_type = str(_field(raw, "mod_type"))
        if mod_type not in MOD_TYPES:
            raise ValueError(f"mod_type {mod_type!r} is not one of {list(MOD_TYPES)}")
        columns = _field(raw, "column_types", None) or []
        mods = _field(raw, "mods", None) or []
        for name, value in (("column_types", columns), ("mods", mods)):
            if not isinstance(value, list):
                raise TypeError(f"{name} is a {type(value).__name__}, not an array")
        return DataChangeRecord(
            commit_timestamp=_ts(_field(raw, "commit_timestamp")),
            record_sequence=_text(_field(raw, "record_sequence"), "record_sequence"),
            server_transaction_id=_text(_field(raw, "server_transaction_id"), "server_transaction_id"),
            is_last_record_in_transaction_in_partition=bool(
                raw.get("is_last_record_in_transaction_in_partition")
            ),
            table_name=_text(_field(raw, "table_name"), "table_name"),
            column_types=_column_types(columns),
            mods=tuple(
                Mod(
                    keys=_object(_field(m, "keys", None), "keys"),
                    new_values=_object(_field(m, "new_values", None), "new_values"),
                    old_values=_object(_field(m, "old_values", None), "old_values"),
                )
                for m in mods
            ),
            mod_type=mod_type,
            value_capture_type=str(_field(raw, "value_capture_type")),
            number_of_records_in_transaction=_count(
                _field(raw, "number_of_records_in_transaction"), "number_of_records_in_transaction"),
            number_of_partitions_in_transaction=_count(
                _field(raw, "number_of_partitions_in_transaction"),
                "number_of_partitions_in_transaction"),
            transaction_tag=str(raw.get("transaction_tag") or ""),
            is_system_transaction=bool(raw.get("is_system_transaction")),
        )
    except Exception as exc:  # noqa: BLE001 - whatever the record holds, it is kept and named
        return _malformed_data_change(raw, exc)


def _column_types(columns: list) -> ColumnTypes:
    """The record's :class:`ColumnTypes`, built once for columns the decoder shares."""
    built = getattr(columns, "built", None)
    if built is not None:
        return built
    built = ColumnTypes(
        ColumnType(
            name=_text(_field(c, "name"), "column name"),
            type=_object(_field(c, "type"), f"type of column {c.get('name')!r}"),
            is_primary_key=bool(_field(c, "is_primary_key")),
            ordinal_position=_count(_field(c, "ordinal_position"), "ordinal_position"),
        )
        for c in columns
    )
    if isinstance(columns, _SharedColumns):
        columns.built = built
    return built


def _malformed_data_change(raw, exc: BaseException) -> MalformedRecord:
    fields = raw if isinstance(raw, dict) else {}
    named = {name: fields.get(name) for name in (
        "table_name", "server_transaction_id", "record_sequence", "number_of_records_in_transaction")}
    texts = {k: v for k, v in named.items() if isinstance(v, str) and v}
    try:
        expected = _count(named["number_of_records_in_transaction"], "")
    except Exception:  # noqa: BLE001
        expected = None
    where = ", ".join(f"{k} {v!r}" for k, v in texts.items() if k != "number_of_records_in_transaction")
    return MalformedRecord(
        "data_change_record", _raw_text(raw),
        f"data_change_record{' (' + where + ')' if where else ''} is malformed ({_problem(exc)})",
        table_name=texts.get("table_name"),
        server_transaction_id=texts.get("server_transaction_id"),
        record_sequence=texts.get("record_sequence"),
        number_of_records_in_transaction=expected,
    )


def _count(value, name: str) -> int:
    """A non-negative INT64 (the client gives an int, the PostgreSQL JSON a number or text)."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"{name} {value!r} is not an integer")
    number = int(value)
    if not 0 <= number < (1 << 63):
        raise ValueError(f"{name} {value!r} is not a non-negative INT64")
    return number


def _ts(value) -> datetime:
    if isinstance(value, datetime):
        # The client returns DatetimeWithNanoseconds; keep a plain datetime (Spark checks the
        # exact type). Commit timestamps are microsecond-granular, so nothing is lost.
        value = value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
        return datetime(
            value.year, value.month, value.day, value.hour, value.minute, value.second,
            value.microsecond, tzinfo=UTC,
        )
    return parse_ts(_nanos_to_micros(str(value)))


def _nanos_to_micros(text: str) -> str:
    # Spanner prints up to 9 fractional digits; Python datetimes hold 6. Commit timestamps
    # are microsecond-granular, so nothing is lost; longer fractions are truncated.
    if "." not in text:
        return text
    head, tail = text.split(".", 1)
    digits = "".join(ch for ch in tail if ch.isdigit())
    zone = tail[len(digits) :]
    return f"{head}.{digits[:6].ljust(6, '0')}{zone}"


def _json_value(value):
    """JSON columns arrive as JsonObject (GoogleSQL, the client's values), as text, or already
    plain (what :func:`_named`, the protobuf decoder and the PostgreSQL path make of them: a
    plain dict or list is not walked again)."""
    if value is None:
        return None
    if isinstance(value, str):
        return loads_json(value)
    if type(value) is dict or type(value) is list:
        return value
    return _plain_json(value)


def _plain_json(value):
    serialize = getattr(value, "serialize", None)
    if callable(serialize):  # google.cloud.spanner_v1.data_types.JsonObject
        return _json_object_value(value, serialize)
    if isinstance(value, dict):
        return {k: _plain_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_json(v) for v in value]
    return value


def _json_object_value(value, serialize):
    """A JsonObject's plain value, taken from the object the client parsed rather than written
    and parsed again (a performance strategy: no ``json.dumps`` and ``json.loads`` of every
    JSON value; with the changelog's shared texts, ``model._shared_dumps``;
    ``bench/extract.py``, docs/performance.md). A JsonObject is a null, an array, a scalar or a dict of values the
    client's ``json.loads`` made (plain values all the way down); a client without these
    attributes is read through text."""
    try:
        if value._is_null:
            return None
        if value._is_array:
            return list(value._array_value)
        if value._is_scalar_value:
            return value._simple_value
    except AttributeError:
        text = serialize()
        return None if text is None else json.loads(text)
    return dict(dict.items(value))


def _named(value, spanner_type):
    """Positional STRUCT lists -> dicts by field name, recursively, using result metadata."""
    return _by_shape(value, _shape(spanner_type))


# What _named needs of a result type, as plain tuples: (_ARRAY, element), (_STRUCT, ((name,
# shape), ...)), (_JSON,) or (_OTHER,). Walking the client's proto-plus type objects for every
# value (an enum comparison per value, a wrapper per field) was most of a partition read.
_ARRAY, _STRUCT, _JSON, _OTHER = "array", "struct", "json", "other"
_SHAPES: dict[bytes, tuple] = {}


def _shape(spanner_type) -> tuple:
    """The shape of ``spanner_type``, built once per distinct type."""
    try:  # the client hands over raw protobuf types (proto-plus ones in other versions)
        message = spanner_type if hasattr(spanner_type, "SerializeToString") else type(spanner_type).pb(spanner_type)
        key = message.SerializeToString(deterministic=True)
    except Exception:  # noqa: BLE001 - no protobuf message: no cache, the same shape
        return _compile_shape(spanner_type)
    shape = _SHAPES.get(key)
    if shape is None:
        if len(_SHAPES) >= 64:
            _SHAPES.clear()
        shape = _SHAPES[key] = _compile_shape(spanner_type)
    return shape


def _compile_shape(spanner_type) -> tuple:
    from google.cloud.spanner_v1 import TypeCode

    code = spanner_type.code
    if code == TypeCode.ARRAY:
        return (_ARRAY, _compile_shape(spanner_type.array_element_type))
    if code == TypeCode.STRUCT:
        return (_STRUCT, tuple((f.name, _compile_shape(f.type_)) for f in spanner_type.struct_type.fields))
    return (_JSON,) if code == TypeCode.JSON else (_OTHER,)


def _by_shape(value, shape: tuple):
    if value is None:
        return None
    kind = shape[0]
    if kind is _OTHER:
        return value
    if kind is _JSON:
        return _plain_json(value)
    if not isinstance(value, (list, dict)):
        return value  # not the documented shape: the record's parser names what is wrong
    if kind is _ARRAY:
        element = shape[1]
        return [_by_shape(v, element) for v in value]
    fields = shape[1]
    if isinstance(value, dict):
        return {name: _by_shape(value.get(name), field) for name, field in fields}
    return {name: _by_shape(v, field) for (name, field), v in zip(fields, value)}


# Compiled protobuf decoders by serialized ChangeRecord type (None: the type holds one the walk
# does not know, so the client decodes).
_DECODERS: dict[bytes, object] = {}


def _protobuf_decoder(spanner_type):
    """A function: protobuf ``Value`` of ``spanner_type`` -> what :func:`_named` makes of the
    client's decoded value (STRUCTs as dicts by field name, JSON as plain values, scalars as
    the client decodes them); None when ``spanner_type`` holds a type it does not know."""
    try:
        message = spanner_type if hasattr(spanner_type, "SerializeToString") else type(spanner_type).pb(spanner_type)
        key = message.SerializeToString(deterministic=True)
    except Exception:  # noqa: BLE001 - no protobuf message: the client decodes
        return None
    if key not in _DECODERS:
        if len(_DECODERS) >= 64:
            _DECODERS.clear()
        _DECODERS[key] = _compile_decoder(spanner_type)
    return _DECODERS[key]


def _compile_decoder(spanner_type):
    from google.cloud.spanner_v1 import TypeCode

    code = spanner_type.code
    if code == TypeCode.ARRAY:
        element = _compile_decoder(spanner_type.array_element_type)
        if element is None:
            return None

        def array(value):
            if value.HasField("null_value"):
                return None
            return [element(v) for v in value.list_value.values]
        return array
    if code == TypeCode.STRUCT:
        fields = tuple(
            (f.name, _shared_columns(decode) if f.name == "column_types" and decode is not None else decode)
            for f, decode in ((f, _compile_decoder(f.type_)) for f in spanner_type.struct_type.fields)
        )
        if any(decode is None for _, decode in fields):
            return None

        def struct(value):
            if value.HasField("null_value"):
                return None
            return {name: decode(v) for (name, decode), v in zip(fields, value.list_value.values)}
        return struct
    if code == TypeCode.JSON:
        def json_value(value):
            if value.HasField("null_value"):
                return None
            return loads_json(value.string_value)
        return json_value
    if code not in (TypeCode.STRING, TypeCode.BOOL, TypeCode.INT64, TypeCode.TIMESTAMP):
        return None
    try:  # the client's own decoder of the scalar: the same values as a decoded row holds
        from google.cloud.spanner_v1._helpers import _get_type_decoder

        scalar = _get_type_decoder(spanner_type, "")
    except Exception:  # noqa: BLE001 - a client without it: it decodes whole rows
        return None

    def nullable(value):
        if value.HasField("null_value"):
            return None
        return scalar(value)
    return nullable


# --- Shared column types --------------------------------------------------------------------
# A performance strategy: a data change record's ``column_types`` value is decoded once for
# every record whose value has the same bytes (most records of a table, in a partition), and
# the record parser builds its ColumnTypes once for it (:func:`_column_types`), and the change
# rows their type names (``ColumnTypes.row_types``). Saves: decoding the same column types
# once per record (``bench/extract.py``, docs/performance.md).

_SHARED_COLUMNS_LIMIT = 256  # distinct column types values remembered per decoder


class _SharedColumns(list):
    """Decoded ``column_types`` shared by records (never changed); ``built``: their ColumnTypes."""

    built: ColumnTypes | None = None


def _shared_columns(decode):
    """``decode`` of a ``column_types`` value, remembered by the value's bytes."""
    memo: dict[bytes, _SharedColumns] = {}

    def shared(value):
        key = value.SerializeToString()
        found = memo.get(key)
        if found is None:
            decoded = decode(value)
            if not isinstance(decoded, list):
                return decoded
            if len(memo) >= _SHARED_COLUMNS_LIMIT:
                memo.clear()
            found = memo[key] = _SharedColumns(decoded)
        return found
    return shared
