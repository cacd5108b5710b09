"""Writes of many rows in a few statements, for windows of thousands of partitions.

One statement per partition and per table would make a plan or commit of a window of
thousands of partitions tens of thousands of round trips, and on PostgreSQL each guarded
UPDATE of one partition is planned on the (stream, state) index, scanning every partition of
the stream in that state, so a commit would grow with the square of the partitions
(``bench/state_store.py``).

* :func:`insert_all`: one INSERT executed for all rows (SQLAlchemy sends them as multi-row
  VALUES statements);
* :func:`update_from_rows`: ``WITH given(...) AS (VALUES ...) UPDATE t SET ... FROM given
  WHERE ...`` for a chunk of rows per statement, ``RETURNING`` the rows it changed. Every row
  keeps its own guard (its expected state, a watermark that never moves back): the condition
  is written against the row's own values, and the caller checks that each row changed.

Both run on SQLite (3.35 or newer: UPDATE ... FROM and RETURNING) and PostgreSQL alike.
"""

from __future__ import annotations

import copy

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import Table, bindparam, column, insert, text, update, values
from sqlalchemy.engine import Connection
from sqlalchemy.types import TypeEngine

# Rows per UPDATE statement: few round trips, and bound parameters far below SQLite's limit.
CHUNK_ROWS = 500


def chunks(rows: Sequence[Any], size: int = CHUNK_ROWS) -> Iterator[Sequence[Any]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def insert_all(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """INSERT ``rows`` (dicts of column values) in as few statements as the driver allows."""
    if rows:
        conn.execute(insert(table), list(rows))


def update_from_rows(
    conn: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    types: Mapping[str, TypeEngine],
    where: Callable[[Any], Iterable[Any]],
    changes: Callable[[Any], Mapping[str, Any]],
    returning: Any,
) -> list[Any]:
    """UPDATE ``table`` from ``rows``, a chunk per statement; the ``returning`` value of every
    row changed.

    ``rows`` hold the keys of ``types`` (the columns of the CTE ``given``, typed like the
    table's columns they are compared with or written to); ``where(given)`` gives the
    conditions joining each table row to its given row (and guarding it), ``changes(given)``
    the SET clause.
    """
    changed: list[Any] = []
    names = list(types)
    prepared: dict[int, tuple[Any, dict[str, Any]]] = {}
    for chunk in chunks(rows):
        if len(chunk) not in prepared:
            given = (
                values(*(column(name, types[name]) for name in names), name="given")
                .data([
                    tuple(bindparam(f"given_{index}_{name}", type_=types[name]) for name in names)
                    for index in range(len(chunk))
                ])
                .cte("given")
            )
            statement = update(table).where(*where(given)).values(**changes(given))
            prepared[len(chunk)] = _compiled_once(conn, statement.returning(returning))
        statement, constants = prepared[len(chunk)]
        parameters = {
            f"given_{index}_{name}": row[name] for index, row in enumerate(chunk) for name in names
        }
        changed.extend(conn.execute(statement, {**constants, **parameters}).scalars())
    return changed


def _compiled_once(conn: Connection, statement: Any) -> tuple[Any, dict[str, Any]]:
    """``statement`` as text compiled once for this connection's database, and the values of
    its own bound parameters. SQLAlchemy does not cache statements holding a VALUES list,
    and compiling one per chunk cost more than running it."""
    dialect = copy.copy(conn.dialect)
    dialect.paramstyle, dialect.positional = "named", False
    compiled = statement.compile(dialect=dialect)
    binds = {compiled.bind_names[bind]: bind for bind in compiled.binds.values()}
    typed = text(compiled.string).bindparams(
        *(bindparam(name, type_=bind.type) for name, bind in binds.items())
    )
    constants = {
        name: bind.effective_value for name, bind in binds.items() if not name.startswith("given_")
    }
    return typed, constants
