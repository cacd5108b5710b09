"""The column types of Datastream payloads: declared per table, from the Avro schema, or inferred.

Each change row declares its columns' canonical types (:mod:`airflow_cdc.sources.column_types`),
from which apply types the target's columns. For a payload column the first of these wins:

1. **Declared**: the pipeline's ``column_types`` mapping, per source table:
   ``{"shop.orders": {"amount": "DECIMAL(10,2)", "placed_at": "DATETIME"}}``. Tables are
   named as Datastream names the event's ``object`` (``shop.orders``) or in its identifier
   form (``shop_orders``); types are canonical names or the source databases' own names
   (:func:`canonical_type`: ``VARCHAR(20)``, ``BIGINT``, ``TIMESTAMPTZ``, ``DATETIME2``,
   ``JSONB`` ...), case and lengths free. JSON payloads need it: JSON has no dates, and a number's literal says nothing of its column's precision.
2. **The Avro schema**: Datastream writes each Avro file's schema in its header (seed 001:
   "列インデックスを使用すると、Avro ヘッダーのスキーマから列名と統合型を取得できます"), so
   :class:`AvroPayload` derives the types from the reader's ``writer_schema``.
3. **Inferred** from a JSON value (:func:`json_value_type`): strings, integers, booleans,
   exact decimals, objects and arrays as JSON.

A value that does not fit its column's type is never turned into NULL: apply converts it
exactly or dead-letters the row with the reason. A declared type wins over the encoding the
source chose, so a value encoded otherwise (a ``DATETIME`` written as Datastream's datetime
record or as an Avro instant) is converted first (:func:`declared_payload`), and one that
holds no value of the type at all is a dead letter of extract, naming table, column, value
and fix.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

from airflow_cdc.model import CdcError
from airflow_cdc.sources.column_types import (
    MAX_DECIMAL_PRECISION,
    SPARK_TYPES,
    ColumnType,
    UnsupportedColumnTypeError,
    decimal_type,
    read_type_name,
)

_INT64 = range(-(1 << 63), 1 << 63)
_EPOCH = datetime(1970, 1, 1)


class ColumnTypeMappingError(CdcError, ValueError):
    """A pipeline's ``column_types`` mapping that cannot type its tables' columns."""


class DeclaredTypeError(CdcError, ValueError):
    """A payload value that holds no value of its column's declared type: a dead letter."""


# --- the source databases' type names --------------------------------------------------------
# Names MySQL, PostgreSQL, Oracle and SQL Server give their types, onto the canonical codes.
# Keys are upper case, single-spaced, without arguments ("VARCHAR(20)" is looked up as
# "VARCHAR"); canonical names ("INT64", "NUMERIC(10,2)", "DATETIME", "STRING(MAX)") are read
# as they are.
ALIASES: dict[str, str] = {
    "INT": "INT64",
    "INTEGER": "INT64",
    "BIGINT": "INT64",
    "SMALLINT": "INT64",
    "INT8": "INT64",
    "INT4": "INT64",
    "INT2": "INT64",
    "BOOLEAN": "BOOL",
    "FLOAT8": "FLOAT64",
    "DOUBLE": "FLOAT64",
    "DOUBLE PRECISION": "FLOAT64",
    "FLOAT4": "FLOAT32",
    "REAL": "FLOAT32",
    "DECIMAL": "NUMERIC",
    "TEXT": "STRING",
    "VARCHAR": "STRING",
    "CHARACTER VARYING": "STRING",
    "CHAR": "STRING",
    "BYTEA": "BYTES",
    "JSONB": "PG_JSONB",
    "TIMESTAMPTZ": "TIMESTAMP",
    "TIMESTAMP WITH TIME ZONE": "TIMESTAMP",
    "TIMESTAMP WITH LOCAL TIME ZONE": "TIMESTAMP",
    "DATETIMEOFFSET": "TIMESTAMP",
    "TIMESTAMP WITHOUT TIME ZONE": "DATETIME",
    "TIMESTAMP_NTZ": "DATETIME",
    "DATETIME2": "DATETIME",
    "SMALLDATETIME": "DATETIME",
    # Spark and Iceberg v2 have no time-of-day type: the text (HH:MM:SS.ffffff) is kept.
    "TIME": "STRING",
    "TIME WITHOUT TIME ZONE": "STRING",
    "OID": "PG_OID",
}
_KNOWN = (
    f"use a canonical type ({', '.join(sorted(SPARK_TYPES))}, NUMERIC(p,s), ARRAY<...>) or "
    f"a source database's name for one (VARCHAR(20), BIGINT, DECIMAL(10,2), TIMESTAMPTZ, "
    f"DATETIME2, JSONB ...)"
)


