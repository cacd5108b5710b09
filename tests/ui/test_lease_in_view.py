"""The CDC view names who holds a stream's open window and until when (its lease), so a
window waiting on a run that died is visible from outside, as in ``airflow-cdc status``; and
which intervals a catch-up window read for the DAG runs after its own."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc.model import PartitionOutcome, PartitionPosition, Window, format_ts
from airflow_cdc.state import StateStore

from .conftest import filled_database

DAG_ID, RUN_ID = "cdc_orders", "scheduled__2024-05-01T10:00:00+00:00"
WINDOW = Window("orders", datetime(2024, 5, 1, 9, tzinfo=timezone.utc),
                datetime(2024, 5, 1, 10, tzinfo=timezone.utc))
LEASED = {}
MINUTE = timedelta(minutes=1)
CATCHUP = Window("payments", WINDOW.start, WINDOW.start + 3 * MINUTE)


def one_leased_window(url: str) -> None:
    """Stream ``orders``: its first window planned by DAG_ID / RUN_ID, leased for 10 minutes.
    Stream ``payments``: one catch-up window over three 1-minute intervals, complete, whose
    two later intervals' runs recorded it."""
    store = StateStore(url)
    store.migrate()
    store.register_stream("orders", "datastream", "fp")
    store.plan_window(WINDOW, f"{DAG_ID}/{RUN_ID}", 600, [PartitionPosition("a", WINDOW.start)])
    LEASED["expires_at"] = format_ts(store.get_window("orders", WINDOW.start).lease_expires_at)
    store.register_stream("payments", "datastream", "fp")
    store.plan_window(CATCHUP, "cdc_payments/run", 600, [PartitionPosition("a", CATCHUP.start)])
    store.mark_extracted(CATCHUP, "cdc_payments/run", 1)
    store.commit_window(CATCHUP, "cdc_payments/run",
                        [PartitionOutcome("a", False, CATCHUP.end)], {"changes": 3})
    store.mark_applied(CATCHUP, "cdc_payments/run", {"lake.current.payments": 3})
    store.mark_complete(CATCHUP)
    for n in (1, 2):
        store.record_covered_interval(
            Window("payments", CATCHUP.start + n * MINUTE, CATCHUP.start + (n + 1) * MINUTE))
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
    streams = {s["stream_id"]: s for s in get_json(view_server, "/cdc/api/streams")["streams"]}
    lease = streams["orders"]["lease"]
    assert {k: lease[k] for k in expected_lease()} == expected_lease()
    assert timedelta(minutes=8) < timedelta(seconds=lease["expires_in_seconds"]) <= timedelta(minutes=10)


def test_a_streams_open_window_names_its_lease_holder_and_expiry(view_server):
    [window] = get_json(view_server, "/cdc/api/streams/orders")["windows"]
    assert window["state"] == "PLANNED"
    assert {k: window["lease"][k] for k in expected_lease()} == expected_lease()


def test_a_catchup_window_lists_the_intervals_it_read_for_later_runs(view_server):
    [window] = get_json(view_server, "/cdc/api/streams/payments")["windows"]
    assert (window["start"], window["end"], window["state"]) == (
        format_ts(CATCHUP.start), format_ts(CATCHUP.end), "COMPLETE")
    assert [(c["start"], c["end"]) for c in window["covered_intervals"]] == [
        (format_ts(CATCHUP.start + n * MINUTE), format_ts(CATCHUP.start + (n + 1) * MINUTE))
        for n in (1, 2)]


@pytest.fixture(scope="module")
def pages(view_server):
    """The view's text for each stream, as headless Chromium shows it after logging in."""
    from demo.ui import chromium, log_in, open_view

    driver = chromium()
    try:
        log_in(driver, view_server)
        yield {stream: open_view(driver, view_server, stream=stream).text
               for stream in ("orders", "payments")}
    finally:
        driver.quit()


def test_the_page_shows_who_holds_the_open_window_and_until_when(pages):
    expires = LEASED["expires_at"][:19].replace("T", " ")
    assert f"leased to {DAG_ID} / {RUN_ID} until {expires} UTC (in " in pages["orders"]


def test_the_page_says_how_many_intervals_a_catchup_window_covers(pages):
    assert "catch-up: covers 2 intervals" in pages["payments"]
