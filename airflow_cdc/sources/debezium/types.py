"""Debezium column types -> canonical types, and Debezium's JSON values -> changelog values.

Debezium describes each column with a Kafka Connect schema: a plain type (``int32``,
``string``, ``bytes`` ...) and, for most database types that are more than that, a *semantic*
(logical) type in the schema's ``name`` (``io.debezium.time.MicroTimestamp``,
``org.apache.kafka.connect.data.Decimal`` ...). The JSON converter writes the value in the plain
type's form (days since the epoch, microseconds, base64 big-endian bytes). This module gives
each column its canonical type (:mod:`airflow_cdc.sources.column_types`, which apply types
target columns from) and converts each value to what :func:`airflow_cdc.model.value_text`
writes exactly. Nothing is rounded:

======================================================  =================  ====================
Debezium / Kafka Connect type                           canonical type     value written
======================================================  =================  ====================
int8, int16, int32, int64                               INT64              the integer
float32 / float64 (JSON: float / double)                FLOAT32 / FLOAT64  the number (NaN kept)
boolean / string                                        BOOL / STRING      as is
bytes (base64 in JSON)                                  BYTES              the base64 text
io.debezium.time.Date, connect Date (days)              DATE               ``YYYY-MM-DD``
io.debezium.time.Time (ms), MicroTime (µs),             STRING             ``HH:MM:SS.ffffff``
connect Time (ms)                                                          (see "Times")
io.debezium.time.NanoTime (ns)                          STRING             ``HH:MM:SS.fffffffff``
io.debezium.time.ZonedTime (text)                       STRING             as is
io.debezium.time.Timestamp (ms), MicroTimestamp (µs),   DATETIME           ``YYYY-MM-DDTHH:MM:SS
connect Timestamp (ms)                                                     .ffffff`` (no zone)
io.debezium.time.NanoTimestamp (ns)                     DATETIME           9 fraction digits
io.debezium.time.ZonedTimestamp (ISO-8601 text)         TIMESTAMP          the instant in UTC,
                                                                           ``...Z``, digits kept
io.debezium.time.Year                                   INT64              the year
io.debezium.time.MicroDuration (µs)                     INT64              the microseconds
io.debezium.time.Interval (ISO-8601 text)               INTERVAL           as is
org.apache.kafka.connect.data.Decimal                   NUMERIC(p,s)       exact decimal
  (``scale``, ``connect.decimal.precision``)            or PG_NUMERIC
io.debezium.data.VariableScaleDecimal                   PG_NUMERIC         exact decimal
io.debezium.data.Json                                   JSON               the JSON text
io.debezium.data.Uuid                                   UUID               as is
io.debezium.data.Enum, EnumSet, Xml, Ltree              STRING             as is
io.debezium.data.Bits                                   BYTES              the base64 text
io.debezium.data.geometry.Geometry/Geography/Point      JSON               the struct
io.debezium.data.DoubleVector / FloatVector             ARRAY<FLOAT64/32>  the numbers
io.debezium.data.SparseVector, map, unnamed struct      JSON               the object
array of T                                              ARRAY<T>           each element as T
======================================================  =================  ====================

Choices, and why:

* **Times of day** are text, as Datastream's TIME columns are: Spark and Iceberg v2 have no
  time-of-day type, and a MySQL ``TIME`` is a duration (``-838:59:59`` to ``838:59:59``), so the
  hours may exceed 23 or carry a sign; the text keeps all of it, and sorts like the time
  within one day.
* **Wall-clock timestamps** (``timestamp without time zone``, MySQL ``DATETIME``) are DATETIME
  (``timestamp_ntz``): Debezium counts their clock reading from the epoch as if it were UTC,
  so the text is that clock reading, and no zone is invented. **ZonedTimestamp** (PostgreSQL
  ``timestamptz``, MySQL ``TIMESTAMP``) names an instant: TIMESTAMP, written in UTC.
  Nanosecond digits are kept in the text; the target column (microseconds) truncates them, as
  the canonical types document.
* **Decimal** with a precision of 1 to 38 and a scale from 0 to the precision is
  ``NUMERIC(p,s)``; without ``connect.decimal.precision`` (MySQL, and PostgreSQL when
  ``column.propagate.source.type`` is off) it is ``NUMERIC(38,s)``. Wider ones, and negative
  scales (PostgreSQL 15 allows them), are ``PG_NUMERIC``: exact decimal text. The JSON
  converter's ``decimal.format=NUMERIC`` (numbers instead of base64) is read too.
* **VariableScaleDecimal** (PostgreSQL ``numeric`` without a precision) has no bound on its
  digits or scale, so no Iceberg decimal can hold every value: it is ``PG_NUMERIC``, exact
  decimal text, never rounded.
* Anything with an unknown ``name`` is refused (:class:`UnsupportedDebeziumTypeError`, naming
  the type and the column): the caller dead-letters the event rather than guess.

**Without schemas** (``value.converter.schemas.enable=false``) the lines carry no types. Then a
column's type is the one the pipeline declares for it (``column_types``:
``{"public.orders": {"amount": "NUMERIC(10,2)", "placed_at": "io.debezium.time.MicroTimestamp"}}``,
table names as the change rows name them), else STRING. A declaration is a canonical type
name, whose values are taken as they are (so a NUMERIC column needs numbers or decimal text:
``decimal.handling.mode=string`` or ``double``, since base64 bytes cannot be told from text
without the scale), or the name of a Debezium semantic type from the table above, whose
values are converted as with schemas (``org.apache.kafka.connect.data.Decimal(10,2)`` names
the precision and scale base64 decimals need).

Pure Python (no Airflow, no pyspark).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

from airflow_cdc.sources.column_types import (
    MAX_DECIMAL_PRECISION,
    UnsupportedColumnTypeError,
    parse_source_type,
)
from airflow_cdc.sources.debezium.errors import MalformedEventError, UnsupportedDebeziumTypeError

Convert = Callable[[object], object]

_EPOCH_DATE = date(1970, 1, 1)
_EPOCH = datetime(1970, 1, 1)

# Semantic type names (the schema's ``name``).
DATE = "io.debezium.time.Date"
TIME = "io.debezium.time.Time"
MICRO_TIME = "io.debezium.time.MicroTime"
NANO_TIME = "io.debezium.time.NanoTime"
ZONED_TIME = "io.debezium.time.ZonedTime"
TIMESTAMP = "io.debezium.time.Timestamp"
MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
NANO_TIMESTAMP = "io.debezium.time.NanoTimestamp"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
YEAR = "io.debezium.time.Year"
MICRO_DURATION = "io.debezium.time.MicroDuration"
INTERVAL = "io.debezium.time.Interval"
CONNECT_DATE = "org.apache.kafka.connect.data.Date"
CONNECT_TIME = "org.apache.kafka.connect.data.Time"
CONNECT_TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
JSON_TYPE = "io.debezium.data.Json"
UUID_TYPE = "io.debezium.data.Uuid"

# Plain Kafka Connect types. Kafka's JsonConverter spells FLOAT32 and FLOAT64 "float" and
# "double" in the schema part it writes (its JsonSchema names); the Connect names are read too.
_PLAIN = {
    "int8": "INT64", "int16": "INT64", "int32": "INT64", "int64": "INT64",
    "float32": "FLOAT32", "float64": "FLOAT64", "float": "FLOAT32", "double": "FLOAT64",
    "boolean": "BOOL", "string": "STRING", "bytes": "BYTES",
}
# Semantic types whose value is kept as the JSON converter wrote it.
_AS_IS = {
    ZONED_TIME: "STRING",
    YEAR: "INT64",
    MICRO_DURATION: "INT64",
    INTERVAL: "INTERVAL",
    JSON_TYPE: "JSON",
    UUID_TYPE: "UUID",
    "io.debezium.data.Enum": "STRING",
    "io.debezium.data.EnumSet": "STRING",
    "io.debezium.data.Xml": "STRING",
    "io.debezium.data.Ltree": "STRING",
    "io.debezium.data.Bits": "BYTES",
    "io.debezium.data.geometry.Geometry": "JSON",
    "io.debezium.data.geometry.Geography": "JSON",
    "io.debezium.data.geometry.Point": "JSON",
    "io.debezium.data.SparseVector": "JSON",
    "io.debezium.data.DoubleVector": "ARRAY<FLOAT64>",
    "io.debezium.data.FloatVector": "ARRAY<FLOAT32>",
}
_DECLARED_DECIMAL = re.compile(
    r"^org\.apache\.kafka\.connect\.data\.Decimal\s*\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$"
)


@dataclass(frozen=True)
class ColumnConversion:
    """One column's canonical type and how its JSON value becomes a changelog value.

    ``semantic`` is the Debezium/Connect type name the conversion follows (None for plain types
    and declared canonical types).
    """

    column: str
    canonical: str
    convert: Convert
    semantic: str | None = None

    def value(self, raw: object) -> object:
        """``raw`` (a JSON value, None for NULL) converted; errors name the column and the value."""
        if raw is None:
            return None
        try:
            return self.convert(raw)
        except MalformedEventError:
            raise
        except (TypeError, ValueError, ArithmeticError, KeyError, binascii.Error) as exc:
            kind = self.semantic or self.canonical
            raise MalformedEventError(
                f"column {self.column!r}: value {_shown(raw)} is not a {kind} value as the JSON "
                f"converter writes it ({exc})"
            ) from None


# --- conversions -------------------------------------------------------------------------------
def _integer(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def _plain(kind: str) -> Convert:
    if kind.startswith("int"):
        return _integer
    if kind.startswith("float") or kind == "double":
        return _number
    if kind == "boolean":
        return _boolean
    if kind == "bytes":
        return _base64_text
    return _text


def _number(value: object) -> object:
    if isinstance(value, bool):
        raise TypeError("expected a number, got a boolean")
    if isinstance(value, (int, float, Decimal)):
        return value
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
        return float(value)
    raise TypeError(f"expected a number, got {type(value).__name__}")


def _boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {type(value).__name__}")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _base64_text(value: object) -> str:
    """Bytes as the JSON converter writes them (base64), checked and kept as that text."""
    base64.b64decode(_text(value), validate=True)
    return value  # type: ignore[return-value]


def _as_is(value: object) -> object:
    return value


def date_text(days: object) -> str:
    """Days since 1970-01-01 (``io.debezium.time.Date``) as ``YYYY-MM-DD``."""
    return (_EPOCH_DATE + timedelta(days=_integer(days))).isoformat()


def time_text(value: object, per_second: int) -> str:
    """A time of day counted in 1/``per_second`` seconds as ``[-]HH:MM:SS.fraction``.

    Microseconds or coarser give 6 fraction digits, nanoseconds 9. Hours may exceed 23 (MySQL
    ``TIME`` is a duration).
    """
    ticks = _integer(value)
    sign, ticks = ("-", -ticks) if ticks < 0 else ("", ticks)
    seconds, fraction = divmod(ticks, per_second)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    digits = 9 if per_second > 1_000_000 else 6
    fraction_text = str(fraction * (10**digits) // per_second).rjust(digits, "0")
    return f"{sign}{hours:02d}:{minute:02d}:{second:02d}.{fraction_text}"


def wall_clock_text(value: object, per_second: int) -> str:
    """A clock reading counted from the epoch (``io.debezium.time.*Timestamp``), no zone.

    ``YYYY-MM-DDTHH:MM:SS.ffffff`` (nanosecond types: 9 fraction digits).
    """
    ticks = _integer(value)
    seconds, fraction = divmod(ticks, per_second)  # floor: negative ticks count back from 1970
    moment = _EPOCH + timedelta(seconds=seconds)
    digits = 9 if per_second > 1_000_000 else 6
    fraction_text = str(fraction * (10**digits) // per_second).rjust(digits, "0")
    return f"{_clock(moment)}.{fraction_text}"


_ZONED = re.compile(
    r"^(\d{4,})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?"
    r"\s*(Z|z|[+-]\d{2}(?::?\d{2}(?::?\d{2})?)?)$"
)


def _clock(moment: datetime) -> str:
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
        f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
    )


def zoned_timestamp_text(value: object) -> str:
    """``io.debezium.time.ZonedTimestamp`` text (ISO-8601 with ``Z`` or an offset) as the same
    instant in UTC: ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (9 fraction digits when the text had more
    than 6, so no digit is dropped)."""
    match = _ZONED.match(_text(value).strip())
    if not match:
        raise ValueError("expected ISO-8601 date and time with Z or an offset")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    local = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second or 0))
    offset = timedelta(0)
    if zone not in ("Z", "z"):
        sign = -1 if zone[0] == "-" else 1
        parts = re.findall(r"\d{2}", zone[1:])
        offset = sign * timedelta(
            hours=int(parts[0]),
            minutes=int(parts[1]) if len(parts) > 1 else 0,
            seconds=int(parts[2]) if len(parts) > 2 else 0,
        )
    instant = (local - offset).replace(tzinfo=timezone.utc)
    fraction = fraction or ""
    digits = 9 if len(fraction) > 6 else 6
    return f"{_clock(instant)}.{fraction.ljust(digits, '0')}Z"


def decimal_from_unscaled(unscaled: int, scale: int) -> Decimal:
    """``unscaled * 10**-scale`` exactly (no context rounding, whatever the digit count)."""
    sign = 1 if unscaled < 0 else 0
    digits = tuple(int(d) for d in str(abs(unscaled)))
    return Decimal((sign, digits, -scale))


def decimal_value(value: object, scale: int) -> Decimal:
    """A ``Decimal`` value: base64 big-endian two's-complement unscaled bytes (the JSON
    converter's default) or a number (``decimal.format=NUMERIC``), exactly."""
    if isinstance(value, bool):
        raise TypeError("expected base64 bytes or a number, got a boolean")
    if isinstance(value, (int, Decimal)):
        return Decimal(value)
    if isinstance(value, float):
        raise TypeError("a float cannot carry an exact decimal; use decimal.format=BASE64 or NUMERIC")
    raw = base64.b64decode(_text(value), validate=True)
    return decimal_from_unscaled(int.from_bytes(raw, "big", signed=True), scale)


