"""Recognise change stream queries in SQL text and bind their arguments.

Two shapes are accepted, as Spanner documents them:

* GoogleSQL ``SELECT ChangeRecord FROM READ_<stream>(...)`` with positional arguments, named
  arguments (``start_timestamp => @start``) or both (positional first);
* PostgreSQL ``SELECT * FROM "spanner"."read_json_<stream>"($1, $2, $3, $4, null)``.

An argument is a query parameter (``@name``, or ``$n`` bound as ``pn``), ``NULL``, an integer,
or a timestamp/string literal (``'...'``, ``"..."``, ``TIMESTAMP '...'``, ``'...'::timestamptz``).
Bound parameters arrive as ``google.protobuf.Value`` (timestamps and INT64 as strings).
Stream names compare case-insensitively.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .query import ChangeStreamQueryError, ReadArguments
from .schema import GOOGLESQL, POSTGRESQL
from .timeline import to_micros

ARGUMENT_NAMES = (
    "start_timestamp",
    "end_timestamp",
    "partition_token",
    "heartbeat_milliseconds",
    "read_options",
)
_GOOGLESQL = re.compile(
    r"^\s*SELECT\s+ChangeRecord\s+FROM\s+(READ_(\w+))\s*\((?P<args>.*)\)\s*;?\s*$", re.I | re.S
)
_POSTGRESQL = re.compile(
    r'^\s*SELECT\s+\*\s+FROM\s+"?spanner"?\s*\.\s*"?(read_json_(\w+))"?\s*\((?P<args>.*)\)\s*;?\s*$',
    re.I | re.S,
)
_MENTIONS_STREAM = re.compile(r"\bREAD_\w+\s*\(|\bread_json_\w+", re.I)
_NAMED = re.compile(r"^(\w+)\s*=>\s*(.*)$", re.S)
_STRING = re.compile(
    r"""^(?:TIMESTAMP\s+)?('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")(?:\s*::\s*[\w ]+)?$""", re.I | re.S
)
_FRACTION = re.compile(r"(\.\d{6})\d+")


@dataclass(frozen=True)
class ChangeStreamSql:
    """A recognised query: dialect, the read function's name, the stream, bound arguments."""

    dialect: str
    function_name: str
    stream_name: str
    arguments: ReadArguments


def mentions_change_stream(sql: str) -> bool:
    return bool(_MENTIONS_STREAM.search(sql))


def parse(sql: str, params: dict, known_streams: tuple[str, ...]) -> ChangeStreamSql:
    """Bind the query's arguments; ``params`` maps parameter names to protobuf ``Value``s."""
    match = _GOOGLESQL.match(sql)
    dialect = GOOGLESQL
    if match is None:
        match = _POSTGRESQL.match(sql)
        dialect = POSTGRESQL
    if match is None:
        raise ChangeStreamQueryError(
            "UNIMPLEMENTED",
            "Change stream TVF must not be combined with any other SQL statements. Change "
            "stream records should be read using `SELECT ChangeRecord FROM READ_<stream>(<args>)` "
            'or `SELECT * FROM "spanner"."read_json_<stream>"(<args>)`. Received: '
            + " ".join(sql.split()),
        )
    function_name, stream = match.group(1), match.group(2)
    canonical = next((s for s in known_streams if s.lower() == stream.lower()), None)
    if canonical is None:
        known = ", ".join(known_streams)
        if dialect == GOOGLESQL:
            message = (
                f"Table-valued function not found: {function_name} (change streams here: {known})"
            )
        else:
            message = (
                f"function spanner.{function_name} does not exist (change streams here: {known})"
            )
        raise ChangeStreamQueryError("INVALID_ARGUMENT", message)
    values = _bind(function_name, dialect, _split_arguments(match.group("args")), params)
    arguments = ReadArguments(
        start_us=_timestamp(function_name, "start_timestamp", values.get("start_timestamp")),
        end_us=_timestamp(function_name, "end_timestamp", values.get("end_timestamp")),
        partition_token=_text(function_name, "partition_token", values.get("partition_token")),
        heartbeat_milliseconds=_integer(
            function_name, "heartbeat_milliseconds", values.get("heartbeat_milliseconds")
        ),
        read_options=values.get("read_options"),
    )
    return ChangeStreamSql(dialect, function_name, canonical, arguments)


