"""The prepared state store of the Airflow-side tests (see cdc_airflow_support)."""

from __future__ import annotations

import pytest

from airflow_cdc.state import StateStore


@pytest.fixture
def store(tmp_path, monkeypatch):
    """An empty state store with stream ``orders``, reached as tasks reach it.

    Tasks use the default ``cdc_state`` connection, which falls back to
    ``$AIRFLOW_CDC_STATE_URL``.
    """
    url = f"sqlite:///{tmp_path / 'cdc_state.db'}"
    monkeypatch.setenv("AIRFLOW_CDC_STATE_URL", url)
    store = StateStore(url)
    store.migrate()
    store.register_stream("orders", "test", "f")
    return store