def variable_scale_decimal(value: object) -> Decimal:
    """``io.debezium.data.VariableScaleDecimal`` (``{"scale": s, "value": base64}``), exactly."""
    if not isinstance(value, Mapping):
        raise TypeError(f"expected an object with scale and value, got {type(value).__name__}")
    return decimal_value(value["value"], _integer(value["scale"]))


def _decimal_type(precision: int | None, scale: int) -> str:
    if precision is None:
        precision = MAX_DECIMAL_PRECISION
    if 1 <= precision <= MAX_DECIMAL_PRECISION and 0 <= scale <= precision:
        return f"NUMERIC({precision},{scale})"
    return "PG_NUMERIC"  # exact decimal text: no Iceberg decimal holds it


_SEMANTIC: dict[str, tuple[str, Convert]] = {
    DATE: ("DATE", date_text),
    CONNECT_DATE: ("DATE", date_text),
    TIME: ("STRING", lambda v: time_text(v, 1_000)),
    CONNECT_TIME: ("STRING", lambda v: time_text(v, 1_000)),
    MICRO_TIME: ("STRING", lambda v: time_text(v, 1_000_000)),
    NANO_TIME: ("STRING", lambda v: time_text(v, 1_000_000_000)),
    TIMESTAMP: ("DATETIME", lambda v: wall_clock_text(v, 1_000)),
    CONNECT_TIMESTAMP: ("DATETIME", lambda v: wall_clock_text(v, 1_000)),
    MICRO_TIMESTAMP: ("DATETIME", lambda v: wall_clock_text(v, 1_000_000)),
    NANO_TIMESTAMP: ("DATETIME", lambda v: wall_clock_text(v, 1_000_000_000)),
    ZONED_TIMESTAMP: ("TIMESTAMP", zoned_timestamp_text),
    VARIABLE_SCALE_DECIMAL: ("PG_NUMERIC", variable_scale_decimal),
}
_SEMANTIC.update({name: (canonical, _as_is) for name, canonical in _AS_IS.items()})
SEMANTIC_TYPES = frozenset(_SEMANTIC) | {CONNECT_DECIMAL}


