"""Spanner's column types -> canonical types (:mod:`airflow_cdc.sources.column_types`).

Change streams describe each column in ``column_types`` as ``{"name", "type", "is_primary_key",
"ordinal_position"}``, ``type`` being the API's ``google.spanner.v1.Type`` as JSON:
``{"code": "INT64"}``, ``{"code": "ARRAY", "array_element_type": {"code": "STRING"}}``; the
codes may also come as the enum's numbers (``{"code": 8, ...}``). PostgreSQL-dialect databases
annotate some codes (``type_annotation`` ``PG_NUMERIC``, ``PG_JSONB``, ``PG_OID``). DDL and
``INFORMATION_SCHEMA`` name types instead: ``STRING(MAX)``, ``ARRAY<INT64>``, and in the
PostgreSQL dialect ``character varying``, ``bigint[]``, ``jsonb`` ...

:func:`canonical_type` reads every one of these forms; :func:`change_row_type` is what the
source's change rows declare (:func:`airflow_cdc.sources.spanner.mapping.change_rows`).

PostgreSQL annotations fold onto the GoogleSQL type they annotate (``PG_NUMERIC`` is
``NUMERIC``, ``PG_JSONB`` ``JSON``, ``PG_OID`` ``INT64``), as the Spanner source's change rows
have always declared them: a PostgreSQL-dialect ``numeric`` column is ``decimal(38,9)``, and
its targets keep that type. (The canonical ``PG_NUMERIC``, exact text, is another source's.)
"""

from __future__ import annotations

import json

from airflow_cdc.sources.column_types import (
    ColumnType,
    UnsupportedColumnTypeError,
    array_type,
    read_type_name,
)

# google.spanner.v1.TypeCode and TypeAnnotationCode numbers (the API's enum values).
TYPE_CODE_NUMBERS = {
    1: "BOOL", 2: "INT64", 3: "FLOAT64", 4: "TIMESTAMP", 5: "DATE", 6: "STRING", 7: "BYTES",
    8: "ARRAY", 9: "STRUCT", 10: "NUMERIC", 11: "JSON", 13: "PROTO", 14: "ENUM",
    15: "FLOAT32", 16: "INTERVAL", 17: "UUID",
}
ANNOTATION_NUMBERS = {2: "PG_NUMERIC", 3: "PG_JSONB", 4: "PG_OID"}
# PostgreSQL-dialect annotations: the GoogleSQL code each one annotates (its canonical type).
PG_ANNOTATIONS = {"PG_NUMERIC": "NUMERIC", "PG_JSONB": "JSON", "PG_OID": "INT64"}

# Spanner's scalar type codes (all canonical codes too).
SPANNER_CODES = frozenset(
    {"BOOL", "INT64", "FLOAT32", "FLOAT64", "NUMERIC", "STRING", "JSON", "BYTES", "PROTO",
     "ENUM", "DATE", "TIMESTAMP", "INTERVAL", "UUID"}
)
# Other names of Spanner types: the change stream documentation's INT, and PostgreSQL-dialect
# DDL names (upper case, without lengths: "character varying(20)" is "CHARACTER VARYING").
NAMES = {
    "INT": "INT64",
    "INTEGER": "INT64",
    "BIGINT": "INT64",
    "INT8": "INT64",
    "BOOLEAN": "BOOL",
    "DOUBLE PRECISION": "FLOAT64",
    "FLOAT8": "FLOAT64",
    "REAL": "FLOAT32",
    "FLOAT4": "FLOAT32",
    "DECIMAL": "NUMERIC",
    "TEXT": "STRING",
    "VARCHAR": "STRING",
    "CHARACTER VARYING": "STRING",
    "BYTEA": "BYTES",
    "JSONB": "JSON",
    "OID": "INT64",
    "TIMESTAMPTZ": "TIMESTAMP",
    "TIMESTAMP WITH TIME ZONE": "TIMESTAMP",
}
_KNOWN = (
    f"use a Spanner type ({', '.join(sorted(SPANNER_CODES))}, ARRAY<...>) as GoogleSQL or "
    f"PostgreSQL-dialect DDL names it, or its type object ({{'code': 'INT64'}}); STRUCT "
    f"cannot be a table column"
)