def _split_arguments(text: str) -> list[str]:
    """Split on top-level commas, leaving quoted text and parentheses alone."""
    parts, depth, quote, current = [], 0, "", []
    for char in text:
        if quote:
            current.append(char)
            if char == quote:
                quote = ""
            continue
        if char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    tail = "".join(current).strip()
    if tail or parts:
        parts.append(tail)
    return parts


def _bind(function_name: str, dialect: str, arguments: list[str], params: dict) -> dict:
    values: dict = {}
    positional = True
    for index, argument in enumerate(arguments):
        named = _NAMED.match(argument) if dialect == GOOGLESQL else None
        if named:
            positional = False
            name, expression = named.group(1).lower(), named.group(2).strip()
            if name not in ARGUMENT_NAMES:
                raise ChangeStreamQueryError(
                    "INVALID_ARGUMENT",
                    f"Function {function_name} has no argument named {named.group(1)}: use "
                    f"{', '.join(ARGUMENT_NAMES)}",
                )
        elif not positional:
            raise ChangeStreamQueryError(
                "INVALID_ARGUMENT",
                f"Positional argument {index + 1} of {function_name} follows named arguments: "
                f"put positional arguments first",
            )
        elif index >= len(ARGUMENT_NAMES):
            raise ChangeStreamQueryError(
                "INVALID_ARGUMENT",
                f"{function_name} takes at most {len(ARGUMENT_NAMES)} arguments "
                f"({', '.join(ARGUMENT_NAMES)}), got {len(arguments)}",
            )
        else:
            name, expression = ARGUMENT_NAMES[index], argument
        if name in values:
            raise ChangeStreamQueryError(
                "INVALID_ARGUMENT", f"{function_name} argument {name} is given twice"
            )
        values[name] = _evaluate(function_name, index, expression, params)
    return values


def _evaluate(function_name: str, index: int, expression: str, params: dict) -> object:
    if expression.startswith("@") or expression.startswith("$"):
        name = expression[1:] if expression.startswith("@") else f"p{expression[1:]}"
        if name not in params:
            raise ChangeStreamQueryError(
                "INVALID_ARGUMENT", f"No parameter found for binding: {name}"
            )
        return _from_value(params[name])
    if expression.upper() == "NULL":
        return None
    if re.fullmatch(r"[+-]?\d+", expression):
        return int(expression)
    string = _STRING.match(expression)
    if string:
        return string.group(1)[1:-1]
    raise ChangeStreamQueryError(
        "INVALID_ARGUMENT",
        f"Invalid argument of change stream TVF {function_name}. Argument {index} is not a "
        f"literal or parameter. Implicit type conversions are not supported. "
        f"Received: {expression}",
    )


def _from_value(value) -> object:
    kind = value.WhichOneof("kind")
    if kind in (None, "null_value"):
        return None
    if kind == "list_value":
        return [_from_value(v) for v in value.list_value.values]
    return getattr(value, kind)


def _timestamp(function_name: str, name: str, value: object) -> int | None:
    if value is None:
        return None
    try:
        text = (
            _FRACTION.sub(r"\1", str(value).strip().replace(" ", "T", 1))
            .replace("Z", "+00:00")
            .replace("z", "+00:00")
        )
        parsed = datetime.fromisoformat(text)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise ChangeStreamQueryError(
            "INVALID_ARGUMENT",
            f"{name} of {function_name} must be a timestamp with a time zone such as "
            f"2025-01-06T08:00:00Z; received {value!r}",
        )
    return to_micros(parsed)


def _integer(function_name: str, name: str, value: Any) -> int | None:
    if value is None:
        return None
    try:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise ChangeStreamQueryError(
            "INVALID_ARGUMENT", f"{name} of {function_name} must be an INT64; received {value!r}"
        ) from None


def _text(function_name: str, name: str, value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ChangeStreamQueryError(
        "INVALID_ARGUMENT", f"{name} of {function_name} must be a STRING; received {value!r}"
    )
