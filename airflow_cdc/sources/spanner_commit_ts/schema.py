"""The configured tables' schema from INFORMATION_SCHEMA, checked before a window is planned.

What a window read needs per table (its :class:`TablePlan`, kept in the plan file so a
re-run reads the same columns): the columns and their canonical types, the primary key, the
commit-timestamp column, whether the table is a change log (appended) or a plain table
(upserted), and its soft-delete column.

The checks (seed 003):

* the column exists and is a ``TIMESTAMP``;
* it is a commit-timestamp column (GoogleSQL: ``OPTIONS (allow_commit_timestamp=true)``,
  in ``INFORMATION_SCHEMA.COLUMN_OPTIONS``; PostgreSQL: type ``SPANNER.COMMIT_TIMESTAMP``).
  Otherwise the application writes the values, and a value written late (in the past) lands
  in a window already read: refused with the fix, unless ``trust_application_timestamps``
  (documented as unsafe), which turns the refusal into a warning;
* it is ``NOT NULL``. A row whose commit timestamp is NULL matches no window query (``col >= s
  AND col < e`` is never true for NULL), so it would never be captured, and a row overwritten
  with NULL would keep its older version in the target: a nullable column is refused naming
  the table, the column and the choices (backfill and declare it NOT NULL; or
  ``skip_null_rows: True`` in the table's entry, which reads it and warns in every plan that
  such rows are not captured). Under ``trust_application_timestamps`` a nullable column is
  read with that warning added;
* a commit-timestamp column that leads the primary key or a secondary index makes a hotspot
  (the seed's rule): a warning, the pipeline still reads it;
* the soft-delete column, if any, is a ``BOOL`` (deleted when true) or a ``TIMESTAMP``
  (deleted when not NULL).

No Airflow, no pyspark: :func:`read_schema` takes a google-cloud-spanner ``Database``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_cdc.sources.spanner.query import GOOGLE_SQL, POSTGRESQL
from airflow_cdc.sources.spanner_commit_ts.errors import CommitTimestampSchemaError
from airflow_cdc.sources.spanner_commit_ts.types import PG_COMMIT_TIMESTAMP, canonical_column_type

PLAIN, CHANGELOG, AUTO = "plain", "changelog", "auto"
TABLE_KINDS = (PLAIN, CHANGELOG, AUTO)

_QUERIES = {
    GOOGLE_SQL: {
        "columns": "SELECT TABLE_NAME, COLUMN_NAME, SPANNER_TYPE, ORDINAL_POSITION, IS_NULLABLE "
                   "FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_SCHEMA = ''",
        "options": "SELECT TABLE_NAME, COLUMN_NAME, OPTION_NAME, OPTION_VALUE "
                   "FROM INFORMATION_SCHEMA.COLUMN_OPTIONS WHERE TABLE_SCHEMA = ''",
        "indexes": "SELECT TABLE_NAME, INDEX_NAME, INDEX_TYPE, COLUMN_NAME, ORDINAL_POSITION "
                   "FROM INFORMATION_SCHEMA.INDEX_COLUMNS WHERE TABLE_SCHEMA = ''",
        "tables": "SELECT TABLE_NAME, PARENT_TABLE_NAME FROM INFORMATION_SCHEMA.TABLES "
                  "WHERE TABLE_SCHEMA = ''",
    },
    POSTGRESQL: {
        "columns": "SELECT table_name, column_name, spanner_type, ordinal_position, is_nullable "
                   "FROM information_schema.columns WHERE table_schema = 'public'",
        "options": None,  # the PostgreSQL dialect says it with the type SPANNER.COMMIT_TIMESTAMP
        "indexes": "SELECT table_name, index_name, index_type, column_name, ordinal_position "
                   "FROM information_schema.index_columns WHERE table_schema = 'public'",
        "tables": "SELECT table_name, parent_table_name FROM information_schema.tables "
                  "WHERE table_schema = 'public'",
    },
}


@dataclass(frozen=True)
class ColumnInfo:
    name: str
    spanner_type: str
    nullable: bool
    commit_timestamp: bool


@dataclass(frozen=True)
class TableInfo:
    """One table as INFORMATION_SCHEMA describes it."""

    name: str
    columns: tuple[ColumnInfo, ...]
    key: tuple[str, ...]
    parent: str | None = None
    indexes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # name -> key columns

    def column(self, name: str) -> ColumnInfo | None:
        exact = next((c for c in self.columns if c.name == name), None)
        if exact is not None:
            return exact
        folded = [c for c in self.columns if c.name.lower() == name.lower()]
        return folded[0] if len(folded) == 1 else None


@dataclass(frozen=True)
class TableConfig:
    """What the pipeline says about one table: its commit-timestamp column, its kind and its
    soft-delete column (the spec's ``tables`` entry)."""

    column: str
    kind: str = AUTO
    soft_delete: str | None = None
    skip_null_rows: bool = False  # read a nullable column, rows with NULL in it not captured

    @classmethod
    def parse(cls, table: str, value: Any) -> TableConfig:
        if isinstance(value, str):
            return cls(value)
        if not isinstance(value, Mapping) or not isinstance(value.get("column"), str):
            raise ValueError(
                f"tables[{table!r}] is {value!r}: give the commit-timestamp column's name, or "
                f"{{'column': <name>, 'kind': 'plain' | 'changelog', 'soft_delete': <column>, "
                f"'skip_null_rows': True | False}}"
            )
        skip = value.get("skip_null_rows", False)
        if not isinstance(skip, bool):
            raise ValueError(
                f"tables[{table!r}] skip_null_rows {skip!r} must be True or False: True reads a "
                f"nullable commit-timestamp column and leaves its NULL rows uncaptured"
            )
        kind = str(value.get("kind") or AUTO)
        if kind not in TABLE_KINDS:
            raise ValueError(
                f"tables[{table!r}] kind {kind!r} is not one of {', '.join(TABLE_KINDS)}: "
                f"'changelog' appends every row as a change (a table like the seed's "
                f"DocumentHistory), 'plain' upserts by key, 'auto' takes 'changelog' when the "
                f"commit-timestamp column is part of the primary key"
            )
        soft = value.get("soft_delete")
        if soft is not None and not isinstance(soft, str):
            raise ValueError(f"tables[{table!r}] soft_delete {soft!r} must be a column name")
        return cls(value["column"], kind, soft or None, skip)

    def to_json(self) -> dict:
        recorded = {"column": self.column, "kind": self.kind, "soft_delete": self.soft_delete}
        if self.skip_null_rows:  # only when set: the fingerprint of other streams stays as it was
            recorded["skip_null_rows"] = True
        return recorded


@dataclass(frozen=True)
class TablePlan:
    """How a window reads one table (kept in the plan file's options)."""

    table: str
    column: str
    kind: str  # PLAIN or CHANGELOG
    columns: tuple[tuple[str, str], ...]  # (name, canonical type), in table order
    keys: tuple[str, ...]
    soft_delete: str | None = None
    soft_delete_type: str | None = None  # BOOL or TIMESTAMP

    def to_json(self) -> dict:
        return {
            "table": self.table, "column": self.column, "kind": self.kind,
            "columns": [list(c) for c in self.columns], "keys": list(self.keys),
            "soft_delete": self.soft_delete, "soft_delete_type": self.soft_delete_type,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> TablePlan:
        return cls(
            table=data["table"], column=data["column"], kind=data["kind"],
            columns=tuple((str(n), str(t)) for n, t in data["columns"]),
            keys=tuple(data["keys"]), soft_delete=data.get("soft_delete"),
            soft_delete_type=data.get("soft_delete_type"),
        )

    @property
    def types(self) -> dict[str, str]:
        return dict(self.columns)


def read_schema(database, dialect: str) -> dict[str, TableInfo]:
    """The database's tables, from INFORMATION_SCHEMA, in one read-only snapshot."""
    queries = _QUERIES[dialect]
    with database.snapshot(multi_use=True) as snapshot:
        answers = {
            name: [tuple(row) for row in snapshot.execute_sql(sql)] if sql else []
            for name, sql in queries.items()
        }
    return schema_from_rows(answers["columns"], answers["options"], answers["indexes"],
                            answers["tables"], dialect)


def schema_from_rows(columns: Iterable, options: Iterable, indexes: Iterable, tables: Iterable,
                     dialect: str) -> dict[str, TableInfo]:
    """The rows of the four INFORMATION_SCHEMA queries -> {table: TableInfo}."""
    allowed = {
        (table, column) for table, column, option, value in options
        if str(option).lower() == "allow_commit_timestamp" and str(value).upper() == "TRUE"
    }
    by_table: dict[str, list] = {}
    for table, column, spanner_type, position, nullable in columns:
        by_table.setdefault(table, []).append((int(position or 0), column, spanner_type, nullable))
    keys: dict[str, list] = {}
    secondary: dict[tuple[str, str], list] = {}
    for table, index, index_type, column, position in indexes:
        if position is None:
            continue  # a STORING column: not part of the index key
        if str(index_type).upper() == "PRIMARY_KEY":
            keys.setdefault(table, []).append((int(position), column))
        else:
            secondary.setdefault((table, index), []).append((int(position), column))
    parents = {table: parent or None for table, parent in tables}
    schema = {}
    for table, found in by_table.items():
        infos = tuple(
            ColumnInfo(
                name=column,
                spanner_type=str(spanner_type),
                nullable=str(nullable).upper() == "YES",
                commit_timestamp=(
                    str(spanner_type).strip().lower() == PG_COMMIT_TIMESTAMP
                    if dialect == POSTGRESQL else (table, column) in allowed
                ),
            )
            for _, column, spanner_type, nullable in sorted(found, key=lambda f: f[0])
        )
        schema[table] = TableInfo(
            name=table,
            columns=infos,
            key=tuple(c for _, c in sorted(keys.get(table, []))),
            parent=parents.get(table),
            indexes={index: tuple(c for _, c in sorted(cols))
                     for (t, index), cols in sorted(secondary.items()) if t == table},
        )
    return schema


def plan_tables(
    schema: Mapping[str, TableInfo],
    tables: Mapping[str, TableConfig],
    *,
    database: str,
    dialect: str,
    trust_application_timestamps: bool = False,
) -> tuple[dict[str, TablePlan], list[str]]:
    """Check every configured table against ``schema``: ({table: TablePlan}, warnings).

    Raises :class:`CommitTimestampSchemaError` listing every problem found, each with its fix.
    """
    found = _Findings(database, dialect, trust_application_timestamps)
    plans: dict[str, TablePlan] = {}
    for name, config in tables.items():
        plan = found.plan(schema, name, config)
        if plan is not None:
            plans[name] = plan
    if found.problems:
        raise CommitTimestampSchemaError(
            f"the tables of database {database!r} cannot be read by commit timestamp: "
            + "; ".join(found.problems)
        )
    return plans, found.warnings


class _Findings:
    """The problems (each refusing the tables) and warnings of :func:`plan_tables`, table by
    table, in the order its checks find them."""

    def __init__(self, database: str, dialect: str, trust_application_timestamps: bool) -> None:
        self.database, self.dialect, self.trust = database, dialect, trust_application_timestamps
        self.problems: list[str] = []
        self.warnings: list[str] = []

    def plan(self, schema: Mapping[str, TableInfo], name: str, config: TableConfig) -> TablePlan | None:
        """The plan of table ``name``, or None when a problem stops its checks."""
        info = _find_table(schema, name)
        if info is None:
            self.problems.append(
                f"table {name!r} is not in database {self.database!r} (its tables: "
                f"{', '.join(sorted(schema)) or 'none'}): fix the name in tables="
            )
            return None
        column = self._commit_column(info, name, config)
        if column is None:
            return None
        soft = self._soft_delete(info, config)
        if soft is None:
            return None
        if not info.key:
            self.problems.append(f"table {info.name!r} has no primary key in INFORMATION_SCHEMA")
            return None
        kind = config.kind
        if kind == AUTO:
            kind = CHANGELOG if column.name in info.key else PLAIN
        return TablePlan(
            table=info.name,
            column=column.name,
            kind=kind,
            columns=tuple((c.name, canonical_column_type(c.spanner_type)) for c in info.columns),
            keys=info.key,
            soft_delete=soft[0],
            soft_delete_type=soft[1],
        )

    def _commit_column(self, info: TableInfo, name: str, config: TableConfig):
        """The table's commit-timestamp column, checked (None when it cannot be read by it)."""
        column = info.column(config.column)
        if column is None:
            self.problems.append(
                f"table {info.name!r} has no column {config.column!r} (its columns: "
                f"{', '.join(c.name for c in info.columns)}): name its commit-timestamp column "
                f"in tables="
            )
            return None
        if canonical_column_type(column.spanner_type) != "TIMESTAMP":
            self.problems.append(
                f"column {info.name}.{column.name} is {column.spanner_type}, not a TIMESTAMP: "
                f"name the table's commit-timestamp column in tables="
            )
            return None
        if not column.commit_timestamp:
            self._not_commit_timestamp(info, column)
        if column.nullable:
            if config.skip_null_rows or (self.trust and not column.commit_timestamp):
                self.warnings.append(_null_rows_warning(info.name, column.name, config.skip_null_rows))
            else:
                self.problems.append(_null_rows_problem(info.name, column.name, name, self.dialect))
        self.warnings.extend(_hotspots(info, column.name))
        return column

    def _not_commit_timestamp(self, info: TableInfo, column) -> None:
        fix = _commit_timestamp_fix(info.name, column.name, self.dialect)
        if self.trust:
            self.warnings.append(
                f"column {info.name}.{column.name} is not a commit-timestamp column; read "
                f"by its values because trust_application_timestamps=True (unsafe: a value "
                f"the application writes late, or in the past, lands in a window already "
                f"read and is never picked up). To make it safe: {fix}"
            )
        else:
            self.problems.append(
                f"column {info.name}.{column.name} is a TIMESTAMP without "
                f"allow_commit_timestamp=true, so its values are whatever the application "
                f"wrote and a window read by them can miss rows written late. Fix: {fix}; "
                f"or, knowing the risk, pass trust_application_timestamps=True"
            )

    def _soft_delete(self, info: TableInfo, config: TableConfig) -> tuple | None:
        """(soft-delete column, its canonical type), (None, None) without one; None when the
        configured one is not a BOOL or TIMESTAMP column."""
        if not config.soft_delete:
            return None, None
        soft_column = info.column(config.soft_delete)
        soft_type = None if soft_column is None else canonical_column_type(soft_column.spanner_type)
        if soft_column is None or soft_type not in ("BOOL", "TIMESTAMP"):
            self.problems.append(
                f"soft-delete column {config.soft_delete!r} of table {info.name!r} "
                + ("does not exist" if soft_column is None else f"is {soft_column.spanner_type}")
                + ": name a BOOL column (deleted when true) or a TIMESTAMP column (deleted "
                  "when not NULL)"
            )
            return None
        return soft_column.name, soft_type


def _find_table(schema: Mapping[str, TableInfo], name: str) -> TableInfo | None:
    if name in schema:
        return schema[name]
    folded = [info for table, info in schema.items() if table.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else None


def _commit_timestamp_fix(table: str, column: str, dialect: str) -> str:
    if dialect == POSTGRESQL:
        return (f"declare it as type SPANNER.COMMIT_TIMESTAMP and write it with "
                f"SPANNER.PENDING_COMMIT_TIMESTAMP() in every insert and update of {table}")
    return (f"ALTER TABLE {table} ALTER COLUMN {column} SET OPTIONS (allow_commit_timestamp=true), "
            f"and write it with PENDING_COMMIT_TIMESTAMP() (DML) or spanner.commit_timestamp() "
            f"(mutations) in every insert and update")


def _null_rows_problem(table: str, column: str, configured: str, dialect: str) -> str:
    """The refusal of a nullable commit-timestamp column, with the two ways on."""
    if dialect == POSTGRESQL:
        backfill = (f"UPDATE {table} SET {column} = SPANNER.PENDING_COMMIT_TIMESTAMP() WHERE "
                    f"{column} IS NULL, then ALTER TABLE {table} ALTER COLUMN {column} SET NOT "
                    f"NULL")
    else:
        backfill = (f"UPDATE {table} SET {column} = PENDING_COMMIT_TIMESTAMP() WHERE {column} "
                    f"IS NULL, then ALTER TABLE {table} ALTER COLUMN {column} TIMESTAMP NOT NULL "
                    f"OPTIONS (allow_commit_timestamp=true)")
    return (
        f"commit-timestamp column {table}.{column} is nullable: a row whose {column} is NULL "
        f"matches no window (NULL is never >= the window's start), so it would never be "
        f"captured, and a row overwritten with NULL would keep its older version in the target. "
        f"Choose one: (1) backfill and declare it NOT NULL: {backfill}, and write it in every "
        f"insert and update; or (2) knowing that rows with a NULL {column} are not captured, "
        f"give tables={{{configured!r}: {{'column': {column!r}, 'skip_null_rows': True}}}}"
    )


def _null_rows_warning(table: str, column: str, acknowledged: bool) -> str:
    why = "skip_null_rows=True" if acknowledged else "trust_application_timestamps=True"
    return (
        f"column {table}.{column} is nullable and read because {why}: rows whose {column} is "
        f"NULL are not captured, and a row overwritten with NULL keeps its older version in the "
        f"target. Backfill the column and declare it NOT NULL to capture every row"
    )


def _hotspots(info: TableInfo, column: str) -> list[str]:
    found = []
    if info.key and info.key[0] == column:
        found.append(
            f"table {info.name}'s primary key starts with its commit-timestamp column {column}: "
            f"every write lands on the key range's end, a hotspot that slows writes even at low "
            f"rates (seed 003). Put another column first (a hash or id) if you can"
        )
    for index, columns in info.indexes.items():
        if columns and columns[0] == column:
            found.append(
                f"index {index} on {info.name} starts with the commit-timestamp column {column}: "
                f"a hotspot (seed 003); the window reads do not need it"
            )
    return found
