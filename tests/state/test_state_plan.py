"""Planning windows: the first from initial positions, later ones contiguous and in order."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_cdc.model import PartitionState, Window, WindowState
from airflow_cdc.state import InvalidPlanError, WindowOrderError

from .helpers import HOUR, LEASE, T0, at, child, continuing, finished, position, run_window, window


def test_first_window_creates_the_initial_partitions_and_reads_them(orders):
    plan = orders.plan_window(
        window(0), "run-1", LEASE, [position("p2", at(0), "tok-2"), position("p1")]
    )

    assert plan.window.state == WindowState.PLANNED
    assert (plan.window.attempt, plan.window.lease_owner) == (1, "run-1")
    assert [(p.partition_id, p.start, p.resume_position) for p in plan.positions] == [
        ("p1", T0, None),
        ("p2", T0, "tok-2"),
    ]
    assert {p.partition_id: p.state for p in orders.list_partitions("orders")} == {
        "p1": PartitionState.READY,
        "p2": PartitionState.READY,
    }
    assert [(r.partition_id, r.origin) for r in orders.window_partitions(window(0))] == [
        ("p1", "planned"),
        ("p2", "planned"),
    ]


def test_next_window_reads_ready_and_running_partitions_from_their_watermarks(orders):
    run_window(
        orders,
        window(0),
        [
            continuing("p1", at(60), "tok-1b"),
            finished(
                "p2", at(20), children=(child("c1", at(20), "p2"), child("m", at(20), "p2", "p9"))
            ),
        ],
        initial=[position("p1"), position("p2")],
    )

    plan = orders.plan_window(window(1), "run-2", LEASE)

    # p2 finished; m waits for its other parent p9 (CREATED); c1 is READY from its start.
    assert [(p.partition_id, p.start, p.resume_position) for p in plan.positions] == [
        ("c1", at(20), None),
        ("p1", at(60), "tok-1b"),
    ]


def test_initial_positions_are_ignored_after_the_first_window(orders):
    run_window(orders, window(0), [continuing("p1", at(60))], initial=[position("p1")])
    plan = orders.plan_window(window(1), "run-2", LEASE, [position("other")])
    assert [p.partition_id for p in plan.positions] == ["p1"]
    assert [p.partition_id for p in orders.list_partitions("orders")] == ["p1"]


def test_a_partition_twice_in_the_initial_positions_is_refused(orders):
    with pytest.raises(InvalidPlanError, match="partition 'p1' appears twice"):
        orders.plan_window(window(0), "run-1", LEASE, [position("p1"), position("p1")])
    assert orders.list_windows("orders") == []


def test_a_window_leaving_a_gap_after_the_latest_window_is_refused(orders):
    run_window(orders, window(0), [continuing("p1", at(60))], initial=[position("p1")])
    with pytest.raises(WindowOrderError) as raised:
        orders.plan_window(window(2), "run-3", LEASE)
    message = str(raised.value)
    assert (
        "window orders[2024-01-01T02:00:00.000000Z, 2024-01-01T03:00:00.000000Z) cannot start"
        in message
    )
    assert "window orders[2024-01-01T00:00:00.000000Z, 2024-01-01T01:00:00.000000Z)" in message
    assert "plan the window starting at 2024-01-01T01:00:00.000000Z first" in message
    assert len(orders.list_windows("orders")) == 1


def test_a_window_overlapping_a_recorded_window_is_refused(orders):
    run_window(orders, window(0), [continuing("p1", at(60))], initial=[position("p1")])
    overlapping = Window("orders", at(30), at(90))
    with pytest.raises(WindowOrderError) as raised:
        orders.plan_window(overlapping, "run-2", LEASE)
    message = str(raised.value)
    assert (
        "window orders[2024-01-01T00:30:00.000000Z, 2024-01-01T01:30:00.000000Z) overlaps "
        "recorded window orders[2024-01-01T00:00:00.000000Z, 2024-01-01T01:00:00.000000Z)"
    ) in message


def test_a_window_with_a_recorded_start_but_another_end_is_refused(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    with pytest.raises(WindowOrderError, match="same start, different end"):
        orders.plan_window(Window("orders", T0, T0 + 2 * HOUR), "run-1", LEASE)


def test_a_window_cannot_start_before_the_previous_window_committed(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    orders.mark_extracted(window(0), "run-1", 11)
    with pytest.raises(WindowOrderError) as raised:
        orders.plan_window(window(1), "run-2", LEASE)
    assert (
        "window orders[2024-01-01T01:00:00.000000Z, 2024-01-01T02:00:00.000000Z) cannot start: "
        "previous window orders[2024-01-01T00:00:00.000000Z, 2024-01-01T01:00:00.000000Z) is "
        "EXTRACTED, not committed"
    ) in str(raised.value)
    assert orders.get_window("orders", window(1).start) is None


def test_planning_a_committed_window_again_returns_its_recorded_plan_unchanged(orders):
    first = orders.plan_window(window(0), "run-1", LEASE, [position("p1"), position("p2")])
    orders.mark_extracted(window(0), "run-1", 11)
    orders.commit_window(
        window(0), "run-1", [continuing("p1", at(60), "tok"), finished("p2", at(60))]
    )

    again = orders.plan_window(window(0), "run-1", LEASE, [position("other")])

    assert again.positions == first.positions
    assert again.window.state == WindowState.COMMITTED
    assert [p.partition_id for p in orders.list_partitions("orders")] == ["p1", "p2"]


def test_planning_again_by_the_same_owner_renews_the_lease_without_a_new_attempt(orders, clock):
    first = orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    clock.advance(100)
    again = orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    assert again.window.attempt == 1
    assert again.window.lease_expires_at == clock.now + timedelta(seconds=LEASE)
    assert again.window.lease_expires_at > first.window.lease_expires_at
    assert again.positions == first.positions


def test_planning_a_failed_window_again_retries_it_with_the_same_positions(orders):
    first = orders.plan_window(window(0), "run-1", LEASE, [position("p1", resume="tok-1")])
    orders.mark_failed(window(0), "run-1", "Spark job exited with 1")

    retry = orders.plan_window(window(0), "run-1", LEASE)

    assert retry.window.state == WindowState.PLANNED
    assert retry.window.attempt == 2
    assert retry.window.failure_reason is None
    assert retry.positions == first.positions
