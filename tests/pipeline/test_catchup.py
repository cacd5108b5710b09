"""Catch-up windows, Airflow-free: which intervals a window covers, what each run's interval is
to the stream, and the gates and waits of covered intervals."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc.model import PartitionOutcome, PartitionPosition, Readiness, Window
from airflow_cdc.pipeline.catchup import (
    CatchupLimit,
    catchup_window,
    following_intervals,
    run_window,
)
from airflow_cdc.pipeline.plan_step import previous_interval_order
from airflow_cdc.pipeline.protocol import gate_status, planning_readiness
from airflow_cdc.state import StateStore

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
MINUTE = timedelta(minutes=1)


def interval(index: int) -> Window:
    return Window("orders", T0 + index * MINUTE, T0 + (index + 1) * MINUTE)


def every_minute(start, end):
    return end, end + MINUTE


@pytest.fixture
def store(tmp_path):
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.migrate()
    store.register_stream("orders", "test", "f")
    return store


def test_a_stream_behind_takes_every_ended_interval_within_the_limit():
    ends = following_intervals(interval(0), every_minute, T0 + 100 * MINUTE,
                               CatchupLimit(span=timedelta(minutes=10)))

    assert ends == [T0 + n * MINUTE for n in range(2, 11)]


def test_an_interval_that_has_not_ended_is_never_covered():
    ends = following_intervals(interval(0), every_minute, T0 + 3 * MINUTE + timedelta(seconds=30),
                               CatchupLimit(span=timedelta(hours=1)))

    assert ends == [T0 + 2 * MINUTE, T0 + 3 * MINUTE]


def test_a_number_of_intervals_limits_the_window_counting_its_own():
    ends = following_intervals(interval(0), every_minute, T0 + 100 * MINUTE, CatchupLimit.parse(4))

    assert len(ends) == 3


def test_a_gap_in_the_schedule_ends_the_catchup_span():
    def weekday_like(start, end):
        return (end + MINUTE, end + 2 * MINUTE) if end >= T0 + 3 * MINUTE else (end, end + MINUTE)

    ends = following_intervals(interval(0), weekday_like, T0 + 100 * MINUTE,
                               CatchupLimit(span=timedelta(hours=1)))

    assert ends == [T0 + 2 * MINUTE, T0 + 3 * MINUTE]


@pytest.mark.parametrize("off", [None, 0, False, 1, timedelta(0)])
def test_catchup_turned_off_reads_one_interval_per_window(off):
    assert following_intervals(interval(0), every_minute, T0 + 100 * MINUTE,
                               CatchupLimit.parse(off)) == []


@pytest.mark.parametrize("bad", [-1, True, "1h", timedelta(minutes=-1)])
def test_a_limit_that_names_nothing_is_refused(bad):
    with pytest.raises((TypeError, ValueError), match="max_catchup"):
        CatchupLimit.parse(bad)


def test_the_window_reaches_the_last_interval_the_source_says_is_ready():
    ready_until = T0 + 37 * MINUTE
    asked = []

    def ready(window):
        asked.append(window.end)
        return window.end <= ready_until

    ends = [T0 + n * MINUTE for n in range(2, 61)]
    window = catchup_window(interval(0), ends, ready)

    assert window == Window("orders", T0, ready_until)
    assert len(asked) <= 7  # bisection: a handful of questions for 59 intervals


def test_a_window_whose_next_interval_is_not_ready_reads_its_own_interval():
    window = catchup_window(interval(0), [T0 + 2 * MINUTE], lambda w: False)

    assert window == interval(0)


def test_a_run_finds_its_interval_planned_covered_or_unplanned(store):
    span = Window("orders", T0, T0 + 3 * MINUTE)
    store.plan_window(span, "run-0", 600, [PartitionPosition("a", T0)])

    assert run_window(store, interval(0)).window == span
    assert run_window(store, interval(2)).covered
    assert not run_window(store, interval(3)).planned


def test_a_covered_interval_may_be_planned_at_once_while_its_window_runs(store):
    store.plan_window(Window("orders", T0, T0 + 3 * MINUTE), "run-0", 600,
                      [PartitionPosition("a", T0)])

    answer = planning_readiness(store, interval(1))

    assert answer.ready and "catch-up window" in answer.reason


def test_an_interval_after_an_unplanned_one_waits_for_its_runs_plan(store):
    store.plan_window(interval(0), "run-0", 600, [PartitionPosition("a", T0)])

    class Previous:
        run_id, start, end, state = "scheduled__1", interval(1).start, interval(1).end, "deferred"

    answer = previous_interval_order(store, interval(2), "plan", lambda: Previous,
                                     Readiness(True, "source ready"))

    assert not answer.ready and "waits for the interval before it" in answer.reason


def complete(store, window):
    store.plan_window(window, "run-0", 600, [PartitionPosition("a", T0)])
    store.mark_extracted(window, "run-0", 1)
    store.commit_window(window, "run-0", [PartitionOutcome("a", False, window.end)])
    store.mark_applied(window, "run-0", {"lake.current.orders": 1})


def test_a_covered_intervals_gate_stays_closed_until_its_window_is_complete(store):
    span = Window("orders", T0, T0 + 3 * MINUTE)
    complete(store, span)

    status = gate_status(store, interval(1))

    assert not status.open and "opens when that window is COMPLETE" in status.reason
    store.mark_complete(span)
    assert gate_status(store, interval(1)).open


def test_the_catchup_runs_gate_needs_progress_to_the_windows_end_not_its_intervals(store):
    span = Window("orders", T0, T0 + 3 * MINUTE)
    store.plan_window(span, "run-0", 600, [PartitionPosition("a", T0)])
    store.mark_extracted(span, "run-0", 1)
    store.commit_window(span, "run-0", [PartitionOutcome("a", False, interval(0).end)])
    store.mark_applied(span, "run-0", {"lake.current.orders": 1})

    status = gate_status(store, interval(0))

    assert not status.open and "before the window end 2024-05-01T09:03:00" in status.reason


def test_stream_health_counts_the_backlog_in_intervals_of_the_streams_schedule(store):
    from airflow_cdc.pipeline.stream_health import stream_health

    span = Window("orders", T0, T0 + 3 * MINUTE)
    store.plan_window(span, "run-0", 600, [PartitionPosition("a", T0)])
    store.record_covered_interval(interval(1))
    stream = store.streams()[0]

    health = stream_health(store, stream, span.end + 10 * MINUTE + timedelta(seconds=30))

    assert (health.oldest_unplanned, health.intervals_behind, health.newest_covers) == (
        span.end, 10, 1)
