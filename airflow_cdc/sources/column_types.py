"""Source column types -> the Spark/Iceberg SQL types of target columns, and which changes fit.

Every source names its types its own way; apply types a target column from the type the
change row declares (``ChangeRow.column_types``). This module is the one place that turns a
source type into a Spark SQL type, so every source lands in the same Iceberg types. It
lives in ``sources/`` because the adapters map their type names onto it (a source never
imports the pipeline); the apply job imports it too:

* Spanner type codes, as change streams give them: a name (``"INT64"``, ``"ARRAY<STRING>"``,
  DDL spellings such as ``"STRING(MAX)"``), the API's type object
  (``{"code": "ARRAY", "array_element_type": {"code": "INT64"}}``, numeric codes too), or a
  whole ``column_types`` entry (``{"name": ..., "type": {...}, ...}``). PostgreSQL-dialect
  databases annotate codes (``PG_NUMERIC``, ``PG_JSONB``, ``PG_OID``).
* Datastream and Debezium adapters map their type names onto the same canonical codes (see
  :data:`ALIASES`), so they call the same :func:`spark_sql_type`.

Choices, and why:

* ``NUMERIC`` is ``decimal(38,9)``: exactly Spanner's NUMERIC (precision 38, scale 9).
  ``NUMERIC(p,s)`` / ``DECIMAL(p,s)`` keep their precision and scale (``decimal(p,s)``, 1 <= p
  <= 38 and 0 <= s <= p, Iceberg's limits), so a source's ``DECIMAL(10,2)`` lands as
  ``decimal(10,2)``, never as a float. PostgreSQL ``numeric`` (``PG_NUMERIC``) allows far
  more digits and NaN, so it is kept as exact decimal text (``string``) rather than rounded.
* ``JSON``/``PG_JSONB`` are ``string`` holding the JSON text; Iceberg has no JSON type.
* ``TIMESTAMP`` is ``timestamp`` (Iceberg ``timestamptz``, microseconds): Spanner's
  nanoseconds are truncated, as Spark and Iceberg v2 cannot hold them.
* ``DATETIME`` (a wall-clock date and time without a zone: MySQL ``DATETIME``, SQL Server
  ``DATETIME2``, PostgreSQL ``timestamp without time zone``, Avro ``local-timestamp-*`` and
  Datastream's ``datetime`` record) is ``timestamp_ntz`` (Iceberg ``timestamp``): reading it
  as an instant would invent a zone the source never had.
* ``BYTES``/``PROTO`` are ``binary`` (base64 in the change row's JSON).
* ``STRUCT`` is refused: Spanner tables cannot store it, so a change row declaring it is bad.

Pure Python (no pyspark, no Airflow): the Airflow side may check types before any job runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from airflow_cdc.model import CdcError


class UnsupportedColumnTypeError(CdcError, ValueError):
    """A source type has no Spark/Iceberg counterpart (or cannot be parsed)."""


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

# Other spellings of the canonical codes: Spanner's own variants, PostgreSQL-dialect DDL names,
# and the common names Datastream and Debezium payloads use. Keys are upper case, without
# length arguments ("VARCHAR(20)" is looked up as "VARCHAR").
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

# google.spanner.v1.TypeCode and TypeAnnotationCode numbers (the API's enum values).
_TYPE_CODE_NUMBERS = {
    1: "BOOL", 2: "INT64", 3: "FLOAT64", 4: "TIMESTAMP", 5: "DATE", 6: "STRING", 7: "BYTES",
    8: "ARRAY", 9: "STRUCT", 10: "NUMERIC", 11: "JSON", 13: "PROTO", 14: "ENUM",
    15: "FLOAT32", 16: "INTERVAL", 17: "UUID",
}
_ANNOTATION_NUMBERS = {2: "PG_NUMERIC", 3: "PG_JSONB", 4: "PG_OID"}
_ANNOTATED = {("NUMERIC", "PG_NUMERIC"), ("JSON", "PG_JSONB"), ("INT64", "PG_OID")}

_ARRAY_TEXT = re.compile(r"^ARRAY\s*<\s*(.+?)\s*>$", re.IGNORECASE)
# A type name with arguments: "VARCHAR(20)", "NUMERIC(10, 2)", "TIMESTAMP(6) WITH TIME ZONE".
_ARGUMENTS = re.compile(r"^([^(]*?)\s*\(\s*([^)]*?)\s*\)(.*)$")
_DECIMAL_ARGUMENTS = re.compile(r"^(\d+)(?:\s*,\s*(-?\d+))?$")
_LENGTH_ARGUMENT = re.compile(r"^(MAX|\d+)$", re.IGNORECASE)
MAX_DECIMAL_PRECISION = 38  # Iceberg's (and Spark's) widest decimal


@dataclass(frozen=True)
class ColumnType:
    """A source type in canonical form: a code from :data:`SPARK_TYPES`, or ARRAY of one.

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


