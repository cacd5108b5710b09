"""What a parsed statement answers: rows of a query, mutations of a DML statement.

Pure: no gRPC. A query runs over a :class:`Relation` (a table's rows at a read timestamp, or
as a read-write transaction sees them, or an INFORMATION_SCHEMA view):

1. Resolve the table and every column named (GoogleSQL: case-insensitively, quoted or not;
   PostgreSQL: quoted names exactly, unquoted ones case-insensitively).
2. Bind every value to the type of the column it meets: parameters by their declared type
   (GoogleSQL coerces STRING parameters to TIMESTAMP/DATE, INT64 to FLOAT64/NUMERIC),
   untyped parameters by the column's type, literals as the dialect coerces them.
3. Keep the rows (in primary key order) for which every predicate is TRUE: a comparison
   with NULL is never TRUE.
4. Sort by ORDER BY (NULLs first ascending in GoogleSQL, last in PostgreSQL), cut by
   OFFSET/LIMIT, project the selected columns.

A partitioned query (PartitionQuery) cuts step 3's rows into contiguous primary key ranges.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any

from ..schema import POSTGRESQL, SpannerType
from . import information_schema
from . import sql as table_sql
from .definition import ColumnSpec, DatabaseSchema, TableSpec
from .mutations import Mutation, delete, insert, update
from .status import SpannerStatusError, failed_precondition, invalid
from .values import PENDING, from_wire, key_sort, parse_timestamp, type_from_wire

_ORDERABLE_OPS = ("<", "<=", ">", ">=")


@dataclass
class Relation:
    """Rows to query: a table's (in key order) or a view's."""

    name: str
    columns: tuple[ColumnSpec, ...]
    rows: list[dict]
    table: TableSpec | None = None  # None: an INFORMATION_SCHEMA view

    def column(self, ref: table_sql.ColumnRef, dialect: str, alias: str | None) -> ColumnSpec:
        if ref.qualifier is not None:
            qualifiers = {self.name.lower(), self.name.split(".")[-1].lower()}
            if alias:
                qualifiers.add(alias.lower())
            if ref.qualifier.lower() not in qualifiers:
                raise _unknown_column(ref.qualifier, dialect)
        exact = dialect == POSTGRESQL and ref.quoted
        for column in self.columns:
            if column.name == ref.name or (not exact and column.name.lower() == ref.name.lower()):
                return column
        raise _unknown_column(ref.name, dialect)


@dataclass
class Answer:
    """A query's result: column names and types, rows of Python values."""

    fields: list[tuple[str, SpannerType]]
    rows: list[list]


@dataclass(frozen=True)
class QueryParams:
    """A request's bound parameters (raw ``google.protobuf.Value``) and declared types."""

    values: Any  # mapping name -> struct_pb2.Value
    types: Any  # mapping name -> google.spanner.v1.Type (raw)

    @classmethod
    def none(cls) -> QueryParams:
        return cls({}, {})


def _unknown_column(name: str, dialect: str) -> SpannerStatusError:
    if dialect == POSTGRESQL:
        return invalid(f'column "{name}" does not exist')
    return invalid(f"Unrecognized name: {name}")


def resolve_table(ref: table_sql.TableRef, schema: DatabaseSchema, dialect: str):
    """The TableSpec, or ``("view", NAME)`` for an INFORMATION_SCHEMA view."""
    postgresql = dialect == POSTGRESQL
    parts = ref.parts
    if len(parts) == 2 and parts[0].lower() == "information_schema":
        if information_schema.view_columns(parts[1], dialect) is not None:
            return ("view", parts[1].upper())
    elif len(parts) == 1 or (len(parts) == 2 and postgresql and parts[0].lower() == "public"):
        name, quoted = parts[-1], ref.quoted[-1]
        table = schema.table(name)
        if table is not None and (not postgresql or not quoted or table.name == name):
            return table
    if postgresql:
        raise invalid(f'relation "{ref.text}" does not exist')
    raise invalid(f"Table not found: {ref.text}")


def view_relation(name: str, schema: DatabaseSchema, dialect: str, database_id: str,
                  retention: str) -> Relation:  # fmt: skip
    shown = (
        f"information_schema.{name.lower()}"
        if dialect == POSTGRESQL
        else (f"INFORMATION_SCHEMA.{name}")
    )
    return Relation(
        shown,
        information_schema.view_columns(name, dialect),
        information_schema.view_rows(name, schema, dialect, database_id, retention),
    )


