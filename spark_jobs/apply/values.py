"""Value text -> typed Spark values, and the test that says a value did not convert.

Changelog rows carry keys and values as ``map<string,string>`` (``keys``, ``new_values``):
each present value is text (:func:`airflow_cdc.model.value_text`: a string as is, any other
value as its JSON text), and a column set to NULL (key present, value null) differs from a
column absent from a partial image (key missing). This module turns that text into a column
of the target's Spark type, as SQL text (``sql.py`` says why); ``F.expr`` makes a ``Column`` of it.

Encodings, as Spanner change streams and :func:`airflow_cdc.model.change_row_to_record` write
them: integers as numbers or decimal strings, floats also as ``"NaN"``/``"Infinity"``, bytes
as base64, timestamps as RFC 3339 text, wall-clock datetimes (``timestamp_ntz``) as
``YYYY-MM-DD[T ]HH:MM:SS[.ffffff]`` without a zone, dates as ``YYYY-MM-DD``, decimals as their
exact text, arrays as JSON arrays, JSON columns as JSON text (or a nested object, kept as its
JSON text).

Exactly means no digit and no part of a value is dropped: a decimal with more fractional
digits than its column's scale (``20.125`` for ``decimal(10,2)``) does not convert (Spark's
cast would round it), nor does a date with a time of day, nor a ``timestamp_ntz`` text with a
zone or offset (Spark's cast would drop the zone and keep the clock reading, an instant read
as a wall-clock time). Only fractions of a second beyond microseconds are truncated, as for
``timestamp``: Iceberg v2 holds microseconds.

A value that is present but does not convert gives NULL here; :func:`bad_value` flags it so
apply dead-letters the row instead of storing a silent NULL. Conversions are ``try_cast``: NULL
for text that does not convert, in ANSI sessions too (where ``CAST`` raises), and exact for
integers (``'1.5'`` does not become 1).

These expressions run once per change (key columns) or per folded key and column, so the
common encodings take paths without per-row regular expressions: Spark's cast reads any zone
in the text (a ``Z`` suffix or an offset such as ``+00:00`` alike) through a zone lookup that
compiles two regular expressions per value, so a UTC text in a UTC session (every job here
sets one) is read without its ``Z``, after one precompiled pattern checks its shape (a third
of the time per value; JFR had the lookup at an eighth of the fold's second stage); and
``split`` with a delimiter of more than one character compiles its regular expression per
value, one of a single plain character does not.
"""

from __future__ import annotations

import re

from airflow_cdc.spark_jobs.apply.sql import string

_BASE64 = r"^[A-Za-z0-9+/\s]*={0,2}\s*$"
_ARRAY = re.compile(r"^array<(.+)>$")
_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")
# A date, and a wall-clock date and time, with nothing that names a zone.
_DATE = r"^\s*[+-]?[0-9]{4,}-[0-9]{1,2}-[0-9]{1,2}\s*$"
_WALL_CLOCK = r"^\s*[+-]?[0-9]{4,}-[0-9]{1,2}-[0-9]{1,2}([Tt ][0-9]{1,2}:[0-9]{1,2}(:[0-9]{1,2}([.][0-9]*)?)?)?\s*$"
# A decimal number with an exponent: its sign and integer digits, fraction digits, exponent.
_EXPONENT_FORM = r"^\s*[+-]?([0-9]*)[.]?([0-9]*)[eE]([+-]?[0-9]{1,4})\s*$"
# A compact JSON array of strings without escapes or control characters: ["a","b"] (how the
# changelog writes most). Its elements never hold \u0001, the delimiter they are cut at.
_PLAIN_STRING_ARRAY = r'^\["[^"\\\x00-\x1f]*"(,"[^"\\\x00-\x1f]*")*\]$'


def array_elements(raw: str) -> str:
    """``raw`` (SQL text of a JSON array's text) as ``array<string>``: each element's text.

    NULL when ``raw`` is not a JSON array. Arrays of plain strings (compact, no escapes: how
    the changelog writes arrays of strings and of Spanner's INT64s) are cut apart with
    compiled string functions; anything else is parsed by ``from_json``, which Spark only
    interprets (about half as fast on such arrays).
    """
    return (
        f"CASE WHEN {raw} = '[]' THEN CAST(array() AS array<string>) "
        f"WHEN {raw} RLIKE {string(_PLAIN_STRING_ARRAY)} "
        f"THEN split(replace(substring({raw}, 3, length({raw}) - 4), '\",\"', '\\u0001'), '\\u0001') "
        f"ELSE from_json({raw}, 'array<string>') END"
    )


