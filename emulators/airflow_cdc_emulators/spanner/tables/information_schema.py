"""INFORMATION_SCHEMA views of the served schema, with Cloud Spanner's names and value formats.

Views: COLUMNS, COLUMN_OPTIONS, INDEX_COLUMNS, INDEXES, TABLES, DATABASE_OPTIONS. GoogleSQL
names them and their columns in upper case, with TABLE_SCHEMA ``''`` for user tables;
PostgreSQL in lower case, with table_schema ``'public'``. The views list themselves too
(schema ``INFORMATION_SCHEMA`` / ``information_schema``), which is why readers filter on the
schema, as with real Spanner.

* COLUMNS.SPANNER_TYPE: ``STRING(MAX)``, ``INT64``, ``ARRAY<STRING(MAX)>``, ``TIMESTAMP``
  (GoogleSQL); ``character varying``, ``bigint``, ``bigint[]``, ``timestamp with time zone``,
  and ``spanner.commit_timestamp`` for a commit timestamp column (PostgreSQL).
  IS_NULLABLE ``'YES'`` / ``'NO'``.
* COLUMN_OPTIONS: ``allow_commit_timestamp`` / ``TRUE`` for commit timestamp columns (GoogleSQL;
  a PostgreSQL database declares them by type and has no such options).
* INDEX_COLUMNS: the primary key as index ``PRIMARY_KEY`` of type ``PRIMARY_KEY``, secondary
  indexes of type ``INDEX``; ORDINAL_POSITION 1-based, NULL for STORING columns.
* TABLES: TABLE_TYPE ``BASE TABLE`` (``VIEW`` for the views), PARENT_TABLE_NAME and
  ON_DELETE_ACTION of interleaved tables.
"""

from __future__ import annotations

from ..schema import POSTGRESQL, SpannerType
from .definition import ColumnSpec, DatabaseSchema

_S, _I, _B = SpannerType("STRING"), SpannerType("INT64"), SpannerType("BOOL")
_CATALOG = (("TABLE_CATALOG", _S), ("TABLE_SCHEMA", _S), ("TABLE_NAME", _S))
VIEWS: dict[str, tuple[tuple[str, SpannerType], ...]] = {
    "COLUMNS": (
        *_CATALOG,
        ("COLUMN_NAME", _S),
        ("ORDINAL_POSITION", _I),
        ("COLUMN_DEFAULT", _S),
        ("DATA_TYPE", _S),
        ("IS_NULLABLE", _S),
        ("SPANNER_TYPE", _S),
        ("IS_GENERATED", _S),
        ("GENERATION_EXPRESSION", _S),
        ("IS_STORED", _S),
        ("SPANNER_STATE", _S),
    ),
    "COLUMN_OPTIONS": (
        *_CATALOG,
        ("COLUMN_NAME", _S),
        ("OPTION_NAME", _S),
        ("OPTION_TYPE", _S),
        ("OPTION_VALUE", _S),
    ),
    "INDEX_COLUMNS": (
        *_CATALOG,
        ("INDEX_NAME", _S),
        ("INDEX_TYPE", _S),
        ("COLUMN_NAME", _S),
        ("ORDINAL_POSITION", _I),
        ("COLUMN_ORDERING", _S),
        ("IS_NULLABLE", _S),
        ("SPANNER_TYPE", _S),
    ),
    "INDEXES": (
        *_CATALOG,
        ("INDEX_NAME", _S),
        ("INDEX_TYPE", _S),
        ("PARENT_TABLE_NAME", _S),
        ("IS_UNIQUE", _B),
        ("IS_NULL_FILTERED", _B),
        ("INDEX_STATE", _S),
        ("SPANNER_IS_MANAGED", _B),
    ),
    "TABLES": (
        *_CATALOG,
        ("TABLE_TYPE", _S),
        ("PARENT_TABLE_NAME", _S),
        ("ON_DELETE_ACTION", _S),
        ("SPANNER_STATE", _S),
        ("INTERLEAVE_TYPE", _S),
        ("ROW_DELETION_POLICY_EXPRESSION", _S),
    ),
    "DATABASE_OPTIONS": (
        ("CATALOG_NAME", _S),
        ("SCHEMA_NAME", _S),
        ("OPTION_NAME", _S),
        ("OPTION_TYPE", _S),
        ("OPTION_VALUE", _S),
    ),
}