# --- binding values ---------------------------------------------------------------------------
class _Mismatch(Exception):
    def __init__(self, value_type: str) -> None:
        super().__init__(value_type)
        self.value_type = value_type


def bind(value: table_sql.Value, target: SpannerType, params: QueryParams, dialect: str,
         where: str) -> Any:  # fmt: skip
    """The Python value of ``value`` as a value of ``target`` (raises _Mismatch)."""
    if isinstance(value, table_sql.PendingCommitTimestamp):
        if target.code != "TIMESTAMP" or target.element is not None:
            raise _Mismatch("TIMESTAMP")
        return PENDING
    if isinstance(value, table_sql.Param):
        if value.name not in params.values:
            raise invalid(f"No parameter found for binding: {value.name}")
        raw = params.values[value.name]
        declared = type_from_wire(params.types[value.name]) if value.name in params.types else None
        if declared is None:
            return from_wire(target, raw, f"parameter {value.written} for {where}")
        bound = from_wire(declared, raw, f"parameter {value.written}")
        return _convert(bound, declared, target, where, dialect)
    return _literal(value, target, dialect, where)


def _convert(bound: Any, declared: SpannerType, target: SpannerType, where: str, dialect: str):
    if bound is None or declared == target or bound is PENDING:
        return bound
    if declared.code == "INT64" and target.code == "FLOAT64":
        return float(bound)
    if declared.code == "INT64" and target.code == "NUMERIC":
        return Decimal(bound)
    if declared.code == "FLOAT64" and target.code == "NUMERIC" and dialect == POSTGRESQL:
        return Decimal(repr(bound))
    if declared.code == "STRING" and target.code in ("TIMESTAMP", "DATE"):
        return _from_text(bound, target, where)
    raise _Mismatch(str(declared))


def _literal(value: table_sql.Literal, target: SpannerType, dialect: str, where: str) -> Any:
    kind, raw = value.kind, value.value
    code = None if target.element is not None else target.code
    if kind == "null":
        return None
    if kind == "string":
        if code == "STRING":
            return raw
        if code in ("TIMESTAMP", "DATE") or (dialect == POSTGRESQL and code is not None):
            return _from_text(raw, target, where)
        raise _Mismatch("STRING")
    if kind == "int":
        if code == "INT64":
            return raw
        if code == "FLOAT64":
            return float(raw)
        if code == "NUMERIC":
            return Decimal(raw)
        raise _Mismatch("INT64")
    if kind == "float":
        if code == "FLOAT64":
            return float(raw)
        if code == "NUMERIC":
            return Decimal(raw)
        raise _Mismatch("FLOAT64")
    if kind == "bool":
        if code == "BOOL":
            return raw
        raise _Mismatch("BOOL")
    typed = {"timestamp": "TIMESTAMP", "date": "DATE", "numeric": "NUMERIC", "json": "JSON"}[kind]
    if code == typed or (typed == "NUMERIC" and code == "FLOAT64"):
        return _from_text(raw, target, where)
    raise _Mismatch(typed)


def _from_text(text: str, target: SpannerType, where: str) -> Any:
    code = target.code
    try:
        if code == "STRING":
            return text
        if code == "TIMESTAMP":
            return parse_timestamp(text, where)
        if code == "DATE":
            return date.fromisoformat(text.strip())
        if code == "INT64":
            return int(text)
        if code == "FLOAT64":
            return float(text)
        if code == "NUMERIC":
            return Decimal(text)
        if code == "BOOL":
            lowered = text.strip().lower()
            if lowered in ("true", "t", "yes", "y", "on", "1"):
                return True
            if lowered in ("false", "f", "no", "n", "off", "0"):
                return False
            raise ValueError(text)
        if code == "JSON":
            return json.loads(text)
        if code == "BYTES":
            return text.encode()
    except (ValueError, InvalidOperation):
        raise invalid(f"Could not cast literal {text!r} to type {target} for {where}") from None
    raise _Mismatch("STRING")


# --- queries ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Test:
    column: str
    op: str
    value: Any


