"""Mutations, as Spanner's Commit takes them: writes of rows and deletes of key sets.

``insert`` / ``update`` / ``insert_or_update`` / ``replace`` take a table, column names and
rows of Python values, like the client's ``batch.insert(table, columns, values)``; write
``COMMIT_TIMESTAMP`` (``"spanner.commit_timestamp()"``) into a commit timestamp column to get
the commit's timestamp. ``delete`` takes whole keys and/or key ranges (whose ends may be key
prefixes), or ``all=True``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .values import key_sort

WRITE_OPERATIONS = ("insert", "update", "insert_or_update", "replace")


@dataclass(frozen=True)
class KeyRange:
    """Keys between two key prefixes; both ends closed unless said otherwise.

    ``KeyRange(start=(7,), end=(7,))`` is every key starting with 7 (e.g. a parent's children).
    """

    start: tuple = ()
    end: tuple = ()
    start_closed: bool = True
    end_closed: bool = True

    def contains(self, key: tuple) -> bool:
        start, end = key_sort(self.start), key_sort(self.end)
        head_start, head_end = key_sort(key[: len(self.start)]), key_sort(key[: len(self.end)])
        above = head_start >= start if self.start_closed else head_start > start
        below = head_end <= end if self.end_closed else head_end < end
        return above and below


@dataclass(frozen=True)
class KeySet:
    keys: tuple[tuple, ...] = ()
    ranges: tuple[KeyRange, ...] = ()
    all: bool = False

    def contains(self, key: tuple) -> bool:
        return self.all or key in self.keys or any(r.contains(key) for r in self.ranges)


@dataclass(frozen=True)
class Write:
    operation: str  # one of WRITE_OPERATIONS
    table: str
    columns: tuple[str, ...]
    values: tuple[tuple, ...]


@dataclass(frozen=True)
class Delete:
    table: str
    key_set: KeySet


Mutation = Write | Delete


def _write(operation: str, table: str, columns, values) -> Write:
    return Write(operation, table, tuple(columns), tuple(tuple(row) for row in values))


def insert(table: str, columns, values) -> Write:
    """New rows; a row that exists already fails the commit (ALREADY_EXISTS)."""
    return _write("insert", table, columns, values)


def update(table: str, columns, values) -> Write:
    """Existing rows' given columns; a missing row fails the commit (NOT_FOUND)."""
    return _write("update", table, columns, values)


def insert_or_update(table: str, columns, values) -> Write:
    return _write("insert_or_update", table, columns, values)


def replace(table: str, columns, values) -> Write:
    """Like insert, but an existing row is deleted first (unwritten columns become NULL)."""
    return _write("replace", table, columns, values)


def delete(table: str, keys=(), ranges=(), all: bool = False) -> Delete:
    return Delete(table, KeySet(tuple(tuple(k) for k in keys), tuple(ranges), all))
