"""Canonical column types -> the Spark/Iceberg SQL types of target columns, and which changes fit.

Every source names its types its own way; apply types a target column from the type the
change row declares (``ChangeRow.column_types``, the changelog's ``column_types_json``).
Change rows declare CANONICAL types, defined here: each source maps its own type names onto
them when it builds its change rows (:meth:`ChangeSource.canonical_type`; Spanner's type
objects in :mod:`airflow_cdc.sources.spanner.types`, the names of Datastream's source
databases in :mod:`airflow_cdc.sources.datastream.types`), so every source lands in the same
Iceberg types. This module knows no source's spellings; the apply job imports it too.

A canonical type name is the ``str()`` of a :class:`ColumnType`: a code of
:data:`SPARK_TYPES` (``INT64``, ``DATETIME``, ``PG_NUMERIC`` ...), ``NUMERIC(p,s)``, or
``ARRAY<`` one of those ``>``. :func:`parse_source_type` reads exactly these; anything else
is refused, naming the value and saying that its source must map it.
:func:`read_type_name` is the grammar sources share for their own type names (lengths,
precisions, ``ARRAY<...>``, ``type[]``), given each source's own table of names.

Choices, and why:

* ``NUMERIC`` is ``decimal(38,9)``: exactly Spanner's NUMERIC (precision 38, scale 9).
  ``NUMERIC(p,s)`` keeps its precision and scale (``decimal(p,s)``, 1 <= p <= 38 and
  0 <= s <= p, Iceberg's limits), so a source's ``DECIMAL(10,2)`` lands as ``decimal(10,2)``,
  never as a float. ``PG_NUMERIC`` (PostgreSQL ``numeric``, which allows far more digits and
  NaN) is kept as exact decimal text (``string``) rather than rounded.
* ``JSON``/``PG_JSONB`` are ``string`` holding the JSON text; Iceberg has no JSON type.
* ``TIMESTAMP`` is ``timestamp`` (Iceberg ``timestamptz``, microseconds): Spanner's
  nanoseconds are truncated, as Spark and Iceberg v2 cannot hold them.
* ``DATETIME`` (a wall-clock date and time without a zone: MySQL ``DATETIME``, SQL Server
  ``DATETIME2``, PostgreSQL ``timestamp without time zone``, Avro ``local-timestamp-*`` and
  Datastream's ``datetime`` record) is ``timestamp_ntz`` (Iceberg ``timestamp``): reading it
  as an instant would invent a zone the source never had.
* ``BYTES``/``PROTO`` are ``binary`` (base64 in the change row's JSON).
* ``STRUCT`` has no canonical type: Spanner tables cannot store it, so a change row declaring
  it is bad.

Pure Python (no pyspark, no Airflow): the Airflow side may check types before any job runs.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from airflow_cdc.model import CdcError


class UnsupportedColumnTypeError(CdcError, ValueError):
    """A type has no Spark/Iceberg counterpart, is not canonical, or cannot be parsed."""


# Canonical code -> Spark SQL type (spelled as Spark's ``DataType.simpleString`` spells it, so a
# target table's schema compares equal as text).
SPARK_TYPES: dict[str, str] = {
    "BOOL": "boolean",
    "INT64": "bigint",
    "FLOAT32": "float",
    "FLOAT64": "double",
    "NUMERIC": "decimal(38,9)",
    "PG_NUMERIC": "string",
    "STRING": "string",
    "JSON": "string",
    "PG_JSONB": "string",
    "BYTES": "binary",
    "PROTO": "binary",
    "ENUM": "bigint",
    "PG_OID": "bigint",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
    "DATETIME": "timestamp_ntz",
    "INTERVAL": "string",
    "UUID": "string",
}
MAX_DECIMAL_PRECISION = 38  # Iceberg's (and Spark's) widest decimal

# Canonical names, exactly as ColumnType.__str__ writes them.
_CANONICAL_ARRAY = re.compile(r"^ARRAY<(.+)>$")
_CANONICAL_DECIMAL = re.compile(r"^NUMERIC\((\d+),(-?\d+)\)$")
# Source spellings (read_type_name).
_ARRAY_TEXT = re.compile(r"^ARRAY\s*<\s*(.+?)\s*>$", re.IGNORECASE)
# A type name with arguments: "VARCHAR(20)", "NUMERIC(10, 2)", "TIMESTAMP(6) WITH TIME ZONE".
_ARGUMENTS = re.compile(r"^([^(]*?)\s*\(\s*([^)]*?)\s*\)(.*)$")
_DECIMAL_ARGUMENTS = re.compile(r"^(\d+)(?:\s*,\s*(-?\d+))?$")
_LENGTH_ARGUMENT = re.compile(r"^(MAX|\d+)$", re.IGNORECASE)


@dataclass(frozen=True)
class ColumnType:
    """A canonical type: a code from :data:`SPARK_TYPES`, or ARRAY of one.

    ``precision``/``scale`` are set only for ``NUMERIC(p,s)``; a bare ``NUMERIC`` is Spanner's.
    ``str()`` is the canonical name (``NUMERIC(10,2)``, ``ARRAY<DATETIME>``), which
    :func:`parse_source_type` reads back to an equal value: the changelog records it.
    """

    code: str
    element: ColumnType | None = None
    precision: int | None = None
    scale: int | None = None

    @property
    def spark_sql(self) -> str:
        """The Spark SQL type of a target column holding this type."""
        if self.code == "ARRAY":
            assert self.element is not None
            return f"array<{self.element.spark_sql}>"
        if self.precision is not None:
            return f"decimal({self.precision},{self.scale})"
        return SPARK_TYPES[self.code]

    def __str__(self) -> str:
        if self.code == "ARRAY":
            return f"ARRAY<{self.element}>"
        if self.precision is not None:
            return f"{self.code}({self.precision},{self.scale})"
        return self.code


def decimal_type(precision: int, scale: int, original: object = None) -> ColumnType:
    """``NUMERIC(precision,scale)``, refused with the fix when Iceberg cannot hold it."""
    shown = original if original is not None else f"NUMERIC({precision},{scale})"
    if not 1 <= precision <= MAX_DECIMAL_PRECISION:
        raise UnsupportedColumnTypeError(
            f"source type {shown!r} has precision {precision}: Iceberg decimals hold 1 to "
            f"{MAX_DECIMAL_PRECISION} digits; declare a precision in that range, or STRING to "
            f"keep wider values as exact text"
        )
    if not 0 <= scale <= precision:
        raise UnsupportedColumnTypeError(
            f"source type {shown!r} has scale {scale}: the scale must be from 0 to the "
            f"precision ({precision}); declare e.g. NUMERIC({precision},{min(2, precision)})"
        )
    return ColumnType("NUMERIC", precision=precision, scale=scale)


def array_type(element: ColumnType, original: object = None) -> ColumnType:
    """``ARRAY<element>``; arrays of arrays are refused (Iceberg columns cannot nest them here)."""
    if element.code == "ARRAY":
        shown = original if original is not None else f"ARRAY<{element}>"
        raise UnsupportedColumnTypeError(
            f"source type {shown!r} is an array of arrays, which Spanner tables cannot "
            f"store: check the change row's column_types"
        )
    return ColumnType("ARRAY", element)


# --- canonical names (what change rows declare) -------------------------------------------
def parse_source_type(source_type: object) -> ColumnType:
    """The :class:`ColumnType` of a canonical type name (``INT64``, ``NUMERIC(10,2)``,
    ``ARRAY<DATETIME>``, ``PG_NUMERIC`` ...); any other value is refused.

    Change rows declare canonical names only: a source maps its own type names first
    (:meth:`ChangeSource.canonical_type`).
    """
    if isinstance(source_type, ColumnType):
        return source_type
    if not isinstance(source_type, str):
        raise UnsupportedColumnTypeError(_not_canonical(source_type))
    return _parse_canonical(source_type.strip(), source_type)


def spark_sql_type(source_type: object) -> str:
    """The Spark/Iceberg SQL type (``bigint``, ``array<string>`` ...) of a canonical type name."""
    return parse_source_type(source_type).spark_sql


def _parse_canonical(text: str, original: object) -> ColumnType:
    array = _CANONICAL_ARRAY.match(text)
    if array:
        return array_type(_parse_canonical(array.group(1), original), original)
    decimal = _CANONICAL_DECIMAL.match(text)
    if decimal:
        return decimal_type(int(decimal.group(1)), int(decimal.group(2)), original)
    if text in SPARK_TYPES:
        return ColumnType(text)
    raise UnsupportedColumnTypeError(_not_canonical(original))


def _not_canonical(original: object) -> str:
    text = original.strip().upper() if isinstance(original, str) else ""
    if text.startswith("STRUCT") or "<STRUCT" in text.replace(" ", ""):
        return (
            f"column type {original!r} is a STRUCT, which cannot be a table column (Spanner "
            f"tables cannot store it): check the change row's column_types"
        )
    return (
        f"column type {original!r} is not a canonical type name ({', '.join(sorted(SPARK_TYPES))}, "
        f"NUMERIC(p,s), ARRAY<...>): the source must map its own type names to canonical ones "
        f"(ChangeSource.canonical_type) when it builds change rows"
    )


# --- the grammar of source type names (each source brings its own names) ------------------
def read_type_name(
    text: str,
    aliases: Mapping[str, str],
    original: object = None,
    *,
    codes: Collection[str] = SPARK_TYPES,
    known: str = "",
) -> ColumnType:
    """The canonical type of a type name as a source spells it, by that source's table.

    ``aliases`` maps the source's names (upper case, single spaces, without arguments:
    ``"VARCHAR(20)"`` is looked up as ``"VARCHAR"``) to canonical codes; a name that is no
    alias must be one of ``codes`` itself. Case and spacing are free; ``ARRAY<t>`` and
    ``t[]`` are arrays; a length or fractional-second precision (``STRING(MAX)``,
    ``TIMESTAMP(6) WITH TIME ZONE``) changes no type; ``NUMERIC(p,s)`` keeps its precision
    and scale. ``known`` says, in the error for an unknown name, which names the source takes.
    """
    original = text if original is None else original
    text = text.strip()
    array = _ARRAY_TEXT.match(text)
    if array:
        return array_type(read_type_name(array.group(1), aliases, original, codes=codes, known=known), original)
    if text.endswith("[]"):  # PostgreSQL array spelling: bigint[]
        return array_type(read_type_name(text[:-2], aliases, original, codes=codes, known=known), original)
    arguments = None
    with_arguments = _ARGUMENTS.match(text)
    if with_arguments:
        text, arguments = f"{with_arguments.group(1)} {with_arguments.group(3)}", with_arguments.group(2)
    name = " ".join(text.upper().split())
    code = aliases.get(name, name if name in codes else None)
    if code is None or code not in SPARK_TYPES:
        raise UnsupportedColumnTypeError(
            f"source type {original!r} is not a known type"
            + (f": {known}" if known else ": map it to a canonical type")
        )
    if arguments is None:
        return ColumnType(code)
    if code == "NUMERIC":
        numbers = _DECIMAL_ARGUMENTS.match(arguments)
        if not numbers:
            raise UnsupportedColumnTypeError(
                f"source type {original!r} has arguments ({arguments}) that are not a precision "
                f"and scale: write e.g. NUMERIC(10,2)"
            )
        return decimal_type(int(numbers.group(1)), int(numbers.group(2) or 0), original)
    if not _LENGTH_ARGUMENT.match(arguments) or code == "PG_NUMERIC":
        raise UnsupportedColumnTypeError(
            f"source type {original!r} has arguments ({arguments}) its type does not take: "
            f"only a length (VARCHAR(20), STRING(MAX)) or, for NUMERIC/DECIMAL, a precision "
            f"and scale"
        )
    return ColumnType(code)  # a length or fractional-second precision changes no Spark type


# --- type changes --------------------------------------------------------------------------
_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")
_ARRAY_SQL = re.compile(r"^array<(.+)>$")
# Iceberg's allowed promotions (int -> long, float -> double), in Spark SQL spelling.
_PROMOTIONS = {("int", "bigint"), ("float", "double")}
# Integers as decimals: (integer digits, scale 0). Their values always fit a decimal with at
# least as many integer digits, so an integer column declared by one change (a JSON ``20``)
# and a decimal declared by another (``20.50``) can share a decimal column.
_INTEGER_DIGITS = {"bigint": 19, "int": 10}


def merged_spark_type(existing: str, incoming: str) -> str | None:
    """The type a column of Spark type ``existing`` must have to also hold ``incoming`` values.

    Returns ``existing`` when incoming values fit as they are (same type, or a narrower one:
    ``float`` into ``double``), the widened type when Iceberg can promote the column
    (``float`` -> ``double``, ``int`` -> ``bigint``, a decimal's precision), and None when
    the change is incompatible (for example ``bigint`` -> ``string``): such values cannot be
    stored without rewriting the column, so apply dead-letters them.

    Decimals: Iceberg never changes a column's scale, so incoming values need a scale no
    larger than the column's (else they would be rounded: incompatible). Their integer
    digits are made room for by widening the precision, up to 38; beyond that the column
    stays ``decimal(38,s)`` and a value that really has more integer digits fails apply's
    exact conversion and is dead-lettered by value. Refusing on the declared precision alone
    would refuse ``decimal(38,1)`` values (``20.5``) for a ``decimal(38,2)`` column that
    holds every one of them exactly, where the same changes in one window share a column
    (:func:`common_spark_type`). Integers count as decimals of scale 0.
    """
    existing, incoming = _normal(existing), _normal(incoming)
    if existing == incoming:
        return existing
    if (incoming, existing) in _PROMOTIONS:
        return existing
    if (existing, incoming) in _PROMOTIONS:
        return incoming
    old_dec, new_dec = _decimal_digits(existing), _decimal_digits(incoming)
    if old_dec and new_dec and _DECIMAL.match(existing):
        (old_integers, scale), (new_integers, new_scale) = old_dec, new_dec
        if new_scale > scale:
            return None
        return _decimal_sql(max(old_integers, new_integers), scale)
    old_arr, new_arr = _ARRAY_SQL.match(existing), _ARRAY_SQL.match(incoming)
    if old_arr and new_arr and merged_spark_type(old_arr.group(1), new_arr.group(1)) == _normal(
        old_arr.group(1)
    ):
        # Incoming elements fit the existing element type; promoting an element is not done.
        return existing
    return None


def common_spark_type(first: str, second: str) -> str | None:
    """The type of a NEW column that must hold values of both Spark types, or None if none can.

    Used when one window declares several types for a column the target does not have yet:
    unlike an existing column, the new column's scale is still free, so ``decimal(38,2)``
    and ``decimal(38,1)`` (or ``bigint``) make ``decimal(38,2)``: the larger scale, room for
    the most integer digits, at most 38 digits (as Spark widens decimals; values that still
    do not fit are dead-lettered by apply's exact conversion). Float and double make double;
    arrays take the common type of their elements.
    """
    first, second = _normal(first), _normal(second)
    if first == second:
        return first
    for existing, incoming in ((first, second), (second, first)):
        if (incoming, existing) in _PROMOTIONS:
            return existing
    one, other = _decimal_digits(first), _decimal_digits(second)
    if one and other and (_DECIMAL.match(first) or _DECIMAL.match(second)):
        return _decimal_sql(max(one[0], other[0]), max(one[1], other[1]))
    first_arr, second_arr = _ARRAY_SQL.match(first), _ARRAY_SQL.match(second)
    if first_arr and second_arr:
        element = common_spark_type(first_arr.group(1), second_arr.group(1))
        return None if element is None else f"array<{element}>"
    return None


def _decimal_digits(sql_type: str) -> tuple[int, int] | None:
    """(integer digits, scale) of a decimal or integer Spark type, else None."""
    decimal = _DECIMAL.match(sql_type)
    if decimal:
        precision, scale = int(decimal.group(1)), int(decimal.group(2))
        return precision - scale, scale
    if sql_type in _INTEGER_DIGITS:
        return _INTEGER_DIGITS[sql_type], 0
    return None


def _decimal_sql(integers: int, scale: int) -> str:
    return f"decimal({min(MAX_DECIMAL_PRECISION, max(1, integers + scale))},{scale})"


def _normal(sql_type: str) -> str:
    text = "".join(sql_type.lower().split())
    return {"long": "bigint", "integer": "int", "bool": "boolean", "real": "float"}.get(text, text)