def canonical_type(spanner_type: object) -> ColumnType:
    """The canonical type of a Spanner type: a type object (codes as names or numbers), its
    JSON text, a whole ``column_types`` entry, or a type name (``STRING(MAX)``, ``bigint[]``)."""
    if isinstance(spanner_type, ColumnType):
        return spanner_type
    if isinstance(spanner_type, dict):
        return _type_object(spanner_type, spanner_type)
    if isinstance(spanner_type, str):
        text = spanner_type.strip()
        if text.startswith("{"):
            try:
                return _type_object(json.loads(text), spanner_type)
            except json.JSONDecodeError as error:
                raise UnsupportedColumnTypeError(
                    f"source type {spanner_type!r} looks like a JSON type object but is not JSON "
                    f"({error.msg}): give a type name such as 'INT64' or a Spanner type object"
                ) from None
        return _named(text, spanner_type)
    raise UnsupportedColumnTypeError(
        f"source type {spanner_type!r} ({type(spanner_type).__name__}) is neither a type name nor "
        f"a Spanner type object: give e.g. 'INT64', 'ARRAY<STRING>' or {{'code': 'INT64'}}"
    )


def change_row_type(spanner_type: dict) -> str:
    """The type a change row declares for a column of ``spanner_type`` (a ``column_types``
    entry's ``type``): its canonical name, or, for a type with none (STRUCT, a code this
    version does not know), the type's own text, which apply refuses with the reason and
    dead-letters the table's rows, as it refuses any non-canonical name."""
    try:
        return str(canonical_type(spanner_type))
    except UnsupportedColumnTypeError:
        return type_text(spanner_type)


def type_text(spanner_type: object) -> str:
    """Readable text of a Spanner type object: INT64, ARRAY<STRING>, STRUCT<a INT64> ..."""
    if not isinstance(spanner_type, dict):
        return str(spanner_type)
    code = _code(spanner_type.get("code"))
    if code == "ARRAY":
        return f"ARRAY<{type_text(spanner_type.get('array_element_type') or {})}>"
    if code == "STRUCT":
        fields = (spanner_type.get("struct_type") or {}).get("fields") or []
        inner = ", ".join(f"{f.get('name')} {type_text(f.get('type') or {})}" for f in fields)
        return f"STRUCT<{inner}>"
    return code


def _type_object(obj: object, original: object) -> ColumnType:
    if not isinstance(obj, dict):
        raise UnsupportedColumnTypeError(_unknown(original))
    if "code" not in obj and isinstance(obj.get("type"), (dict, str)):
        obj = obj["type"]  # a whole column_types entry: {"name", "type", "is_primary_key", ...}
        if isinstance(obj, str):
            return _named(obj, original)
    code = _code(obj.get("code"))
    if code == "ARRAY":
        element = obj.get("array_element_type")
        if element is None:
            raise UnsupportedColumnTypeError(
                f"source type {original!r} is an ARRAY without array_element_type: "
                f"give the element type, e.g. {{'code': 'ARRAY', 'array_element_type': "
                f"{{'code': 'STRING'}}}}"
            )
        return array_type(_type_object(element, original), original)
    annotation = obj.get("type_annotation")
    if isinstance(annotation, int) and not isinstance(annotation, bool):
        annotation = ANNOTATION_NUMBERS.get(annotation)
    if isinstance(annotation, str) and PG_ANNOTATIONS.get(annotation.upper()) == code:
        return ColumnType(code)  # folded onto the annotated GoogleSQL type (module doc)
    if code in SPANNER_CODES:
        return ColumnType(code)
    if not code or code == "STRUCT":
        raise UnsupportedColumnTypeError(_unknown(original))
    return _named(code, original)


def _named(name: str, original: object) -> ColumnType:
    return read_type_name(name, NAMES, original, codes=SPANNER_CODES, known=_KNOWN)


def _code(code: object) -> str:
    if isinstance(code, int) and not isinstance(code, bool):
        return TYPE_CODE_NUMBERS.get(code, str(code))
    return str(code or "").strip().upper()


def _unknown(original: object) -> str:
    return f"source type {original!r} is not a known type: {_KNOWN}"
