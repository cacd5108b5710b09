"""How the state store connects: the default URL, and engines whose write transactions serialize.

SQLite (the embedded default) runs in WAL mode, so readers never wait for the writer, with a
busy timeout, so a writer waits for another instead of failing. Write transactions start with
``BEGIN IMMEDIATE``: they take the write lock before their first read, so two writers queue up
instead of both reading, then deadlocking when each tries to upgrade its lock. pysqlite issues
its own deferred ``BEGIN`` (and none before DDL), so it is switched off and SQLAlchemy emits the
``BEGIN`` itself: the recipe of SQLAlchemy's SQLite documentation, "Transactions with SQLite and
the sqlite3 driver". Reads keep a plain ``BEGIN``.

PostgreSQL needs nothing special here: transitions lock their stream's row themselves.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine, make_url

from airflow_cdc.state.errors import UnsupportedDatabaseError

STATE_URL_ENV = "AIRFLOW_CDC_STATE_URL"
DEFAULT_SQLITE_FILE = "cdc_state.db"
_WRITE = "airflow_cdc_write"  # execution option: this connection's transaction writes


def default_url() -> str:
    """``$AIRFLOW_CDC_STATE_URL`` if set, else the SQLite file ``cdc_state.db`` in AIRFLOW_HOME."""
    configured = os.environ.get(STATE_URL_ENV)
    if configured:
        return configured
    home = os.environ.get("AIRFLOW_HOME") or os.path.join(os.path.expanduser("~"), "airflow")
    path = os.path.join(os.path.abspath(os.path.expanduser(home)), DEFAULT_SQLITE_FILE)
    return URL.create("sqlite", database=path).render_as_string(hide_password=False)


def safe_url(url: str | URL) -> str:
    """The URL as it may appear in messages and logs: without its password."""
    return make_url(url).render_as_string(hide_password=True)


def make_engine(url: str | URL, busy_timeout_seconds: float = 30.0) -> Engine:
    """An engine for a ``sqlite`` or ``postgresql`` state store URL."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(parsed, busy_timeout_seconds)
    if backend == "postgresql":
        return create_engine(parsed, pool_pre_ping=True)
    raise UnsupportedDatabaseError(
        f"state store URL {safe_url(parsed)} uses {backend}: airflow-cdc keeps its state in "
        f"SQLite or PostgreSQL; use sqlite:////path/to/cdc_state.db or "
        f"postgresql://user@host:5432/database"
    )


def _sqlite_engine(url: URL, busy_timeout_seconds: float) -> Engine:
    database = url.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        # sqlite3 cannot create the file's folder; AIRFLOW_HOME may not exist yet.
        os.makedirs(os.path.dirname(os.path.abspath(database)), exist_ok=True)
    engine = create_engine(url)
    busy_ms = int(busy_timeout_seconds * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN, see _on_begin
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(
            "BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "BEGIN"
        )

    return engine


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """One write transaction: commits when the block ends, rolls back if it raises."""
    with engine.connect() as conn:
        conn.execution_options(**{_WRITE: True})
        with conn.begin():
            yield conn


@contextmanager
def read_transaction(engine: Engine) -> Iterator[Connection]:
    """One read-only transaction: a consistent snapshot that takes no write lock."""
    with engine.connect() as conn:
        with conn.begin():
            yield conn