# --- from the schema part ----------------------------------------------------------------------
def column_conversion(column: str, schema: Mapping) -> ColumnConversion:
    """The conversion of one column from its Kafka Connect field schema (``{"type": "int32",
    "name": "io.debezium.time.Date", "field": ...}``); unknown semantic types are refused."""
    if not isinstance(schema, Mapping):
        raise MalformedEventError(f"column {column!r} has no schema object but {_shown(schema)}")
    kind, name = schema.get("type"), schema.get("name")
    for part, text in (("type", kind), ("name", name)):
        if text is not None and not isinstance(text, str):
            raise MalformedEventError(
                f"column {column!r}: schema {part} {_shown(text)} is not text (Kafka Connect "
                f"names types with strings)")
    if name == CONNECT_DECIMAL:
        parameters = schema.get("parameters") or {}
        try:
            scale = int(parameters["scale"])
            precision = parameters.get("connect.decimal.precision")
            precision = None if precision is None else int(precision)
        except (KeyError, TypeError, ValueError):
            raise MalformedEventError(
                f"column {column!r}: Decimal schema has no integer scale parameter "
                f"({_shown(parameters)}); Kafka Connect always writes one"
            ) from None
        return ColumnConversion(
            column, _decimal_type(precision, scale), lambda v, s=scale: decimal_value(v, s), name
        )
    if name is not None and name in _SEMANTIC:
        canonical, convert = _SEMANTIC[name]
        if name in ("io.debezium.data.DoubleVector", "io.debezium.data.FloatVector"):
            convert = _list_of(_number)
        return ColumnConversion(column, canonical, convert, name)
    if kind == "array":
        element = column_conversion(column, schema.get("items") or {})
        if element.canonical.startswith("ARRAY<"):
            # Iceberg columns here cannot nest arrays: keep the nested lists as JSON.
            return ColumnConversion(column, "JSON", _list_of(element.convert), name)
        return ColumnConversion(column, f"ARRAY<{element.canonical}>", _list_of(element.convert), name)
    if name is not None:
        raise UnsupportedDebeziumTypeError(
            f"column {column!r} has Debezium type {name!r} ({kind}), which has no canonical type "
            f"here (known: {', '.join(sorted(SEMANTIC_TYPES))}): convert it in the connector "
            f"(a converter or SMT), exclude the column (column.exclude.list), or add its mapping "
            f"to airflow_cdc.sources.debezium.types"
        )
    if kind in _PLAIN:
        return ColumnConversion(column, _PLAIN[kind], _plain(kind))
    if kind in ("map", "struct"):
        return ColumnConversion(column, "JSON", _as_is)
    raise UnsupportedDebeziumTypeError(
        f"column {column!r} has Kafka Connect type {kind!r}, which is not a Connect type "
        f"({', '.join(sorted(_PLAIN))}, array, map, struct)"
    )


