"""Hook for the state store: turns a ``cdc_state`` Airflow Connection into a StateStore.

The state store holds partition tokens, watermarks and window states (ARCHITECTURE.md,
"State tables"). It is our own database, never the Airflow metadata DB: Airflow 3 task code
may not touch that one.

Connection forms, in order of precedence:

* extra ``url``: any SQLAlchemy URL (``postgresql+psycopg2://user@host:5432/cdc``);
* host set: PostgreSQL from host, port, login, password and schema (the database name);
* otherwise SQLite, at extra ``path`` or the default file ``cdc_state.db`` in AIRFLOW_HOME.

When the connection id is the default (``cdc_state_default``) and no such connection exists,
the embedded SQLite default is used, so a laptop needs no configuration.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.providers.common.compat.sdk import AirflowNotFoundException, BaseHook

DEFAULT_CONN_ID = "cdc_state_default"


class CdcStateHook(BaseHook):
    """Connects to the airflow-cdc state store named by an Airflow Connection.

    :param cdc_state_conn_id: the state store's connection (type ``cdc_state``).
    """

    conn_name_attr = "cdc_state_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "cdc_state"
    hook_name = "airflow-cdc state store"

    def __init__(self, cdc_state_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cdc_state_conn_id = cdc_state_conn_id
        self._store = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        # Airflow < 3.2 reads this method; 3.2+ reads the same facts from provider info.
        return {
            "hidden_fields": [],
            "relabeling": {"schema": "Database"},
            "placeholders": {
                "host": "empty for the embedded SQLite store",
                "schema": "cdc_state",
                "port": "5432",
            },
        }

    def get_url(self) -> str:
        """The SQLAlchemy URL of the state store (may carry a password: never log it)."""
        from airflow_cdc.state import StateStore

        try:
            conn = self.get_connection(self.cdc_state_conn_id)
        except AirflowNotFoundException:
            if self.cdc_state_conn_id != DEFAULT_CONN_ID:
                raise
            return StateStore.default_url()
        return url_from_connection(
            host=conn.host,
            port=conn.port,
            login=conn.login,
            password=conn.password,
            schema=conn.schema,
            extra=conn.extra_dejson,
        )

    def get_store(self):
        """The StateStore, migrated to the current schema; cached on the hook."""
        if self._store is None:
            from airflow_cdc.state import StateStore

            self._store = StateStore(self.get_url())
            self._store.migrate()
        return self._store

    def test_connection(self) -> tuple[bool, str]:
        try:
            store = self.get_store()
            return True, f"state store reachable, schema version {store.schema_version()}"
        except Exception as exc:
            return False, str(exc)


def url_from_connection(
    host: str | None,
    port: int | None,
    login: str | None,
    password: str | None,
    schema: str | None,
    extra: dict,
) -> str:
    """Build the state store URL from connection fields (see the module docstring)."""
    if extra.get("url"):
        return str(extra["url"])
    if host:
        auth = ""
        if login:
            auth = quote(login, safe="")
            if password:
                auth += ":" + quote(password, safe="")
            auth += "@"
        port_part = f":{port}" if port else ""
        return f"postgresql+psycopg2://{auth}{host}{port_part}/{schema or 'cdc_state'}"
    if extra.get("path"):
        return f"sqlite:///{extra['path']}"
    from airflow_cdc.state import StateStore

    return StateStore.default_url()
