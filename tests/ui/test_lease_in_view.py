"""The CDC view names who holds a stream's open window and until when (its lease), so a
window waiting on a run that died is visible from outside, as in ``airflow-cdc status``."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc.model import PartitionPosition, Window, format_ts
from airflow_cdc.state import StateStore

from .conftest import filled_database

DAG_ID, RUN_ID = "cdc_orders", "scheduled__2024-05-01T10:00:00+00:00"
WINDOW = Window("orders", datetime(2024, 5, 1, 9, tzinfo=timezone.utc),
                datetime(2024, 5, 1, 10, tzinfo=timezone.utc))
LEASED = {}


def one_leased_window(url: str) -> None:
    """Stream ``orders``: its first window planned by DAG_ID / RUN_ID, leased for 10 minutes."""
    store = StateStore(url)
    store.migrate()
    store.register_stream("orders", "datastream", "fp")
    store.plan_window(WINDOW, f"{DAG_ID}/{RUN_ID}", 600, [PartitionPosition("a", WINDOW.start)])
    LEASED["expires_at"] = format_ts(store.get_window("orders", WINDOW.start).lease_expires_at)
    store.close()


@pytest.fixture(scope="module")
def state_database():
    yield from filled_database(one_leased_window)


def get_json(server, path):
    code, _, body = server.get(path, server.token("viewer"))
    assert code == 200, body[:500]
    return json.loads(body)


def expected_lease() -> dict:
    return {"owner": f"{DAG_ID}/{RUN_ID}", "run": {"dag_id": DAG_ID, "run_id": RUN_ID},
            "expires_at": LEASED["expires_at"], "live": True}


def test_the_streams_list_names_the_holder_of_the_newest_window_and_its_expiry(view_server):
    [stream] = get_json(view_server, "/cdc/api/streams")["streams"]
    lease = stream["lease"]
    assert {k: lease[k] for k in expected_lease()} == expected_lease()
    assert timedelta(minutes=8) < timedelta(seconds=lease["expires_in_seconds"]) <= timedelta(minutes=10)


def test_a_streams_open_window_names_its_lease_holder_and_expiry(view_server):
    [window] = get_json(view_server, "/cdc/api/streams/orders")["windows"]
    assert window["state"] == "PLANNED"
    assert {k: window["lease"][k] for k in expected_lease()} == expected_lease()


def test_the_page_shows_who_holds_the_open_window_and_until_when(view_server):
    from demo.ui import chromium, log_in, open_view

    driver = chromium()
    try:
        log_in(driver, view_server)
        seen = open_view(driver, view_server, stream="orders")
    finally:
        driver.quit()
    expires = LEASED["expires_at"][:19].replace("T", " ")
    assert f"leased to {DAG_ID} / {RUN_ID} until {expires} UTC (in " in seen.text
