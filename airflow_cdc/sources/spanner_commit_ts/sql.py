"""The queries of a commit-timestamp window, in both dialects, with bound parameters only.

The window query is ``WHERE <col> >= @s AND <col> < @e``: a comparison of the commit-timestamp
column with a constant, joined by AND and never OR, the form Spanner optimizes to skip data
written before ``s`` (seed 003). A stream's first window reads ``WHERE <col> < @e`` (the
table's whole content at ``e``). Table and column names are validated as identifiers, then
quoted (backticks in GoogleSQL, double quotes in PostgreSQL), before any text is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from airflow_cdc.model import ensure_utc, validate_identifier
from airflow_cdc.sources.spanner.query import DIALECTS, GOOGLE_SQL


@dataclass(frozen=True)
class TableQuery:
    sql: str
    params: dict
    param_types: dict


def quote(dialect: str, kind: str, name: str) -> str:
    validate_identifier(kind, name)
    return f"`{name}`" if dialect == GOOGLE_SQL else f'"{name}"'


def window_query(dialect: str, table: str, columns, column: str,
                 start: datetime | None, end: datetime) -> TableQuery:
    """Rows of ``table`` whose ``column`` is in ``[start, end)`` (``start`` None: ``< end``)."""
    from google.cloud.spanner_v1 import param_types

    if dialect not in DIALECTS:
        raise ValueError(f"Spanner dialect {dialect!r} is unknown: use one of {DIALECTS}")
    selected = ", ".join(quote(dialect, f"column of {table}", c) for c in columns)
    col = quote(dialect, f"commit-timestamp column of {table}", column)
    end = ensure_utc("window end", end)
    bounds = [("e", end)] if start is None else [("s", ensure_utc("window start", start)), ("e", end)]
    if dialect == GOOGLE_SQL:
        names, marks = [n for n, _ in bounds], [f"@{n}" for n, _ in bounds]
    else:
        names = [f"p{i}" for i in range(1, len(bounds) + 1)]
        marks = [f"${i}" for i in range(1, len(bounds) + 1)]
    values = [v for _, v in bounds]
    if start is None:
        where = f"{col} < {marks[0]}"
    else:
        where = f"{col} >= {marks[0]} AND {col} < {marks[1]}"
    sql = f"SELECT {selected} FROM {quote(dialect, 'table', table)} WHERE {where}"
    return TableQuery(sql, dict(zip(names, values)),
                      {name: param_types.TIMESTAMP for name in names})


def key_query(dialect: str, table: str, keys) -> TableQuery:
    """The primary keys of every row of ``table`` (the reconciliation's read)."""
    selected = ", ".join(quote(dialect, f"key column of {table}", k) for k in keys)
    return TableQuery(f"SELECT {selected} FROM {quote(dialect, 'table', table)}", {}, {})