def canonical_type(source_type: object) -> ColumnType:
    """The canonical type of a column type as a Datastream pipeline declares it: a canonical
    name, or a source database's name for one (:data:`ALIASES`; ``bigint[]`` and
    ``ARRAY<...>`` are arrays, lengths change nothing, ``DECIMAL(p,s)`` keeps both)."""
    if isinstance(source_type, ColumnType):
        return source_type
    if not isinstance(source_type, str):
        raise UnsupportedColumnTypeError(
            f"source type {source_type!r} ({type(source_type).__name__}) is not a type name: "
            f"give e.g. 'BIGINT', 'DECIMAL(10,2)' or 'DATETIME'"
        )
    return read_type_name(source_type, ALIASES, source_type, known=_KNOWN)


# --- 1. declared -----------------------------------------------------------------------------
def declared_column_types(column_types: Mapping | None, stream_id: str = "") -> dict[str, dict[str, str]]:
    """``column_types`` checked and made canonical: table identifier -> column -> type name.

    Called when the DAG is parsed, so a bad mapping fails there, naming the table, the
    column, the value and the fix, instead of failing windows later.
    """
    from airflow_cdc.sources.datastream.events import source_table_name

    where = f"column_types of Datastream stream {stream_id!r}" if stream_id else "column_types"
    example = '{"shop.orders": {"amount": "DECIMAL(10,2)", "placed_at": "DATETIME"}}'
    if column_types is None:
        return {}
    if not isinstance(column_types, Mapping):
        raise ColumnTypeMappingError(
            f"{where} is a {type(column_types).__name__}: give a mapping of source tables to "
            f"their columns' types, e.g. {example}"
        )
    declared: dict[str, dict[str, str]] = {}
    named_by: dict[str, str] = {}
    for table, columns in column_types.items():
        if not isinstance(table, str) or not table.strip():
            raise ColumnTypeMappingError(
                f"{where} has table {table!r}: name each table as Datastream's event object "
                f"names it (shop.orders) or in its identifier form (shop_orders)"
            )
        if not isinstance(columns, Mapping) or not columns:
            raise ColumnTypeMappingError(
                f"{where}: table {table!r} maps to {columns!r}, not to its columns' types: "
                f"give e.g. {{'amount': 'DECIMAL(10,2)'}}"
            )
        identifier = source_table_name({"object": table})
        if identifier in named_by:
            raise ColumnTypeMappingError(
                f"{where} names table {identifier!r} twice ({named_by[identifier]!r} and "
                f"{table!r}): keep one entry per table"
            )
        named_by[identifier] = table
        typed = {}
        for column, source_type in columns.items():
            if not isinstance(column, str) or not column:
                raise ColumnTypeMappingError(
                    f"{where}: table {table!r} has column {column!r}: give the payload's column name"
                )
            try:
                typed[column] = str(canonical_type(source_type))
            except UnsupportedColumnTypeError as error:
                raise ColumnTypeMappingError(
                    f"{where}: table {table!r} column {column!r} type {source_type!r} is not "
                    f"usable: {error}"
                ) from None
        declared[identifier] = typed
    return declared


