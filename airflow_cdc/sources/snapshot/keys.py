"""Which columns key a table's snapshot chunks, in key order, with their kinds.

Read from ``information_schema`` over any DB-API connection (psycopg2, pymysql), so the same
queries serve PostgreSQL and MariaDB. By default the key is the primary key, in its declared
column order (not the table's column order). A table without one can still be chunked by
columns the caller names (``key_columns=``): they must be NOT NULL, since a row whose key is
NULL matches no range and would be missing from the snapshot; they should be unique, or a
chunk may hold more than ``chunk_size`` rows (never a row twice: ranges are disjoint).

Names are compared as the database stores them: PostgreSQL folds unquoted names to lower
case when a table is created, so ``Orders`` created without quotes is ``orders`` here.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass

from airflow_cdc.model import validate_identifier
from airflow_cdc.sources.snapshot.dialects import (
    TEXT,
    Dialect,
    SnapshotChunkError,
    UnsupportedKeyTypeError,
)


class NoUsableKeyError(SnapshotChunkError):
    """A table has no key to chunk by: no primary key, or named key columns that cannot serve."""


@dataclass(frozen=True)
class KeyColumn:
    """One key column: its name, kind (``dialects.KINDS``) and type as the database reports it.

    ``charset`` and ``collation`` are set for MariaDB text columns only: literals compared
    with the column are converted to them, so they order as the column does.
    """

    name: str
    kind: str
    source_type: str
    charset: str | None = None
    collation: str | None = None

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "source_type": self.source_type,
            "charset": self.charset,
            "collation": self.collation,
        }

    @classmethod
    def from_dict(cls, data: dict) -> KeyColumn:
        return cls(
            data["name"], data["kind"], data["source_type"], data["charset"], data["collation"]
        )


def current_schema(connection, dialect: Dialect) -> str:
    """The connection's default schema (PostgreSQL ``current_schema()``, MariaDB ``DATABASE()``)."""
    sql = "SELECT current_schema()" if dialect.name == "postgresql" else "SELECT DATABASE()"
    rows = fetch_all(connection, sql)
    if not rows or rows[0][0] is None:
        raise SnapshotChunkError(
            f"the {dialect.name} connection has no current schema: pass schema= naming the "
            f"table's schema (MariaDB: its database)"
        )
    return rows[0][0]


def validate_names(table: str, schema: str | None, key_columns: Sequence[str] | None) -> None:
    """Refuse a table, schema or key column name that is not a plain identifier (before any SQL)."""
    validate_identifier("table", table)
    if schema is not None:
        validate_identifier("schema", schema)
    if key_columns is not None:
        if isinstance(key_columns, str) or not key_columns:
            raise SnapshotChunkError(
                f"key_columns {key_columns!r} of table {table!r} must be a non-empty list of "
                f"column names, e.g. key_columns=['id']"
            )
        for name in key_columns:
            validate_identifier("key column", name)
        if len(set(key_columns)) != len(key_columns):
            raise SnapshotChunkError(f"key_columns {list(key_columns)!r} names a column twice")


def discover_key_columns(connection, dialect: Dialect, table: str, *, schema: str | None = None,
                         key_columns: Sequence[str] | None = None) -> tuple[KeyColumn, ...]:
    """The key columns of ``schema.table`` in key order, with their kinds.

    1. Validate the names (before any SQL is built).
    2. Read the table's columns; a table the connection cannot see is refused.
    3. Take ``key_columns`` if given (each must exist and be NOT NULL), else the primary key.
    4. Refuse a key column whose type has no exact literal (floats, binary, enums ...).
    """
    validate_names(table, schema, key_columns)
    if schema is None:
        schema = current_schema(connection, dialect)

    columns = _table_columns(connection, dialect, schema, table)
    if key_columns is None:
        key_columns = _primary_key(connection, schema, table)
    return tuple(_key_column(dialect, schema, table, name, columns) for name in key_columns)


# Validated identifiers hold only [A-Za-z0-9_]: plain quoted text is safe in the queries below
# and needs no driver paramstyle.
def _table_columns(connection, dialect: Dialect, schema: str, table: str) -> dict:
    """Step 2: the table's columns, name -> (data type, nullable, charset, collation)."""
    where = f"table_schema = '{schema}' AND table_name = '{table}'"
    columns = {
        name: (data_type, nullable == "YES", charset, collation)
        for name, data_type, nullable, charset, collation in fetch_all(
            connection,
            "SELECT column_name, data_type, is_nullable, character_set_name, collation_name "
            f"FROM information_schema.columns WHERE {where}",
        )
    }
    if not columns:
        raise NoUsableKeyError(
            f"table {schema}.{table} is not visible to this {dialect.name} connection: check "
            f"the schema and table names (as stored: PostgreSQL folds unquoted names to lower "
            f"case) and the connection's privileges"
        )
    return columns


def _primary_key(connection, schema: str, table: str) -> list[str]:
    """Step 3 without ``key_columns``: the primary key's columns in key order."""
    key_columns = [
        name
        for (name,) in fetch_all(
            connection,
            "SELECT kcu.column_name FROM information_schema.table_constraints tc "
            "JOIN information_schema.key_column_usage kcu "
            "ON kcu.constraint_schema = tc.constraint_schema "
            "AND kcu.constraint_name = tc.constraint_name "
            "AND kcu.table_schema = tc.table_schema AND kcu.table_name = tc.table_name "
            f"WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_schema = '{schema}' "
            f"AND tc.table_name = '{table}' "
            "ORDER BY kcu.ordinal_position",
        )
    ]
    if not key_columns:
        raise NoUsableKeyError(
            f"table {schema}.{table} has no primary key: pass key_columns= naming unique "
            f"NOT NULL columns to chunk it by, e.g. key_columns=['id']"
        )
    return key_columns


def _key_column(dialect: Dialect, schema: str, table: str, name: str, columns: dict) -> KeyColumn:
    """Steps 3-4 for one key column: it exists, is NOT NULL, and its type has an exact literal."""
    if name not in columns:
        raise NoUsableKeyError(
            f"key column {name!r} is not a column of {schema}.{table}: name columns of "
            f"{sorted(columns)} in key_columns="
        )
    data_type, nullable, charset, collation = columns[name]
    if nullable:
        raise NoUsableKeyError(
            f"key column {name!r} of {schema}.{table} allows NULL, and rows with a NULL key "
            f"would be in no chunk: name NOT NULL columns in key_columns= (or make it NOT NULL)"
        )
    kind = dialect.key_kind(data_type)
    if kind is None:
        raise UnsupportedKeyTypeError(
            f"key column {name!r} of {schema}.{table} has type {data_type!r}, which cannot "
            f"key snapshot chunks (no exact literal or ordering): pass key_columns= naming "
            f"unique NOT NULL columns of integer, decimal, text, date, timestamp, boolean "
            f"or (PostgreSQL) uuid type"
        )
    keep_collation = dialect.name == "mariadb" and kind == TEXT
    return KeyColumn(
        name,
        kind,
        data_type,
        charset if keep_collation else None,
        collation if keep_collation else None,
    )


def fetch_all(connection, sql: str) -> list[tuple]:
    """The rows of one query without parameters, on a cursor closed afterwards."""
    with closing(connection.cursor()) as cursor:
        cursor.execute(sql)
        return [tuple(row) for row in cursor.fetchall()]
