"""Column values of the tables: Python forms, wire forms, ordering, and the commit timestamp.

The store keeps Python values (``str``, ``int``, ``float``, ``bool``, ``Decimal``, JSON as
``dict``/``list``/scalars, aware UTC ``datetime`` with microseconds, ``date``, ``bytes``,
``list`` for arrays with ``None`` elements allowed, ``None`` for NULL). On the wire they travel
as Spanner sends them (``google.protobuf.Value``): INT64 and NUMERIC as decimal strings,
FLOAT64 as numbers (``"NaN"``, ``"Infinity"``, ``"-Infinity"`` as strings), BYTES as base64,
TIMESTAMP as RFC 3339 UTC text with a ``Z``, DATE as ``YYYY-MM-DD``, JSON as its text, ARRAY as
a ``list_value``.

``spanner.commit_timestamp()`` (the client's ``COMMIT_TIMESTAMP``) written into a commit
timestamp column becomes :data:`PENDING` until the commit picks its timestamp.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo

from google.cloud.spanner_v1.types import type as spanner_type
from google.protobuf import struct_pb2

from airflow_cdc_emulators.common import format_ts

from ..schema import POSTGRESQL, SpannerType, numeric_text
from .status import SpannerStatusError, invalid

COMMIT_TIMESTAMP = "spanner.commit_timestamp()"
# GoogleSQL and PostgreSQL-dialect Spanner read a time zone-less timestamp text in this zone.
DEFAULT_TIME_ZONE = ZoneInfo("America/Los_Angeles")
_TypeCode = spanner_type.TypeCode
_PG_ANNOTATIONS = {"NUMERIC": spanner_type.TypeAnnotationCode.PG_NUMERIC,
                   "JSON": spanner_type.TypeAnnotationCode.PG_JSONB}  # fmt: skip
_TIMESTAMP_TEXT = re.compile(
    r"^\s*(\d{4}-\d{1,2}-\d{1,2})(?:[T ](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|z|UTC|[+-]\d{1,2}(?::?\d{2})?)?\s*$"
)


class _Pending:
    """The value of a commit timestamp column until its transaction commits."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return COMMIT_TIMESTAMP

    def __reduce__(self):
        return (_Pending, ())


PENDING = _Pending()


# --- Python values ----------------------------------------------------------------------------
def python_value(spanner: SpannerType, value: Any, where: str) -> Any:
    """Check (and normalise) a Python value written into a column of type ``spanner``.

    ``where`` names the column for messages (``Orders.Amount``). The commit timestamp
    placeholder in a TIMESTAMP column comes back as :data:`PENDING`; whether the column allows
    it is the caller's check.
    """
    if value is None or value is PENDING:
        return value
    if spanner.element is not None:
        if not isinstance(value, (list, tuple)):
            raise _mismatch(where, spanner, value)
        return [python_value(spanner.element, item, where) for item in value]
    code = spanner.code
    if code == "TIMESTAMP":
        if value == COMMIT_TIMESTAMP:
            return PENDING
        if isinstance(value, datetime) and value.tzinfo is not None:
            return _utc_micros(value)
        if isinstance(value, str):
            return parse_timestamp(value, where)
        raise _mismatch(where, spanner, value)
    if code == "STRING" and isinstance(value, str):
        return value
    if code == "INT64" and isinstance(value, int) and not isinstance(value, bool):
        if not -(2**63) <= value < 2**63:
            raise invalid(f"Value {value} of {where} is out of the INT64 range")
        return value
    if code == "FLOAT64" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if code == "BOOL" and isinstance(value, bool):
        return value
    if code == "NUMERIC" and isinstance(value, (Decimal, int, str)) and not isinstance(value, bool):
        try:
            return Decimal(value)
        except InvalidOperation:
            raise _mismatch(where, spanner, value) from None
    if code == "JSON":
        return _json_value(value, where)
    if code == "DATE" and isinstance(value, date) and not isinstance(value, datetime):
        return value
    if code == "BYTES" and isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise _mismatch(where, spanner, value)


def _json_value(value: Any, where: str) -> Any:
    serialize = getattr(value, "serialize", None)  # the client's JsonObject
    if callable(serialize):
        text = serialize()
        return None if text is None else json.loads(text)
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        raise invalid(f"Value {value!r} of {where} is not JSON") from None


def _mismatch(where: str, spanner: SpannerType, value: Any) -> SpannerStatusError:
    return invalid(
        f"Invalid value for column {where}: expected {spanner}, got "
        f"{type(value).__name__} {value!r}"
    )


def _utc_micros(value: datetime) -> datetime:
    """An aware datetime in UTC, plain ``datetime`` (nanoseconds of a subclass dropped)."""
    utc = value.astimezone(timezone.utc)
    return datetime(
        utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second, utc.microsecond,
        tzinfo=timezone.utc,
    )  # fmt: skip


def parse_timestamp(text: str, where: str, zone=DEFAULT_TIME_ZONE) -> datetime:
    """Timestamp text as Spanner reads it: RFC 3339, a space for ``T``, a date alone, or no
    zone (then ``zone``, America/Los_Angeles as Spanner); nanoseconds are cut to microseconds."""
    match = _TIMESTAMP_TEXT.match(text)
    if not match:
        raise invalid(f"Invalid timestamp {text!r} for {where}: use e.g. 2025-01-06T08:00:00Z")
    day, hour, minute, second, fraction, offset = match.groups()
    try:
        year, month, dom = (int(p) for p in day.split("-"))
        micros = int((fraction or "0")[:6].ljust(6, "0"))
        naive = datetime(
            year, month, dom, int(hour or 0), int(minute or 0), int(second or 0), micros
        )
    except ValueError:
        raise invalid(f"Invalid timestamp {text!r} for {where}: not a date and time") from None
    if offset is None:
        aware = naive.replace(tzinfo=zone)
    elif offset in ("Z", "z", "UTC"):
        aware = naive.replace(tzinfo=timezone.utc)
    else:
        sign = -1 if offset[0] == "-" else 1
        digits = offset[1:].replace(":", "")
        hours, minutes = (
            (int(digits), 0) if len(digits) <= 2 else (int(digits[:-2]), int(digits[-2:]))
        )
        aware = naive.replace(tzinfo=timezone(sign * timedelta(hours=hours, minutes=minutes)))
    return _utc_micros(aware)