def declared_payload(table: str, payload: Mapping, declared: Mapping[str, str]) -> Mapping:
    """``payload`` with the values of columns declared ``DATETIME`` that the source encodes
    otherwise than as a wall-clock reading converted to one (a naive ``datetime``):

    * Datastream's datetime record (``{"date": days since 1970-01-01, "time": microseconds
      of the day}``, as JSON lines or an Avro record fastavro read) -> the datetime it names;
    * an instant (an Avro ``timestamp-*`` long, which fastavro reads as UTC) -> its UTC wall
      clock, the reading the source's epoch number counts in.

    Text, dates and naive datetimes stay as they are (apply reads text exactly or
    dead-letters it). A number, a boolean, an array or any other object holds no datetime
    (a bare number does not say its unit): :class:`DeclaredTypeError` names table, column,
    value and fix, and the event becomes a dead letter instead of failing apply.
    """
    converted = None
    for column, kind in declared.items():
        if kind != "DATETIME":
            continue
        value = payload.get(column)
        if value is None or type(value) is str or (type(value) is datetime and value.tzinfo is None):
            continue
        wall_clock = _declared_datetime(table, column, value)
        if wall_clock is not value:
            converted = converted if converted is not None else dict(payload)
            converted[column] = wall_clock
    return payload if converted is None else converted


def _declared_datetime(table: str, column: str, value: object) -> object:
    where = f"table {table!r} column {column!r} is declared DATETIME but holds {_shown(value)}"
    if isinstance(value, datetime):
        return value if value.tzinfo is None else value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, (date, str)):
        return value
    if is_datetime_record(value):
        try:
            return datetime_of_record(value)
        except ValueError as error:
            raise DeclaredTypeError(
                f"{where}, a datetime record whose {error}: correct the source's value, or "
                f"declare the column JSON to keep the record as it is") from None
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        raise DeclaredTypeError(
            f"{where}, a number that does not say its unit (days, seconds, milliseconds or "
            f"microseconds since 1970): declare the column INT64 to keep the number, or have "
            f"the source write the datetime as text (2024-03-10 09:01:35), as Datastream's "
            f"datetime record, or as an Avro long with logical type local-timestamp-micros")
    raise DeclaredTypeError(
        f"{where}, a {type(value).__name__} that is no datetime: correct the column's entry "
        f"in column_types (e.g. JSON for a record), or the source's value")


def _shown(value: object) -> str:
    """``value`` as an error message shows it: its repr, cut at 200 characters."""
    text = repr(value)
    return text if len(text) <= 200 else f"{text[:200]}..."


# --- 2. the Avro schema ----------------------------------------------------------------------
Convert = Callable[[object], object]


