"""The cdc_state connection resolves to a migrated state store; without one, SQLite is used."""

from __future__ import annotations

import json

import pytest

from airflow_cdc.hooks.state import CdcStateHook, url_from_connection
from airflow_cdc.state.migrations import HEAD_VERSION


def test_connection_url_extra_gives_a_migrated_store(state_url, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_CDC_STATE_TEST", json.dumps({"conn_type": "cdc_state", "extra": {"url": state_url}})
    )
    store = CdcStateHook(cdc_state_conn_id="cdc_state_test").get_store()
    assert store.schema_version() == HEAD_VERSION
    store.register_stream("orders", "spanner_change_stream", "f1")
    assert [s.stream_id for s in store.streams()] == ["orders"]


def test_missing_default_connection_falls_back_to_sqlite_in_airflow_home(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.delenv("AIRFLOW_CDC_STATE_URL", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_CDC_STATE_DEFAULT", raising=False)
    hook = CdcStateHook()
    assert hook.get_url() == f"sqlite:///{tmp_path / 'cdc_state.db'}"
    hook.get_store()
    assert (tmp_path / "cdc_state.db").exists()


def test_missing_named_connection_is_an_error(monkeypatch):
    from airflow.providers.common.compat.sdk import AirflowNotFoundException

    with pytest.raises(AirflowNotFoundException, match="cdc_state_nowhere"):
        CdcStateHook(cdc_state_conn_id="cdc_state_nowhere").get_url()


def test_host_fields_build_a_postgresql_url_with_escaped_credentials():
    url = url_from_connection("db.internal", 5432, "cdc", "p@ss/word", "cdc_state", {})
    assert url == "postgresql+psycopg2://cdc:p%40ss%2Fword@db.internal:5432/cdc_state"


def test_sqlite_path_extra_is_used_without_a_host(tmp_path):
    path = tmp_path / "state.db"
    assert url_from_connection(None, None, None, None, None, {"path": str(path)}) == f"sqlite:///{path}"