# --- the wire ---------------------------------------------------------------------------------
def from_wire(spanner: SpannerType, value: struct_pb2.Value, where: str) -> Any:
    """A ``google.protobuf.Value`` as the client sends it, read as a value of ``spanner``."""
    kind = value.WhichOneof("kind")
    if kind in (None, "null_value"):
        return None
    if spanner.element is not None:
        if kind != "list_value":
            raise invalid(f"Invalid value for column {where}: expected {spanner}, got {kind}")
        return [from_wire(spanner.element, item, where) for item in value.list_value.values]
    code = spanner.code
    try:
        if code == "BOOL":
            if kind != "bool_value":
                raise ValueError
            return value.bool_value
        if code == "FLOAT64":
            if kind == "number_value":
                return value.number_value
            return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[
                value.string_value
            ]
        if kind == "number_value" and code in ("INT64", "NUMERIC"):
            number = value.number_value
            return int(number) if code == "INT64" and number.is_integer() else Decimal(repr(number))
        if kind != "string_value":
            raise ValueError
        text = value.string_value
        if code == "STRING":
            return text
        if code == "INT64":
            return int(text)
        if code == "NUMERIC":
            return Decimal(text)
        if code == "JSON":
            return json.loads(text)
        if code == "TIMESTAMP":
            return PENDING if text == COMMIT_TIMESTAMP else parse_timestamp(text, where)
        if code == "DATE":
            return date.fromisoformat(text)
        return base64.b64decode(text, validate=True)  # BYTES
    except (ValueError, KeyError, InvalidOperation, binascii.Error):
        shown = getattr(value, kind)
        raise invalid(f"Invalid value for {where}: expected {spanner}, got {shown!r}") from None


def to_wire(spanner: SpannerType, value: Any) -> struct_pb2.Value:
    """A Python value as Spanner sends it in a result set."""
    if value is None:
        return struct_pb2.Value(null_value=struct_pb2.NULL_VALUE)
    if spanner.element is not None:
        return struct_pb2.Value(
            list_value=struct_pb2.ListValue(values=[to_wire(spanner.element, v) for v in value])
        )
    code = spanner.code
    if code == "STRING":
        return struct_pb2.Value(string_value=value)
    if code == "BOOL":
        return struct_pb2.Value(bool_value=value)
    if code == "FLOAT64":
        if math.isnan(value):
            return struct_pb2.Value(string_value="NaN")
        if math.isinf(value):
            return struct_pb2.Value(string_value="Infinity" if value > 0 else "-Infinity")
        return struct_pb2.Value(number_value=value)
    return struct_pb2.Value(string_value=text_value(spanner, value))


def text_value(spanner: SpannerType, value: Any) -> str:
    """The text Spanner sends for a scalar of a string-carried type (INT64, TIMESTAMP, ...)."""
    code = spanner.code
    if code in ("INT64", "STRING"):
        return str(value)
    if code == "NUMERIC":
        return numeric_text(value)
    if code == "JSON":
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    if code == "TIMESTAMP":
        return format_ts(value)
    if code == "DATE":
        return value.isoformat()
    if code == "BYTES":
        return base64.b64encode(value).decode("ascii")
    if code == "BOOL":
        return "true" if value else "false"
    return repr(value)


def wire_type(spanner: SpannerType, dialect: str) -> spanner_type.Type:
    """The result metadata ``Type`` of a column, with PG_NUMERIC / PG_JSONB in PostgreSQL."""
    if spanner.element is not None:
        return spanner_type.Type(
            code=_TypeCode.ARRAY, array_element_type=wire_type(spanner.element, dialect)
        )
    described = spanner_type.Type(code=getattr(_TypeCode, spanner.code))
    if dialect == POSTGRESQL and spanner.code in _PG_ANNOTATIONS:
        described.type_annotation = _PG_ANNOTATIONS[spanner.code]
    return described


def type_from_wire(type_pb) -> SpannerType | None:
    """A request's ``param_types`` entry (raw ``google.spanner.v1.Type``) as a SpannerType."""
    name = _TypeCode(type_pb.code).name
    if name == "TYPE_CODE_UNSPECIFIED":
        return None
    if name == "ARRAY":
        element = type_from_wire(type_pb.array_element_type)
        return None if element is None else SpannerType("ARRAY", element)
    try:
        return SpannerType(name)
    except ValueError:
        raise invalid(
            f"Query parameters of type {name} are not supported by the emulator"
        ) from None


# --- ordering ---------------------------------------------------------------------------------
def sort_value(value: Any) -> tuple:
    """A sort key for one key part: NULL first, then values, then a pending commit timestamp."""
    if value is None:
        return (0, 0)
    if value is PENDING:
        return (2, 0)
    if isinstance(value, float) and math.isnan(value):
        return (1, -math.inf, 0)  # NaN sorts before every number, as in Spanner
    return (1, value)


def key_sort(key: tuple) -> tuple:
    return tuple(sort_value(part) for part in key)


def has_pending(values) -> bool:
    return any(v is PENDING for v in values)