def row_conversions(struct_schema: Mapping | None) -> dict[str, ColumnConversion]:
    """Each column of a row struct schema (the envelope's ``before``/``after`` field) with its
    conversion; ``{}`` for None. A refusal names the first column that has no canonical type."""
    if struct_schema is None:
        return {}
    fields = struct_schema.get("fields") if isinstance(struct_schema, Mapping) else None
    if not isinstance(fields, list):
        raise MalformedEventError(
            f"row schema {_shown(struct_schema)} is not a struct with fields: the value schema "
            f"of a Debezium event has before/after structs"
        )
    out = {}
    for field_schema in fields:
        column = field_schema.get("field") if isinstance(field_schema, Mapping) else None
        if not isinstance(column, str):
            raise MalformedEventError(f"row schema field {_shown(field_schema)} has no field name")
        out[column] = column_conversion(column, field_schema)
    return out


def _list_of(convert: Convert) -> Convert:
    def each(value: object) -> list:
        if not isinstance(value, list):
            raise TypeError(f"expected an array, got {type(value).__name__}")
        return [None if item is None else convert(item) for item in value]

    return each


# --- without schemas ---------------------------------------------------------------------------
def declared_conversion(column: str, declared: str | None) -> ColumnConversion:
    """The conversion of a column of a schemaless line: by its declared type (a canonical name,
    or a Debezium semantic type name: module docstring), STRING when nothing is declared."""
    if declared is None:
        return ColumnConversion(column, "STRING", _as_is)
    text = str(declared).strip()
    decimal = _DECLARED_DECIMAL.match(text)
    if decimal:
        precision, scale = int(decimal.group(1)), int(decimal.group(2))
        return ColumnConversion(
            column, _decimal_type(precision, scale), lambda v, s=scale: decimal_value(v, s), CONNECT_DECIMAL
        )
    if text == CONNECT_DECIMAL:
        raise UnsupportedDebeziumTypeError(
            f"column {column!r} is declared {text!r} without its precision and scale: base64 "
            f"decimals need the scale; declare e.g. 'org.apache.kafka.connect.data.Decimal(10,2)'"
        )
    if text in _SEMANTIC:
        canonical, convert = _SEMANTIC[text]
        return ColumnConversion(column, canonical, convert, text)
    try:
        canonical_type = parse_source_type(text)
    except UnsupportedColumnTypeError as exc:
        raise UnsupportedDebeziumTypeError(
            f"column {column!r} is declared {declared!r}, which is neither a canonical type nor "
            f"a Debezium semantic type ({exc}); e.g. 'NUMERIC(10,2)', 'DATETIME', "
            f"'io.debezium.time.MicroTimestamp'"
        ) from None
    return ColumnConversion(column, str(canonical_type), _as_is)