def compile_where(predicates, relation: Relation, alias: str | None, params: QueryParams,
                  dialect: str) -> list[_Test]:  # fmt: skip
    tests = []
    for predicate in predicates:
        column = relation.column(predicate.column, dialect, alias)
        if predicate.op in ("IS NULL", "IS NOT NULL"):
            tests.append(_Test(column.name, predicate.op, None))
            continue
        if column.type.element is not None or column.type.code == "JSON":
            raise invalid(
                f"No matching signature for operator {predicate.op} for argument types: "
                f"{column.type}, {column.type} (column {column.name}: {column.type} values "
                f"compare only with IS [NOT] NULL)"
            )
        try:
            bound = bind(predicate.value, column.type, params, dialect, column.name)
        except _Mismatch as mismatch:
            raise invalid(
                f"No matching signature for operator {predicate.op} for argument types: "
                f"{column.type}, {mismatch.value_type} (column {column.name})"
            ) from None
        if bound is PENDING:
            raise invalid("spanner.commit_timestamp() is a value to write, not one to compare with")
        tests.append(_Test(column.name, predicate.op, bound))
    return tests


def _passes(row: dict, tests: list[_Test]) -> bool:
    for test in tests:
        value = row[test.column]
        if value is PENDING:
            raise _pending_read(test.column)
        if test.op == "IS NULL":
            if value is not None:
                return False
            continue
        if test.op == "IS NOT NULL":
            if value is None:
                return False
            continue
        bound = test.value
        if value is None or bound is None:
            return False
        op = test.op
        if op == "=":
            ok = value == bound
        elif op == "!=":
            ok = value != bound
        elif op == "<":
            ok = value < bound
        elif op == "<=":
            ok = value <= bound
        elif op == ">":
            ok = value > bound
        else:
            ok = value >= bound
        if not ok:
            return False
    return True


def _pending_read(column: str) -> SpannerStatusError:
    return failed_precondition(
        f"Cannot read column {column}: this transaction wrote it with "
        f"PENDING_COMMIT_TIMESTAMP() / spanner.commit_timestamp(), whose value is known only "
        f"after the commit"
    )


def matching_rows(statement: table_sql.Select, relation: Relation, params: QueryParams,
                  dialect: str) -> list[dict]:  # fmt: skip
    """Step 3: the rows the WHERE clause keeps, in the relation's (primary key) order."""
    tests = compile_where(statement.where, relation, statement.alias, params, dialect)
    return [row for row in relation.rows if _passes(row, tests)]


def answer(statement: table_sql.Select, relation: Relation, params: QueryParams, dialect: str,
           rows: list[dict] | None = None) -> Answer:  # fmt: skip
    """Steps 1-4; ``rows`` (already filtered, e.g. one partition's) skips step 3."""
    if rows is None:
        rows = matching_rows(statement, relation, params, dialect)
    if statement.order_by:
        rows = _ordered(rows, statement, relation, dialect)
    offset = _count(statement.offset, "OFFSET", params, dialect)
    limit = _count(statement.limit, "LIMIT", params, dialect)
    if offset or limit is not None:
        rows = rows[offset or 0 :][: limit if limit is not None else None]
    if statement.items is None:
        selected = [(c.name, c) for c in relation.columns]
    else:
        selected = []
        for ref, alias in statement.items:
            column = relation.column(ref, dialect, statement.alias)
            shown = alias or (column.name if dialect == POSTGRESQL or ref.qualifier else ref.name)
            selected.append((shown, column))
    names = [c.name for _, c in selected]
    out = []
    for row in rows:
        values = [row[name] for name in names]
        for name, value in zip(names, values):
            if value is PENDING:
                raise _pending_read(name)
        out.append(values)
    return Answer([(shown, c.type) for shown, c in selected], out)


def _count(value, clause: str, params: QueryParams, dialect: str) -> int | None:
    if value is None:
        return None
    try:
        count = bind(value, SpannerType("INT64"), params, dialect, clause)
    except _Mismatch as mismatch:
        raise invalid(
            f"{clause} expects an integer literal or parameter; got {mismatch.value_type}"
        ) from None
    if count is None or count < 0:
        raise invalid(f"{clause} expects a non-negative integer; got {count}")
    return count


