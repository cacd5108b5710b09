"""The CDC view as Airflow's api-server serves it, and as a person sees it in a browser.

One real ``airflow api-server`` on 127.0.0.1 for the module (the CDC plugin comes with the
installed package), on a PostgreSQL state store holding demo-like streams (``streams.py``):
its API through HTTP with and without a login, then the page in headless Chromium: log in on
Airflow's login page, open the CDC page of the navigation, read the tables, save a screenshot.
"""

from __future__ import annotations

import json

import pytest

from .conftest import CANARY

STREAMS_IN_ATTENTION_ORDER = ["shop", "allchanges", "events"]  # failed, waiting, ok
PATHS = [
    "/cdc/",
    "/cdc/static/view.js",
    "/cdc/api/streams",
    "/cdc/api/streams/allchanges",
    "/cdc/api/streams/allchanges/chart.svg",
    "/cdc/api/streams/allchanges/chart.png",
]


@pytest.fixture(scope="module")
def token(view_server):
    return view_server.token("viewer")


def get_json(server, path, token):
    code, _, body = server.get(path, token)
    assert code == 200, body[:500]
    return json.loads(body)


@pytest.mark.parametrize("path", PATHS)
def test_an_anonymous_request_gets_401_and_no_data(view_server, path):
    code, _, body = view_server.get(path)
    assert code == 401
    assert b"allchanges" not in body and b"<table" not in body and b"fetch(" not in body


def test_a_request_with_a_forged_token_gets_403(view_server):
    code, _, body = view_server.get("/cdc/api/streams", token="eyJhbGciOiJIUzI1NiJ9.e30.forged")
    assert code == 403 and b"allchanges" not in body


def test_the_plugin_page_is_in_airflows_navigation(view_server, token):
    plugins = get_json(view_server, "/api/v2/plugins", token)["plugins"]
    [cdc] = [p for p in plugins if p["name"] == "airflow_cdc"]
    assert cdc["external_views"][0]["url_route"] == "cdc"
    assert cdc["fastapi_apps"][0]["url_prefix"] == "/cdc"


def test_streams_show_state_last_complete_window_freshness_lag_and_partitions(view_server, token):
    streams = {s["stream_id"]: s for s in get_json(view_server, "/cdc/api/streams", token)["streams"]}
    assert sorted(streams) == sorted(STREAMS_IN_ATTENTION_ORDER)
    allchanges = streams["allchanges"]
    assert (allchanges["source_kind"], allchanges["state"]) == ("spanner_change_stream", "waiting")
    assert allchanges["windows_by_state"] == {"APPLIED": 1, "COMPLETE": 7}
    assert (allchanges["live_partitions"], allchanges["lagging_partitions"]) == (3, 1)
    assert allchanges["lag_seconds"] == 12 * 60
    assert allchanges["last_complete_window"]["end"] == allchanges["newest_window"]["start"]
    assert allchanges["freshness_seconds"] > 30 * 60  # the last complete window ended before
    assert (streams["shop"]["state"], streams["events"]["state"]) == ("failed", "ok")


def test_a_stream_lists_open_windows_first_with_steps_gate_reason_and_dag_run(view_server, token):
    data = get_json(view_server, "/cdc/api/streams/allchanges", token)
    windows = data["windows"]
    open_window, newest_complete = windows[0], windows[1]
    assert [w["state"] for w in windows] == ["APPLIED"] + ["COMPLETE"] * 7
    assert "1 partition(s) hold the low watermark" in open_window["gate_reason"]
    assert "lowest p0-b2" in open_window["gate_reason"]
    assert set(newest_complete["step_seconds"]) == {"plan", "extract", "commit", "apply", "gate"}
    assert newest_complete["delay_seconds"] > 0 and newest_complete["gate_reason"] is None
    assert newest_complete["run"]["dag_id"] == "spanner_change_stream_to_iceberg"