def declared_column_types(column_types: Mapping | None, stream_id: str = "") -> dict[str, dict[str, str]]:
    """A pipeline's ``column_types`` (table -> column -> type) checked, for schemaless lines.

    Called when the DAG is parsed, so a bad declaration fails there, naming the table, the
    column, the value and the fix.
    """
    where = f"column_types of Debezium stream {stream_id!r}" if stream_id else "column_types"
    if column_types is None:
        return {}
    if not isinstance(column_types, Mapping):
        raise UnsupportedDebeziumTypeError(
            f"{where} must map tables to {{column: type}}, got {type(column_types).__name__}: e.g. "
            f'{{"public.orders": {{"amount": "NUMERIC(10,2)"}}}}'
        )
    out: dict[str, dict[str, str]] = {}
    for table, columns in column_types.items():
        if not isinstance(columns, Mapping):
            raise UnsupportedDebeziumTypeError(
                f"{where}: table {table!r} must map columns to types, got {_shown(columns)}"
            )
        out[str(table)] = {}
        for column, declared in columns.items():
            try:
                declared_conversion(str(column), declared)
            except UnsupportedDebeziumTypeError as exc:
                raise UnsupportedDebeziumTypeError(f"{where}, table {table!r}: {exc}") from None
            out[str(table)][str(column)] = str(declared).strip()
    return out


def _shown(value: object, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