def typed_value(raw: str, spark_type: str, elements: str | None = None, depth: int = 0) -> str:
    """SQL text: ``raw`` (JSON value text, NULL when absent or null) converted to ``spark_type``.

    For arrays, ``elements`` may give ``raw`` already parsed as ``array<string>``.
    """
    array = _ARRAY.match(spark_type)
    if array:
        element = array.group(1)
        if elements is None:
            elements = array_elements(raw)
        if element == "string":  # the parsed elements are the values (no per-element lambda)
            return elements
        x = f"__x{depth}"
        return f"transform({elements}, {x} -> {typed_value(x, element, depth=depth + 1)})"
    if spark_type in ("bigint", "int", "smallint", "tinyint"):
        return f"try_cast({raw} AS {spark_type})"
    if spark_type == "boolean":
        return f"CASE lower(trim({raw})) WHEN 'true' THEN true WHEN 'false' THEN false END"
    if spark_type == "binary":
        return f"CASE WHEN {raw} RLIKE {string(_BASE64)} THEN unbase64({raw}) END"
    if spark_type == "string":
        return raw
    if spark_type == "timestamp":
        return _timestamp(raw)
    if spark_type == "timestamp_ntz":
        return f"CASE WHEN {raw} RLIKE {string(_WALL_CLOCK)} THEN try_cast({raw} AS timestamp_ntz) END"
    if spark_type == "date":
        return f"CASE WHEN {raw} RLIKE {string(_DATE)} THEN try_cast({raw} AS date) END"
    decimal = _DECIMAL.match(spark_type)
    if decimal:
        return f"CASE WHEN {_within_scale(raw, int(decimal.group(2)))} THEN try_cast({raw} AS {spark_type}) END"
    # float, double: Spark's cast reads the JSON encodings (NaN/Infinity) and gives NULL for
    # anything else.
    return f"try_cast({raw} AS {spark_type})"


def _within_scale(raw: str, scale: int) -> str:
    """SQL text: true where the number text ``raw`` has no non-zero digit beyond ``scale``
    fractional digits (so casting it to that scale keeps its value; Spark would round it).

    Plain text (``20.50``, how the changelog writes decimals) is tested by one precompiled
    pattern: at most ``scale`` fraction digits, then only zeros. A text with an exponent
    (``2.5E-3``, a float's JSON) needs fraction digits - exponent - trailing zeros of its
    digits <= ``scale``. Any other text is not a decimal number.
    """
    plain = rf"^\s*[+-]?[0-9]*([.][0-9]{{0,{scale}}}0*)?\s*$"
    groups = [f"regexp_extract({raw}, {string(_EXPONENT_FORM)}, {i})" for i in (1, 2, 3)]
    digits = f"concat({groups[0]}, {groups[1]})"
    significant = f"regexp_replace({digits}, '0+$', '')"
    needed = f"(length({groups[1]}) - CAST({groups[2]} AS INT) - (length({digits}) - length({significant})))"
    return (
        f"(CASE WHEN {raw} RLIKE {string(plain)} THEN true "
        f"WHEN {raw} RLIKE {string(_EXPONENT_FORM)} THEN ({needed} <= {scale} OR {significant} RLIKE '^0*$') "
        f"ELSE false END)"
    )


# Session time zones that are UTC (Spark's jobs here set "UTC"); current_timezone() is a
# constant of the query, so the test below is decided when the query is planned.
_UTC_SESSION = (
    "current_timezone() IN ('UTC', 'Etc/UTC', 'GMT', 'Etc/GMT', 'Z', '+00:00', 'Zulu', 'Etc/Zulu', "
    "'UCT', 'Etc/UCT', 'Universal', 'Etc/Universal', 'Greenwich', 'Etc/Greenwich')"
)


# RFC 3339 in UTC with nothing else that could name a zone: YYYY-MM-DD[T ]HH:MM:SS[.fraction]Z.
_RFC3339_UTC = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]+)?[Zz]$"


def _timestamp(raw: str) -> str:
    """SQL text: RFC 3339 text (``raw``) as a timestamp; see the module doc.

    In a UTC session, a UTC text of the plain RFC 3339 shape (one precompiled pattern) is read
    without its ``Z``: with the session's zone, and no zone lookup. Any other text is read as
    it is, with a final ``z`` (RFC 3339 allows it; Spark reads only ``Z``) as ``Z``.
    """
    bare = f"substring({raw}, 1, length({raw}) - 1)"
    return (
        f"CASE WHEN {_UTC_SESSION} AND {raw} RLIKE {string(_RFC3339_UTC)} THEN try_cast({bare} AS timestamp) "
        f"WHEN endswith({raw}, 'z') THEN try_cast(concat({bare}, 'Z') AS timestamp) "
        f"ELSE try_cast({raw} AS timestamp) END"
    )


def bad_value(raw: str, spark_type: str, elements: str | None = None) -> str:
    """SQL text: true where ``raw`` is present and not NULL but does not convert to ``spark_type``."""
    if _ARRAY.match(spark_type) and elements is None:
        elements = array_elements(raw)
    return conversion_failed(raw, typed_value(raw, spark_type, elements), spark_type, elements)


def conversion_failed(raw: str, typed: str, spark_type: str, elements: str | None = None) -> str:
    """SQL text: true where ``typed`` (:func:`typed_value` of ``raw``) lost a present value.

    A scalar failed when ``raw`` is present but ``typed`` is NULL. An array failed when its
    text is not a JSON array (``elements`` NULL), or when fewer of its elements than of
    ``elements`` are non-NULL (one did not convert). Strings never fail.
    """
    if spark_type == "string":
        return "false"
    array = _ARRAY.match(spark_type)
    if array:
        assert elements is not None, "arrays need their parsed elements"
        if array.group(1) == "string":  # elements never fail to convert to strings
            return f"({raw} IS NOT NULL AND {elements} IS NULL)"
        present = f"size(filter({elements}, __e -> __e IS NOT NULL))"
        converted = f"size(filter({typed}, __e -> __e IS NOT NULL))"
        return f"({raw} IS NOT NULL AND ({elements} IS NULL OR {present} != {converted}))"
    return f"({raw} IS NOT NULL AND {typed} IS NULL)"
