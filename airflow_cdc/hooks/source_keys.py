"""Reads the primary-key columns of source tables through an Airflow connection to the source.

Change sources do not always say which columns key a row (Datastream's Oracle events carry
only a ROWID). The source database knows: SQLAlchemy's inspector
(``get_pk_constraint(table, schema)``) asks it in each dialect's own catalog, so the same code
reads Oracle, SQL Server, PostgreSQL and MySQL.

The engine comes from the connection's own provider hook when that provider is installed (a
``DbApiHook``: it knows its driver and connection extras); otherwise from the connection's
fields with the driver Airflow's provider for that connection type uses.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow.providers.common.compat.sdk import AirflowException, BaseHook

# Connection type -> SQLAlchemy driver name, used when the type's provider is not installed.
DRIVERS = {
    "postgres": "postgresql+psycopg2",
    "postgresql": "postgresql+psycopg2",
    "oracle": "oracle+oracledb",
    "mssql": "mssql+pymssql",
    "mysql": "mysql+mysqldb",
}


class SourceKeyLookupError(AirflowException):
    """A table's primary key could not be read from the source database."""


class SourcePrimaryKeyHook(BaseHook):
    """Looks up primary keys of source tables through the connection ``source_conn_id``.

    :param source_conn_id: a connection to the source database (its type names the database).
    """

    conn_name_attr = "source_conn_id"
    hook_name = "airflow-cdc source primary keys"

    def __init__(self, source_conn_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_id = source_conn_id

    def get_sqlalchemy_engine(self):
        conn = self.get_connection(self.source_conn_id)
        try:
            provider_hook = conn.get_hook()
        except (AirflowException, ImportError):
            # No provider installed for this connection type: build the engine ourselves.
            provider_hook = None
        if provider_hook is not None and hasattr(provider_hook, "get_sqlalchemy_engine"):
            return provider_hook.get_sqlalchemy_engine()
        from sqlalchemy import create_engine
        from sqlalchemy.engine import URL

        driver = DRIVERS.get(conn.conn_type or "")
        if driver is None:
            raise SourceKeyLookupError(
                f"connection {self.source_conn_id!r} has type {conn.conn_type!r}, which is "
                f"not a database this hook can reach without its provider: install the "
                f"provider of that database, or use a connection of type "
                f"{sorted(set(DRIVERS))}"
            )
        url = URL.create(
            driver,
            username=conn.login or None,
            password=conn.password or None,
            host=conn.host or None,
            port=conn.port or None,
            database=conn.schema or None,
        )
        return create_engine(url)

    def primary_keys(self, tables: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[str]]:
        """{(schema, table): primary-key columns} of ``tables``; [] for a table without one.

        Names are passed and returned as the database stores them (Oracle's dictionary
        is upper case, and so are the column names in Datastream's Oracle payloads); a table
        the connection cannot see is an error, never silently keyless.
        """
        from sqlalchemy import inspect

        wanted = list(dict.fromkeys(tables))
        if not wanted:
            return {}
        engine = self.get_sqlalchemy_engine()
        dialect = engine.dialect
        found: dict[tuple[str, str], list[str]] = {}
        try:
            inspector = inspect(engine)
            for schema, table in wanted:
                if not inspector.has_table(table, schema=schema):
                    raise SourceKeyLookupError(
                        f"table {schema}.{table} was not found through connection "
                        f"{self.source_conn_id!r}: name it in source_tables exactly as the "
                        f"source database spells it (as in Datastream's object names; Oracle: "
                        f"upper case), or declare its key columns in key_columns"
                    )
                constraint = inspector.get_pk_constraint(table, schema=schema)
                columns = constraint.get("constrained_columns") or []
                if getattr(dialect, "requires_name_normalize", False):
                    # Such dialects (Oracle) hand back case-insensitive names in lower case.
                    columns = [dialect.denormalize_name(c) for c in columns]
                found[(schema, table)] = list(columns)
        finally:
            engine.dispose()
        return found