def _ordered(rows: list[dict], statement: table_sql.Select, relation: Relation,
             dialect: str) -> list[dict]:  # fmt: skip
    items = []
    for item in statement.order_by:
        column = relation.column(item.column, dialect, statement.alias)
        if column.type.element is not None or column.type.code == "JSON":
            raise invalid(f"ORDER BY does not support expressions of type {column.type}")
        nulls_first = item.nulls_first
        if nulls_first is None:  # NULL is the smallest value in GoogleSQL, the largest in PG
            nulls_first = item.descending if dialect == POSTGRESQL else not item.descending
        items.append((column.name, item.descending, nulls_first))

    def compare(a: dict, b: dict) -> int:
        for name, descending, nulls_first in items:
            left, right = a[name], b[name]
            if left is PENDING or right is PENDING:
                raise _pending_read(name)
            if left is None or right is None:
                if left is None and right is None:
                    continue
                return (-1 if nulls_first else 1) * (1 if left is None else -1)
            if left == right:
                continue
            result = -1 if left < right else 1
            return -result if descending else result
        return 0

    return sorted(rows, key=functools.cmp_to_key(compare))


def is_partitionable(statement: table_sql.Select, relation: Relation) -> str | None:
    """Why a query cannot be partitioned (None: it can)."""
    if relation.table is None:
        return "INFORMATION_SCHEMA queries run on one server"
    if statement.order_by:
        return "ORDER BY needs all rows in one place"
    if statement.limit is not None or statement.offset is not None:
        return "LIMIT/OFFSET need all rows in one place"
    return None


def partition_bounds(rows: list[dict], table: TableSpec, max_partitions: int) -> list[tuple]:
    """Contiguous key ranges ``[low, high)`` (None: unbounded) covering ``rows`` evenly."""
    count = len(rows)
    partitions = max(1, min(max_partitions, count))
    cuts = [table.key_of(rows[(i * count) // partitions]) for i in range(1, partitions)]
    lows = [None, *cuts]
    highs = [*cuts, None]
    return list(zip(lows, highs))


def in_bounds(key: tuple, low: tuple | None, high: tuple | None) -> bool:
    ordered = key_sort(key)
    if low is not None and ordered < key_sort(low):
        return False
    return high is None or ordered < key_sort(high)


# --- DML --------------------------------------------------------------------------------------
def dml_mutations(statement, table: TableSpec, current_rows, params: QueryParams,
                  dialect: str) -> tuple[list[Mutation], int]:  # fmt: skip
    """The mutations a DML statement makes, and its row count.

    ``current_rows``: the table's ``(key, row)`` as the transaction sees them.
    """
    relation = Relation(table.name, table.columns, [], table)
    if isinstance(statement, table_sql.Insert):
        columns = [relation.column(ref, dialect, None) for ref in statement.columns]
        if len({c.name for c in columns}) != len(columns):
            raise invalid(f"INSERT names a column of {table.name} twice")
        values = []
        for row in statement.rows:
            if len(row) != len(columns):
                raise invalid(
                    f"Inserted row has wrong column count; Has {len(row)}, expected {len(columns)}"
                )
            values.append(tuple(_assigned(v, c, params, dialect) for v, c in zip(row, columns)))
        return [insert(table.name, [c.name for c in columns], values)], len(values)
    tests = compile_where(statement.where, relation, statement.alias, params, dialect)
    matched = [(key, row) for key, row in current_rows if _passes(row, tests)]
    if isinstance(statement, table_sql.Delete):
        if not matched:
            return [], 0
        return [delete(table.name, keys=[key for key, _ in matched])], len(matched)
    assignments = []
    for ref, value in statement.assignments:
        column = relation.column(ref, dialect, statement.alias)
        if column.name in table.primary_key:
            raise invalid(f"Cannot UPDATE value on non-writable column: {column.name}")
        assignments.append((column, _assigned(value, column, params, dialect)))
    if not matched:
        return [], 0
    names = [*table.primary_key, *(c.name for c, _ in assignments)]
    rows = [(*key, *(v for _, v in assignments)) for key, _ in matched]
    return [update(table.name, names, rows)], len(matched)


def _assigned(value, column: ColumnSpec, params: QueryParams, dialect: str) -> Any:
    try:
        return bind(value, column.type, params, dialect, column.name)
    except _Mismatch as mismatch:
        raise invalid(
            f"Value of type {mismatch.value_type} cannot be assigned to {column.name}, which has "
            f"type {column.type}"
        ) from None