class AvroPayload:
    """The payload columns' types in one Avro file's writer schema, and their value decoding.

    Mapping (the Avro specification's types and logical types, and Datastream's ``datetime``
    record ``{date: days since the epoch, time: microseconds of the day}``): a union with
    null is its other branch; int/long INT64, float FLOAT32, double FLOAT64, boolean BOOL,
    string (any logical type: varchar, uuid ...) and enum STRING, bytes/fixed BYTES, and
    with logical type decimal NUMERIC(p,s) (STRING, the exact text, beyond 38 digits, which
    no Iceberg decimal holds); date DATE; timestamp-millis/micros/nanos TIMESTAMP;
    local-timestamp-millis/micros/nanos and the datetime record DATETIME (nanoseconds are
    cut to microseconds, towards the past: Iceberg v2 holds microseconds); time-millis/micros
    STRING (``HH:MM:SS.ffffff``: Spark has no time type); record and map JSON; array
    ARRAY<element> (JSON when its elements are arrays, which Iceberg columns may not nest).

    The datetime record is known by its logical type or by its shape
    (:meth:`_is_datetime_shape`): writers leave out the record-level ``logicalType``, and its
    fields come as plain int/long or with the ``date``/``time-micros`` logical types (which
    fastavro decodes to ``date``/``time`` values).
    """

    def __init__(self, writer_schema: object) -> None:
        self._named: dict[str, object] = {}
        self._collect_names(writer_schema, "")
        self.types: dict[str, str] = {}
        self._decoders: dict[str, Convert] = {}
        payload = self._resolve(_field(writer_schema, "payload"))
        if isinstance(payload, list):  # a nullable payload record
            payload = next((self._resolve(b) for b in payload if b != "null"), None)
        for column in _fields(payload):
            name = column.get("name")
            kind, decode = self._type(column.get("type"))
            self.types[name] = kind
            if decode is not None:
                self._decoders[name] = decode

    def decode(self, payload: object) -> object:
        """``payload`` as fastavro read it, with the values fastavro cannot decode decoded."""
        if not isinstance(payload, dict) or not self._decoders:
            return payload
        decoded = dict(payload)
        for name, decode in self._decoders.items():
            value = payload.get(name)
            if value is None:
                continue
            try:
                decoded[name] = decode(value)
            except (ValueError, TypeError, OverflowError) as error:
                raise ValueError(f"column {name!r} value {_shown(value)}: {error}") from None
        return decoded

    def _collect_names(self, schema: object, namespace: str) -> None:
        if isinstance(schema, list):
            for branch in schema:
                self._collect_names(branch, namespace)
        elif isinstance(schema, dict):
            kind = schema.get("type")
            if kind in ("record", "error", "enum", "fixed") and isinstance(schema.get("name"), str):
                name = schema["name"]
                space = schema.get("namespace", namespace) if "." not in name else name.rsplit(".", 1)[0]
                full = name if "." in name else (f"{space}.{name}" if space else name)
                self._named[full] = schema
                self._named.setdefault(full.rsplit(".", 1)[-1], schema)
                namespace = space
            for column in schema.get("fields") or []:
                self._collect_names(column.get("type"), namespace)
            for key in ("items", "values"):
                if key in schema:
                    self._collect_names(schema[key], namespace)
            if isinstance(kind, (dict, list)):
                self._collect_names(kind, namespace)

    def _resolve(self, schema: object) -> object:
        if isinstance(schema, str) and schema in self._named:
            return self._named[schema]
        if isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)) and "logicalType" not in schema:
            return self._resolve(schema["type"])
        if isinstance(schema, dict) and isinstance(schema.get("type"), str) and schema["type"] in self._named:
            return self._named[schema["type"]]
        return schema

    def _is_datetime_shape(self, schema: dict) -> bool:
        """Whether a record has exactly the datetime record's fields: ``date`` an int (plain
        or logical type ``date``) and ``time`` a long (plain or logical type ``time-micros``)."""
        fields = _fields(schema)
        types = {f.get("name"): self._resolve(f.get("type")) for f in fields}
        if len(fields) != 2 or set(types) != {"date", "time"}:
            return False
        return _is_primitive(types["date"], "int", "date") and _is_primitive(types["time"], "long", "time-micros")

    def _type(self, schema: object) -> tuple[str, Convert | None]:
        """The canonical type of an Avro ``schema`` and the conversion its decoded values
        need (None: none)."""
        schema = self._resolve(schema)
        if isinstance(schema, list):
            branches = [b for b in schema if b != "null"]
            if len(branches) == 1:
                return self._type(branches[0])
            # Several non-null branches: each value is one of them; their text is kept.
            return "STRING", None
        if isinstance(schema, str):
            return _PRIMITIVES.get(schema, "STRING"), None
        if not isinstance(schema, dict):
            return "STRING", None
        kind, logical = schema.get("type"), schema.get("logicalType")
        if logical == "decimal" and kind in ("bytes", "fixed"):
            try:
                return str(decimal_type(int(schema.get("precision", 0)), int(schema.get("scale", 0)))), None
            except (UnsupportedColumnTypeError, TypeError, ValueError):
                return "STRING", None  # wider than any Iceberg decimal: the exact text
        if isinstance(logical, str) and isinstance(kind, str) and (logical, kind) in _LOGICAL_TYPES:
            return _LOGICAL_TYPES[(logical, kind)]
        if kind == "record" and (logical == "datetime" or self._is_datetime_shape(schema)):
            return "DATETIME", _datetime_record
        return self._complex_type(kind, schema)

    def _complex_type(self, kind: object, schema: dict) -> tuple[str, Convert | None]:
        """Records, maps and arrays (JSON, or arrays of a canonical type) with their elements'
        conversions; enums, fixed, and a type given by name or nested."""
        if kind in ("record", "error"):
            decoders = {f.get("name"): self._type(f.get("type"))[1] for f in _fields(schema)}
            decoders = {name: decode for name, decode in decoders.items() if decode is not None}
            return "JSON", (None if not decoders else _record_decoder(decoders))
        if kind == "map":
            decode = self._type(schema.get("values"))[1]
            return "JSON", (None if decode is None else lambda v, d=decode: {k: _maybe(d, x) for k, x in v.items()})
        if kind == "array":
            element, decode = self._type(schema.get("items"))
            convert = None if decode is None else (lambda v, d=decode: [_maybe(d, x) for x in v])
            return ("JSON" if element.startswith("ARRAY<") else f"ARRAY<{element}>"), convert
        if kind == "enum":
            return "STRING", None
        if kind == "fixed":
            return "BYTES", None
        return self._type(kind) if kind is not None else ("STRING", None)