def test_a_failed_window_shows_its_reason_and_dead_letters_add_up(view_server, token):
    windows = get_json(view_server, "/cdc/api/streams/shop", token)["windows"]
    assert windows[0]["state"] == "FAILED"
    assert "Spark driver lost" in windows[0]["failure_reason"]
    # extract's dead letters (counts) plus apply's (its step's details) for window 2
    assert [w["dead_letters"] for w in windows[1:]] == [0, 3, 1, 0]


def test_partitions_come_lagging_first_with_since_when(view_server, token):
    partitions = get_json(view_server, "/cdc/api/streams/allchanges", token)["partitions"]
    assert [p["partition_id"] for p in partitions][0] == "p0-b2"
    assert partitions[0]["lagging"] and not any(p["lagging"] for p in partitions[1:])
    assert partitions[0]["since"] and partitions[0]["watermark"] < partitions[1]["watermark"]


def test_a_page_of_windows_and_partitions_is_bounded_and_says_what_is_left(view_server, token):
    data = get_json(view_server, "/cdc/api/streams/allchanges?windows=3&partitions=1", token)
    assert len(data["windows"]) == 3 and data["more_windows"] is True
    assert len(data["partitions"]) == 1 and data["more_partitions"] == 2
    older = get_json(view_server, "/cdc/api/streams/allchanges?windows=3&before="
                     + data["windows"][-1]["start"], token)["windows"]
    assert older[0]["start"] < data["windows"][-1]["start"]
    code, _, _ = view_server.get("/cdc/api/streams/allchanges?windows=100000", token)
    assert code == 422


def test_an_unknown_stream_is_404_naming_it(view_server, token):
    code, _, body = view_server.get("/cdc/api/streams/nosuch", token)
    assert code == 404 and b"stream 'nosuch' is not in the state store" in body


def test_the_charts_are_served_as_svg_and_png(view_server, token):
    code, kind, svg = view_server.get("/cdc/api/streams/allchanges/chart.svg", token)
    assert code == 200 and kind.startswith("image/svg+xml")
    assert b">Freshness and lag per window<" in svg and b">Step durations per window<" in svg
    code, kind, png = view_server.get("/cdc/api/streams/allchanges/chart.png", token)
    assert code == 200 and kind == "image/png" and png[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_response_carries_the_state_connection_password(view_server, token, state_database):
    bodies = [view_server.get(path, token)[2] for path in PATHS]
    bodies += [view_server.get(f"/cdc/api/streams/{s}", token)[2] for s in STREAMS_IN_ATTENTION_ORDER]
    listed = json.loads(bodies[2])
    assert listed["state_store"].startswith("postgresql") and ":***@" in listed["state_store"]
    assert not [body[:200] for body in bodies if CANARY.encode() in body]


def test_the_view_in_airflows_ui_shows_the_streams_and_windows(view_server, tmp_path):
    from PIL import Image

    from demo.ui import chromium, log_in, open_view, save_screenshot

    driver = chromium()
    try:
        log_in(driver, view_server)
        first = open_view(driver, view_server)
        seen = open_view(driver, view_server, stream="allchanges")
        shot = save_screenshot(driver, tmp_path / "cdc-view.png")
    finally:
        driver.quit()
    assert first.streams == STREAMS_IN_ATTENTION_ORDER and first.selected == "shop"
    assert len(first.windows) == 5 and "Spark driver lost" in first.text
    assert seen.selected == "allchanges" and len(seen.windows) == 8
    assert seen.partitions[0] == "p0-b2"
    assert "WAITING" in seen.text and "1 lagging" in seen.text
    assert CANARY not in seen.text and CANARY not in first.text
    assert Image.open(shot).size[0] == 1440


def test_opening_the_view_logs_in_again_when_the_browser_lost_its_session(view_server):
    from demo.ui import VIEW_ROUTE, chromium, log_in, open_view

    driver = chromium()
    try:
        log_in(driver, view_server)
        driver.delete_all_cookies()
        driver.execute_script("window.localStorage.clear(); window.sessionStorage.clear();")
        driver.get(f"{view_server.url}{VIEW_ROUTE}")
        seen = open_view(driver, view_server)
    finally:
        driver.quit()
    assert seen.streams == STREAMS_IN_ATTENTION_ORDER
