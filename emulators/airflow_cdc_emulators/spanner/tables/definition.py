"""The schema of served tables: columns (commit timestamp ones included), keys, interleaving,
secondary indexes, and their DDL in both dialects as ``GetDatabaseDdl`` returns it.

A commit timestamp column is a TIMESTAMP column with ``OPTIONS (allow_commit_timestamp=true)``
(GoogleSQL) or of type ``SPANNER.COMMIT_TIMESTAMP`` (PostgreSQL); it may sit in a primary key
or lead a secondary index (Spanner warns that both make hotspots, and allows them).
Identifiers compare case-insensitively, as GoogleSQL does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property

from airflow_cdc_emulators.common import validate_identifier

from ..schema import GOOGLESQL, POSTGRESQL, SchemaError, SpannerType

ON_DELETE_ACTIONS = ("NO ACTION", "CASCADE")
DEFAULT_VERSION_RETENTION_PERIOD = "1h"
_DURATION = re.compile(r"^\s*(\d+)\s*([smhd])\s*$", re.IGNORECASE)
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


@dataclass(frozen=True)
class ColumnSpec:
    """One column; ``allow_commit_timestamp`` only on TIMESTAMP columns."""

    name: str
    type: SpannerType
    nullable: bool = True
    allow_commit_timestamp: bool = False

    def __post_init__(self) -> None:
        validate_identifier("column name", self.name)
        if isinstance(self.type, str):
            object.__setattr__(self, "type", SpannerType.parse(self.type))
        if self.allow_commit_timestamp and self.type.code != "TIMESTAMP":
            raise SchemaError(
                f"column {self.name!r} has type {self.type}: allow_commit_timestamp needs a "
                f"TIMESTAMP column"
            )

    def spanner_type(self, dialect: str) -> str:
        """INFORMATION_SCHEMA.COLUMNS.SPANNER_TYPE: ``STRING(MAX)``, ``bigint[]``, ..."""
        if dialect == POSTGRESQL and self.allow_commit_timestamp:
            return "spanner.commit_timestamp"
        return self.type.ddl(dialect)

    def ddl(self, dialect: str) -> str:
        not_null = "" if self.nullable else " NOT NULL"
        if dialect == POSTGRESQL:
            type_text = (
                "SPANNER.COMMIT_TIMESTAMP"
                if self.allow_commit_timestamp
                else self.type.ddl(dialect)
            )
            return f'"{self.name}" {type_text}{not_null}'
        options = " OPTIONS (allow_commit_timestamp=true)" if self.allow_commit_timestamp else ""
        return f"{self.name} {self.type.ddl(dialect)}{not_null}{options}"


@dataclass(frozen=True)
class TableSpec:
    """A table: columns, primary key (ascending), and optionally its interleaving parent."""

    name: str
    columns: tuple[ColumnSpec, ...]
    primary_key: tuple[str, ...]
    parent: str | None = None
    on_delete: str = "NO ACTION"

    def __post_init__(self) -> None:
        validate_identifier("table name", self.name)
        object.__setattr__(self, "columns", tuple(self.columns))
        object.__setattr__(self, "primary_key", tuple(self.primary_key))
        names = [c.name.lower() for c in self.columns]
        if len(set(names)) != len(names):
            raise SchemaError(f"table {self.name!r} has duplicate column names")
        if not self.primary_key:
            raise SchemaError(f"table {self.name!r} needs a primary key")
        for key in self.primary_key:
            if key.lower() not in names:
                raise SchemaError(f"primary key column {key!r} is not a column of {self.name!r}")
        object.__setattr__(
            self, "primary_key", tuple(self.column(k).name for k in self.primary_key)
        )
        if self.on_delete not in ON_DELETE_ACTIONS:
            raise SchemaError(
                f"on_delete {self.on_delete!r} of table {self.name!r}: use one of "
                f"{', '.join(ON_DELETE_ACTIONS)}"
            )
        for column in self.key_columns:
            if column.type.element is not None or column.type.code == "JSON":
                raise SchemaError(
                    f"key column {column.name!r} of {self.name!r} has type {column.type}: "
                    f"ARRAY and JSON columns cannot be keys"
                )

    @cached_property
    def _by_name(self) -> dict[str, ColumnSpec]:
        return {c.name.lower(): c for c in self.columns}

    def column(self, name: str) -> ColumnSpec | None:
        return self._by_name.get(name.lower())

    @cached_property
    def key_columns(self) -> tuple[ColumnSpec, ...]:
        return tuple(self.column(k) for k in self.primary_key)

    @cached_property
    def commit_timestamp_columns(self) -> tuple[ColumnSpec, ...]:
        return tuple(c for c in self.columns if c.allow_commit_timestamp)

    def key_of(self, row: dict) -> tuple:
        return tuple(row[k] for k in self.primary_key)

    def ddl(self, dialect: str) -> str:
        if dialect == POSTGRESQL:
            keys = ", ".join(f'"{k}"' for k in self.primary_key)
            body = ",\n  ".join([*(c.ddl(dialect) for c in self.columns), f"PRIMARY KEY({keys})"])
            text = f'CREATE TABLE "{self.name}" (\n  {body}\n)'
            if self.parent:
                text += f' INTERLEAVE IN PARENT "{self.parent}" ON DELETE {self.on_delete}'
            return text
        body = "".join(f"  {c.ddl(dialect)},\n" for c in self.columns)
        text = f"CREATE TABLE {self.name} (\n{body}) PRIMARY KEY({', '.join(self.primary_key)})"
        if self.parent:
            text += f",\n  INTERLEAVE IN PARENT {self.parent} ON DELETE {self.on_delete}"
        return text


@dataclass(frozen=True)
class IndexSpec:
    """A secondary index: ascending key columns, optional STORING columns."""

    name: str
    table: str
    columns: tuple[str, ...]
    storing: tuple[str, ...] = ()
    unique: bool = False
    null_filtered: bool = False

    def __post_init__(self) -> None:
        validate_identifier("index name", self.name)
        object.__setattr__(self, "columns", tuple(self.columns))
        object.__setattr__(self, "storing", tuple(self.storing))
        if not self.columns:
            raise SchemaError(f"index {self.name!r} needs at least one column")

    def ddl(self, dialect: str) -> str:
        kind = ("UNIQUE " if self.unique else "") + (
            "NULL_FILTERED " if self.null_filtered and dialect == GOOGLESQL else ""
        )
        if dialect == POSTGRESQL:
            columns = ", ".join(f'"{c}"' for c in self.columns)
            text = f'CREATE {kind}INDEX "{self.name}" ON "{self.table}" ({columns})'
            if self.storing:
                text += f" INCLUDE ({', '.join(f'{chr(34)}{c}{chr(34)}' for c in self.storing)})"
            return text
        text = f"CREATE {kind}INDEX {self.name} ON {self.table}({', '.join(self.columns)})"
        if self.storing:
            text += f" STORING ({', '.join(self.storing)})"
        return text


@dataclass(frozen=True)
class DatabaseSchema:
    """Tables (a parent before its children) and secondary indexes."""

    tables: tuple[TableSpec, ...]
    indexes: tuple[IndexSpec, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "tables", tuple(self.tables))
        object.__setattr__(self, "indexes", tuple(self.indexes))
        seen: dict[str, TableSpec] = {}
        for table in self.tables:
            if table.name.lower() in seen:
                raise SchemaError(f"table {table.name!r} is defined twice")
            if table.parent is not None:
                parent = seen.get(table.parent.lower())
                if parent is None:
                    raise SchemaError(
                        f"table {table.name!r} is interleaved in {table.parent!r}, which is not "
                        f"defined before it"
                    )
                object.__setattr__(table, "parent", parent.name)
                own = [table.column(k) for k in table.primary_key[: len(parent.primary_key)]]
                if [(c.name.lower(), c.type) for c in own] != [
                    (c.name.lower(), c.type) for c in parent.key_columns
                ]:
                    raise SchemaError(
                        f"table {table.name!r} must start its primary key with the key of its "
                        f"parent {parent.name!r} ({', '.join(parent.primary_key)})"
                    )
            seen[table.name.lower()] = table
        for index in self.indexes:
            table = seen.get(index.table.lower())
            if table is None:
                raise SchemaError(f"index {index.name!r} is on unknown table {index.table!r}")
            for name in (*index.columns, *index.storing):
                if table.column(name) is None:
                    raise SchemaError(f"index {index.name!r}: {table.name} has no column {name!r}")

    @cached_property
    def _by_name(self) -> dict[str, TableSpec]:
        return {t.name.lower(): t for t in self.tables}

    def table(self, name: str) -> TableSpec | None:
        return self._by_name.get(name.lower())

    def children(self, table_name: str) -> tuple[TableSpec, ...]:
        return tuple(t for t in self.tables if t.parent == table_name)

    def ddl(self, dialect: str, database_id: str, version_retention_period: str) -> list[str]:
        statements = [t.ddl(dialect) for t in self.tables]
        statements += [i.ddl(dialect) for i in self.indexes]
        if dialect == POSTGRESQL:
            statements.append(
                f"ALTER DATABASE {database_id} SET spanner.version_retention_period = "
                f"'{version_retention_period}'"
            )
        else:
            statements.append(
                f"ALTER DATABASE `{database_id}` SET OPTIONS (\n"
                f"  version_retention_period = '{version_retention_period}'\n)"
            )
        return statements


def retention_text(value: str | timedelta) -> str:
    """A version_retention_period as Spanner writes it: ``'1h'``, ``'3d'``, ``'90m'``, ``'30s'``."""
    if isinstance(value, timedelta):
        seconds = int(value.total_seconds())
        if seconds <= 0 or value != timedelta(seconds=seconds):
            raise SchemaError(
                f"version_retention_period {value} must be a positive whole number of seconds"
            )
        for unit in ("d", "h", "m"):
            if seconds % _DURATION_UNITS[unit] == 0:
                return f"{seconds // _DURATION_UNITS[unit]}{unit}"
        return f"{seconds}s"
    match = _DURATION.match(str(value))
    if not match or int(match.group(1)) <= 0:
        raise SchemaError(
            f"version_retention_period {value!r} is not a duration: write a positive whole number "
            f"followed by s, m, h or d, such as '1h' or '3d'"
        )
    return f"{int(match.group(1))}{match.group(2).lower()}"


def retention_micros(text: str) -> int:
    match = _DURATION.match(text)
    return int(match.group(1)) * _DURATION_UNITS[match.group(2).lower()] * 1_000_000