_PRIMITIVES = {
    "boolean": "BOOL", "int": "INT64", "long": "INT64", "float": "FLOAT32", "double": "FLOAT64",
    "bytes": "BYTES", "string": "STRING", "null": "STRING",
}


def _field(schema: object, name: str) -> object:
    for column in _fields(schema):
        if column.get("name") == name:
            return column.get("type")
    return None


def _fields(schema: object) -> list[dict]:
    if isinstance(schema, dict) and isinstance(schema.get("fields"), list):
        return [f for f in schema["fields"] if isinstance(f, dict)]
    return []


def _maybe(decode: Convert, value: object) -> object:
    return None if value is None else decode(value)


def _record_decoder(decoders: dict[str, Convert]) -> Convert:
    def decode(value: object) -> object:
        if not isinstance(value, dict):
            return value
        return {k: (_maybe(decoders[k], v) if k in decoders else v) for k, v in value.items()}

    return decode


def _is_primitive(schema: object, kind: str, logical: str) -> bool:
    """Whether ``schema`` is the primitive ``kind``, plain or with the logical type ``logical``."""
    if schema == kind:
        return True
    return (isinstance(schema, dict) and schema.get("type") == kind
            and schema.get("logicalType", logical) == logical)


_DAY_MICROS = 86_400_000_000


def datetime_of_record(value: Mapping) -> datetime:
    """Datastream's ``datetime`` record as the wall-clock datetime it names (no zone).

    ``date`` is days since 1970-01-01 (an int, or the ``date`` fastavro decodes), ``time``
    microseconds of the day (an int, or the ``time`` fastavro decodes). Anything else raises
    :class:`ValueError` saying which part is wrong.
    """
    day, clock = value.get("date"), value.get("time")
    if isinstance(day, date) and not isinstance(day, datetime):
        start = datetime(day.year, day.month, day.day)
    elif isinstance(day, int) and not isinstance(day, bool):
        try:
            start = _EPOCH + timedelta(days=day)
        except OverflowError:
            raise ValueError(f"date {day!r} is not a day of years 1 to 9999 in days since 1970-01-01") from None
    else:
        raise ValueError(f"date {day!r} is not a number of days since 1970-01-01")
    if isinstance(clock, time):
        micros = ((clock.hour * 60 + clock.minute) * 60 + clock.second) * 1_000_000 + clock.microsecond
    elif isinstance(clock, int) and not isinstance(clock, bool) and 0 <= clock < _DAY_MICROS:
        micros = clock
    else:
        raise ValueError(f"time {clock!r} is not microseconds of the day (0 to {_DAY_MICROS - 1})")
    try:
        return start + timedelta(microseconds=micros)
    except OverflowError:
        raise ValueError(f"date {day!r} and time {clock!r} pass the year 9999") from None