def parse_source_type(source_type: object) -> ColumnType:
    """The canonical :class:`ColumnType` of ``source_type`` (any form the module doc lists)."""
    if isinstance(source_type, ColumnType):
        return source_type
    if isinstance(source_type, dict):
        return _parse_type_object(source_type, source_type)
    if isinstance(source_type, str):
        text = source_type.strip()
        if text.startswith("{"):
            try:
                return _parse_type_object(json.loads(text), source_type)
            except json.JSONDecodeError as error:
                raise UnsupportedColumnTypeError(
                    f"source type {source_type!r} looks like a JSON type object but is not JSON "
                    f"({error.msg}): give a type name such as 'INT64' or a Spanner type object"
                ) from None
        return _parse_type_name(text, source_type)
    raise UnsupportedColumnTypeError(
        f"source type {source_type!r} ({type(source_type).__name__}) is neither a type name nor "
        f"a Spanner type object: give e.g. 'INT64', 'ARRAY<STRING>' or {{'code': 'INT64'}}"
    )


def spark_sql_type(source_type: object) -> str:
    """The Spark/Iceberg SQL type (``bigint``, ``array<string>`` ...) of a source column type."""
    return parse_source_type(source_type).spark_sql


def _parse_type_name(text: str, original: object) -> ColumnType:
    array = _ARRAY_TEXT.match(text)
    if array:
        return _array_of(_parse_type_name(array.group(1), original), original)
    if text.endswith("[]"):  # PostgreSQL array spelling: bigint[]
        return _array_of(_parse_type_name(text[:-2].strip(), original), original)
    arguments = None
    with_arguments = _ARGUMENTS.match(text)
    if with_arguments:
        text, arguments = f"{with_arguments.group(1)} {with_arguments.group(3)}", with_arguments.group(2)
    name = " ".join(text.upper().split())
    code = ALIASES.get(name, name)
    if code not in SPARK_TYPES:
        raise UnsupportedColumnTypeError(_unknown(original))
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


def _parse_type_object(obj: object, original: object) -> ColumnType:
    if not isinstance(obj, dict):
        raise UnsupportedColumnTypeError(_unknown(original))
    if "code" not in obj and isinstance(obj.get("type"), (dict, str)):
        obj = obj["type"]  # a whole column_types entry: {"name", "type", "is_primary_key", ...}
        if isinstance(obj, str):
            return _parse_type_name(obj, original)
    code = obj.get("code")
    if isinstance(code, int) and not isinstance(code, bool):
        code = _TYPE_CODE_NUMBERS.get(code)
    if not isinstance(code, str):
        raise UnsupportedColumnTypeError(_unknown(original))
    code = code.upper()
    if code == "ARRAY":
        element = obj.get("array_element_type")
        if element is None:
            raise UnsupportedColumnTypeError(
                f"source type {original!r} is an ARRAY without array_element_type: "
                f"give the element type, e.g. {{'code': 'ARRAY', 'array_element_type': "
                f"{{'code': 'STRING'}}}}"
            )
        return _array_of(_parse_type_object(element, original), original)
    annotation = obj.get("type_annotation")
    if isinstance(annotation, int) and not isinstance(annotation, bool):
        annotation = _ANNOTATION_NUMBERS.get(annotation)
    if isinstance(annotation, str) and annotation.upper() not in ("", "TYPE_ANNOTATION_CODE_UNSPECIFIED"):
        if (code, annotation.upper()) in _ANNOTATED:
            return ColumnType(annotation.upper())
    return _parse_type_name(code, original)


def _array_of(element: ColumnType, original: object) -> ColumnType:
    if element.code == "ARRAY":
        raise UnsupportedColumnTypeError(
            f"source type {original!r} is an array of arrays, which Spanner tables cannot "
            f"store: check the change row's column_types"
        )
    return ColumnType("ARRAY", element)


def _unknown(original: object) -> str:
    return (
        f"source type {original!r} is not a known type: use a Spanner type code "
        f"({', '.join(sorted(set(SPARK_TYPES) - {'PG_NUMERIC', 'PG_JSONB', 'PG_OID'}))}, "
        f"ARRAY<...>) or one of its aliases; STRUCT cannot be a table column"
    )


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
