"""The CDC view's fixtures: one state store and one api-server per test module.

The state store is a PostgreSQL database of the module (dropped after it) holding the
demo-like streams of :mod:`streams`; the api-server reaches it through the
``cdc_state_default`` connection, whose password is :data:`CANARY`: PostgreSQL on 127.0.0.1
trusts local connections, so the password is never needed, and it must never be shown.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

POSTGRES_ADMIN_URL = os.environ.get(
    "AIRFLOW_CDC_TEST_POSTGRES_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
)
CANARY = "canary-Pw-7c41e9d2"


@pytest.fixture(scope="module")
def state_database():
    """(URL with the canary password, the ``cdc_state`` connection as JSON) of a new database
    holding the demo-like streams; dropped after the module."""
    from .streams import build

    yield from filled_database(build)


def filled_database(build):
    """The ``state_database`` fixture's body: a new database filled by ``build(url)``, dropped
    after the module (a test module overrides ``state_database`` with its own streams)."""
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"cdc_ui_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        pytest.fail(f"PostgreSQL is not reachable at {make_url(POSTGRES_ADMIN_URL)} (user postgres, "
                    f"trust auth): `make services` starts it. Cause: {exc.orig}", pytrace=False)
    admin_url = make_url(POSTGRES_ADMIN_URL)
    url = admin_url.set(database=name, password=CANARY)
    build(url.render_as_string(hide_password=False))
    connection = json.dumps({
        "conn_type": "cdc_state", "host": admin_url.host, "port": admin_url.port or 5432,
        "login": admin_url.username, "password": CANARY, "schema": name,
    })
    yield url.render_as_string(hide_password=False), connection
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="module")
def view_server(state_database, tmp_path_factory):
    """Airflow's api-server with the CDC plugin on 127.0.0.1, reading ``state_database``."""
    from demo.ui import ViewServer

    _, connection = state_database
    with ViewServer(tmp_path_factory.mktemp("view-server"),
                    env={"AIRFLOW_CONN_CDC_STATE_DEFAULT": connection}) as server:
        yield server