def is_datetime_record(value: object) -> bool:
    """Whether a payload value has the datetime record's keys, ``date`` and ``time``, only."""
    return isinstance(value, Mapping) and len(value) == 2 and "date" in value and "time" in value


def _datetime_record(value: object) -> object:
    """A datetime record column's value decoded (a datetime already decoded stays)."""
    if isinstance(value, datetime):
        return value
    if not is_datetime_record(value):
        raise ValueError(f"{value!r} is not a datetime record of date and time")
    return datetime_of_record(value)


def _nanos_instant(value: object) -> object:
    """A ``timestamp-nanos`` long as its instant (UTC), cut to microseconds."""
    return _nanos_wall_clock(value).replace(tzinfo=UTC)


def _nanos_wall_clock(value: object) -> object:
    """A ``local-timestamp-nanos`` long as its wall-clock datetime, cut to microseconds."""
    if isinstance(value, datetime):
        return value
    return _EPOCH + timedelta(microseconds=int(value) // 1000)


def _time_text(value: object) -> object:
    if isinstance(value, time):
        return value.isoformat(timespec="microseconds")
    return value


# --- 3. inferred from JSON values ------------------------------------------------------------
def json_value_type(value: object) -> str:
    """The canonical column type of a payload value nothing declares (JSON parsed with
    ``parse_float=Decimal``, so ``20.00`` arrives as ``Decimal('20.00')``).

    A fractional number is ``NUMERIC(38,<its scale>)``: its literal's scale is the only
    evidence of the column's scale there is (``20.00``: 2), and precision 38 leaves the most
    room for integer digits, so the column's later values fit it too. An exponent literal
    counts by the digits it really has after the point (``1.5E-7``: 8; ``1E+3``: 0). Integers
    are INT64, or NUMERIC(38,0) beyond its range. Declare a column (``column_types``) to
    type it otherwise: JSON cannot say that a string is a date.
    """
    if type(value) is str:  # the commonest value: no isinstance chain
        return "STRING"
    if isinstance(value, bool):
        return "BOOL"
    if isinstance(value, int):
        return "INT64" if value in _INT64 else f"NUMERIC({MAX_DECIMAL_PRECISION},0)"
    if isinstance(value, Decimal):
        exponent = value.as_tuple().exponent
        scale = -exponent if isinstance(exponent, int) and exponent < 0 else 0
        return f"NUMERIC({MAX_DECIMAL_PRECISION},{min(scale, MAX_DECIMAL_PRECISION)})"
    if isinstance(value, float):
        return "FLOAT64"
    if isinstance(value, datetime):
        return "DATETIME" if value.tzinfo is None else "TIMESTAMP"
    if isinstance(value, date):
        return "DATE"
    if isinstance(value, (bytes, bytearray)):
        return "BYTES"
    if isinstance(value, (dict, list)):
        return "JSON"
    return "STRING"


def payload_column_types(
    values: Mapping[str, object],
    declared: Mapping[str, str] | None = None,
    schema_types: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Each column of ``values`` (payload values as decoded) with its type, by the order above."""
    declared = declared or {}
    schema_types = schema_types or {}
    return {
        name: declared.get(name) or schema_types.get(name) or json_value_type(value)
        for name, value in sorted(values.items())
    }


# (logical type, Avro type) -> the canonical type and the conversion its values need.
_LOGICAL_TYPES: dict[tuple, tuple[str, Convert | None]] = {
    ("date", "int"): ("DATE", None),
    ("timestamp-millis", "long"): ("TIMESTAMP", None),
    ("timestamp-micros", "long"): ("TIMESTAMP", None),
    ("local-timestamp-millis", "long"): ("DATETIME", None),
    ("local-timestamp-micros", "long"): ("DATETIME", None),
    ("timestamp-nanos", "long"): ("TIMESTAMP", _nanos_instant),  # fastavro leaves nanos as int
    ("local-timestamp-nanos", "long"): ("DATETIME", _nanos_wall_clock),
    **{(logical, kind): ("STRING", _time_text)
       for logical in ("time-millis", "time-micros") for kind in ("int", "long")},
}
