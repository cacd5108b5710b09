"""Intervals a catch-up window covered: recorded once, pointing at the window that read them."""

from __future__ import annotations

import pytest

from airflow_cdc.model import Window
from airflow_cdc.state import StateStore, WindowOrderError
from airflow_cdc.state.errors import WindowNotFoundError

from .helpers import HOUR, LEASE, T0, position, window


def catchup(store, first: int, intervals: int) -> Window:
    """Plan the window of ``intervals`` hourly intervals from interval ``first``."""
    span = Window("orders", T0 + first * HOUR, T0 + (first + intervals) * HOUR)
    store.plan_window(span, "run-1", LEASE, [position("p1")])
    return span


def test_an_interval_inside_a_catchup_window_finds_that_window_covering_it(orders):
    span = catchup(orders, 0, 3)

    assert orders.covering_window("orders", window(1).start).window == span
    assert orders.covering_window("orders", window(2).start).window == span


def test_the_catchup_windows_own_start_and_the_interval_after_it_are_not_covered(orders):
    catchup(orders, 0, 3)

    assert orders.covering_window("orders", window(0).start) is None
    assert orders.covering_window("orders", window(3).start) is None


def test_a_covered_interval_is_recorded_naming_its_covering_window(orders):
    span = catchup(orders, 0, 3)

    record = orders.record_covered_interval(window(2))

    assert (record.interval, record.window) == (window(2), span)
    assert orders.covered_interval("orders", window(2).start) == record


def test_recording_a_covered_interval_again_changes_nothing(orders):
    catchup(orders, 0, 3)
    first = orders.record_covered_interval(window(1))

    again = orders.record_covered_interval(window(1))

    assert again == first
    assert [r.interval for r in orders.covered_intervals("orders")] == [window(1)]


def test_an_interval_no_window_reads_is_refused_naming_the_window_to_plan(orders):
    catchup(orders, 0, 2)

    with pytest.raises(WindowNotFoundError, match="plan the window starting at"):
        orders.record_covered_interval(window(2))


def test_an_interval_the_catchup_window_reads_only_in_part_is_refused(orders):
    catchup(orders, 0, 2)
    straddling = Window("orders", window(1).start, window(2).end)

    with pytest.raises(WindowOrderError, match="only partly read"):
        orders.record_covered_interval(straddling)


def test_a_covered_interval_recorded_with_another_end_is_refused(orders):
    catchup(orders, 0, 3)
    orders.record_covered_interval(window(1))
    longer = Window("orders", window(1).start, window(2).end)

    with pytest.raises(WindowOrderError, match="schedule changed"):
        orders.record_covered_interval(longer)


def test_covered_intervals_are_listed_per_window_in_time_order(orders):
    span = catchup(orders, 0, 4)
    for index in (3, 1, 2):
        orders.record_covered_interval(window(index))

    listed = orders.covered_intervals("orders", window_start=span.start)

    assert [r.interval for r in listed] == [window(1), window(2), window(3)]


def test_resetting_a_stream_deletes_its_covered_intervals(orders):
    catchup(orders, 0, 3)
    orders.record_covered_interval(window(1))

    orders.reset_stream("orders")

    assert orders.covered_intervals("orders") == []


def test_a_version_3_store_upgrades_to_record_covered_intervals(state_url):
    with StateStore(state_url) as store:
        store.migrate(3)
    with StateStore(state_url) as store:
        assert store.migrate() == 4
        store.register_stream("orders", "spanner", "fingerprint-1")
        span = catchup(store, 0, 2)
        assert store.record_covered_interval(window(1)).window == span