def view_columns(name: str, dialect: str) -> tuple[ColumnSpec, ...] | None:
    """The columns of INFORMATION_SCHEMA.<name> (None: no such view)."""
    columns = VIEWS.get(name.upper())
    if columns is None:
        return None
    postgresql = dialect == POSTGRESQL
    return tuple(
        ColumnSpec(
            column.lower() if postgresql else column,
            _S if postgresql and kind == _B else kind,
        )
        for column, kind in columns
    )


def view_rows(
    name: str, schema: DatabaseSchema, dialect: str, database_id: str, retention: str
) -> list[dict]:
    """The rows of INFORMATION_SCHEMA.<name>, keyed by the dialect's column names."""
    postgresql = dialect == POSTGRESQL
    user_schema = "public" if postgresql else ""
    own_schema = "information_schema" if postgresql else "INFORMATION_SCHEMA"
    catalog = database_id if postgresql else ""

    def flag(value: bool):
        return ("YES" if value else "NO") if postgresql else value

    rows: list[dict] = []
    name = name.upper()
    if name == "COLUMNS":
        for table in schema.tables:
            for position, column in enumerate(table.columns, start=1):
                spanner_type = column.spanner_type(dialect)
                rows.append({
                    "TABLE_CATALOG": catalog, "TABLE_SCHEMA": user_schema,
                    "TABLE_NAME": table.name, "COLUMN_NAME": column.name,
                    "ORDINAL_POSITION": position, "COLUMN_DEFAULT": None,
                    "DATA_TYPE": _data_type(column, spanner_type) if postgresql else None,
                    "IS_NULLABLE": "YES" if column.nullable else "NO",
                    "SPANNER_TYPE": spanner_type, "IS_GENERATED": "NEVER",
                    "GENERATION_EXPRESSION": None, "IS_STORED": None,
                    "SPANNER_STATE": "COMMITTED",
                })  # fmt: skip
        for view in VIEWS:
            for position, column in enumerate(view_columns(view, dialect), start=1):
                spanner_type = column.spanner_type(dialect)
                rows.append({
                    "TABLE_CATALOG": catalog, "TABLE_SCHEMA": own_schema,
                    "TABLE_NAME": view.lower() if postgresql else view,
                    "COLUMN_NAME": column.name, "ORDINAL_POSITION": position,
                    "COLUMN_DEFAULT": None,
                    "DATA_TYPE": _data_type(column, spanner_type) if postgresql else None,
                    "IS_NULLABLE": "YES", "SPANNER_TYPE": spanner_type, "IS_GENERATED": "NEVER",
                    "GENERATION_EXPRESSION": None, "IS_STORED": None, "SPANNER_STATE": None,
                })  # fmt: skip
    elif name == "COLUMN_OPTIONS":
        if not postgresql:
            for table in schema.tables:
                for column in table.commit_timestamp_columns:
                    rows.append({
                        "TABLE_CATALOG": catalog, "TABLE_SCHEMA": user_schema,
                        "TABLE_NAME": table.name, "COLUMN_NAME": column.name,
                        "OPTION_NAME": "allow_commit_timestamp", "OPTION_TYPE": "BOOL",
                        "OPTION_VALUE": "TRUE",
                    })  # fmt: skip
    elif name == "INDEX_COLUMNS":
        for table in schema.tables:
            for position, column in enumerate(table.key_columns, start=1):
                rows.append(_index_column(catalog, user_schema, table.name, "PRIMARY_KEY",
                                          "PRIMARY_KEY", column, position, dialect))  # fmt: skip
            for index in (i for i in schema.indexes if i.table == table.name):
                for position, column_name in enumerate(index.columns, start=1):
                    rows.append(_index_column(catalog, user_schema, table.name, index.name,
                                              "INDEX", table.column(column_name), position,
                                              dialect))  # fmt: skip
                for column_name in index.storing:
                    rows.append(_index_column(catalog, user_schema, table.name, index.name,
                                              "INDEX", table.column(column_name), None,
                                              dialect))  # fmt: skip
    elif name == "INDEXES":
        for table in schema.tables:
            rows.append({
                "TABLE_CATALOG": catalog, "TABLE_SCHEMA": user_schema, "TABLE_NAME": table.name,
                "INDEX_NAME": "PRIMARY_KEY", "INDEX_TYPE": "PRIMARY_KEY",
                "PARENT_TABLE_NAME": "", "IS_UNIQUE": flag(True), "IS_NULL_FILTERED": flag(False),
                "INDEX_STATE": None, "SPANNER_IS_MANAGED": flag(False),
            })  # fmt: skip
            for index in (i for i in schema.indexes if i.table == table.name):
                rows.append({
                    "TABLE_CATALOG": catalog, "TABLE_SCHEMA": user_schema,
                    "TABLE_NAME": table.name, "INDEX_NAME": index.name, "INDEX_TYPE": "INDEX",
                    "PARENT_TABLE_NAME": "", "IS_UNIQUE": flag(index.unique),
                    "IS_NULL_FILTERED": flag(index.null_filtered), "INDEX_STATE": "READ_WRITE",
                    "SPANNER_IS_MANAGED": flag(False),
                })  # fmt: skip
    elif name == "TABLES":
        for table in schema.tables:
            rows.append({
                "TABLE_CATALOG": catalog, "TABLE_SCHEMA": user_schema, "TABLE_NAME": table.name,
                "TABLE_TYPE": "BASE TABLE", "PARENT_TABLE_NAME": table.parent,
                "ON_DELETE_ACTION": table.on_delete if table.parent else None,
                "SPANNER_STATE": "COMMITTED",
                "INTERLEAVE_TYPE": "IN PARENT" if table.parent else None,
                "ROW_DELETION_POLICY_EXPRESSION": None,
            })  # fmt: skip
        for view in VIEWS:
            rows.append({
                "TABLE_CATALOG": catalog, "TABLE_SCHEMA": own_schema,
                "TABLE_NAME": view.lower() if postgresql else view, "TABLE_TYPE": "VIEW",
                "PARENT_TABLE_NAME": None, "ON_DELETE_ACTION": None, "SPANNER_STATE": None,
                "INTERLEAVE_TYPE": None, "ROW_DELETION_POLICY_EXPRESSION": None,
            })  # fmt: skip
    elif name == "DATABASE_OPTIONS":
        for option, value in (
            ("database_dialect", dialect),
            ("version_retention_period", retention),
        ):
            rows.append({
                "CATALOG_NAME": catalog, "SCHEMA_NAME": user_schema, "OPTION_NAME": option,
                "OPTION_TYPE": "STRING", "OPTION_VALUE": value,
            })  # fmt: skip
    if postgresql:
        rows = [{key.lower(): value for key, value in row.items()} for row in rows]
    return rows


def _index_column(catalog, schema_name, table, index, kind, column, position, dialect) -> dict:
    return {
        "TABLE_CATALOG": catalog,
        "TABLE_SCHEMA": schema_name,
        "TABLE_NAME": table,
        "INDEX_NAME": index,
        "INDEX_TYPE": kind,
        "COLUMN_NAME": column.name,
        "ORDINAL_POSITION": position,
        "COLUMN_ORDERING": "ASC" if position is not None else None,
        "IS_NULLABLE": "YES" if column.nullable else "NO",
        "SPANNER_TYPE": column.spanner_type(dialect),
    }


def _data_type(column: ColumnSpec, spanner_type: str) -> str:
    """PostgreSQL's standard DATA_TYPE: the type, or ``ARRAY`` for arrays."""
    return "ARRAY" if column.type.element is not None else spanner_type
