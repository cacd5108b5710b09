"""Every state test runs twice: on SQLite (a file in the test's tmp_path) and on PostgreSQL.

Each PostgreSQL test gets a schema of its own in a database made for the test session, both
dropped after use, so tests never see each other's rows. PostgreSQL must be running (CI starts
it): a test fails, never skips, when it is not, because the production store would then go
untested.
"""

from __future__ import annotations

import os
import uuid
from datetime import datetime, timedelta

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from airflow_cdc.model import UTC
from airflow_cdc.state import StateStore

POSTGRES_ADMIN_URL = os.environ.get(
    "AIRFLOW_CDC_TEST_POSTGRES_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
)


class FakeClock:
    """A clock the test moves by hand, so leases expire without waiting."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture(scope="session")
def postgres_database():
    """A database of this test session, dropped at its end: (its URL, an AUTOCOMMIT engine)."""
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"cdc_test_{uuid.uuid4().hex[:16]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {make_url(POSTGRES_ADMIN_URL).render_as_string()} "
            f"(user postgres, trust auth): start it (pg_ctlcluster --skip-systemctl-redirect "
            f"<version> main start) or point AIRFLOW_CDC_TEST_POSTGRES_URL at a server; every "
            f"state test runs on SQLite and on PostgreSQL. Cause: {exc.orig}",
            pytrace=False,
        )
    url = make_url(POSTGRES_ADMIN_URL).set(database=name)
    session_db = create_engine(url, isolation_level="AUTOCOMMIT")
    yield url, session_db
    session_db.dispose()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def state_url(request, tmp_path):
    """The URL of an empty database of the parametrized kind.

    On PostgreSQL each test gets a fresh schema of the session's database, made the URL's
    search_path: as isolated as a database of its own, at a fraction of CREATE DATABASE's cost.
    """
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'cdc_state.db'}"
        return
    database_url, session_db = request.getfixturevalue("postgres_database")
    schema = f"t_{uuid.uuid4().hex[:16]}"
    with session_db.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        url = database_url.update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with session_db.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2030, 1, 1, 12, 0, tzinfo=UTC))


@pytest.fixture
def store(state_url, clock):
    """A migrated store on the parametrized database, on the test's fake clock."""
    with StateStore(state_url, clock=clock) as opened:
        opened.migrate()
        yield opened


@pytest.fixture
def orders(store):
    """The store with stream ``orders`` registered."""
    store.register_stream("orders", "spanner", "fingerprint-1")
    return store
