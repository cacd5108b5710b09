"""Leases (I6): one run holds a window at a time; a run whose lease was taken over or expired
changes nothing."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from airflow_cdc.model import WindowState
from airflow_cdc.state import LeaseLostError, WindowLeaseHeldError

from .helpers import LEASE, at, continuing, partition_states, position, window

W0 = "window orders[2024-01-01T00:00:00.000000Z, 2024-01-01T01:00:00.000000Z)"


def test_planning_a_window_another_run_holds_names_the_holder_and_expiry(orders):
    held = orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    with pytest.raises(WindowLeaseHeldError) as raised:
        orders.plan_window(window(0), "run-2", LEASE, [position("p1")])
    expiry = held.window.lease_expires_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert str(raised.value).startswith(
        f"{W0} is being run by 'run-1' (attempt 1, lease until {expiry}), so 'run-2' cannot run it"
    )
    assert orders.get_window("orders", window(0).start).lease_owner == "run-1"


def test_an_expired_lease_is_taken_over_as_a_new_attempt(orders, clock):
    orders.plan_window(window(0), "run-1", 60, [position("p1")])
    orders.mark_extracted(window(0), "run-1", 101)
    clock.advance(61)

    taken = orders.plan_window(window(0), "run-2", LEASE)

    assert (taken.window.lease_owner, taken.window.attempt) == ("run-2", 2)
    assert taken.window.state == WindowState.EXTRACTED
    assert [p.partition_id for p in taken.positions] == ["p1"]


def test_a_run_whose_window_was_taken_over_cannot_commit_and_changes_nothing(orders, clock):
    orders.plan_window(window(0), "run-1", 60, [position("p1")])
    orders.mark_extracted(window(0), "run-1", 101)
    clock.advance(61)
    orders.plan_window(window(0), "run-2", LEASE)

    with pytest.raises(LeaseLostError) as raised:
        orders.commit_window(window(0), "run-1", [continuing("p1", at(60), "tok-run-1")])

    assert str(raised.value).startswith(
        f"'run-1' cannot commit {W0}: the window is now held by 'run-2' (attempt 2"
    )
    assert "Nothing was changed" in str(raised.value)
    assert orders.get_window("orders", window(0).start).state == WindowState.EXTRACTED
    assert partition_states(orders) == {"p1": "READY"}


def test_a_run_cannot_commit_on_its_own_expired_lease(orders, clock):
    orders.plan_window(window(0), "run-1", 60, [position("p1")])
    orders.mark_extracted(window(0), "run-1", 101)
    clock.advance(60)  # expiry is exclusive: at the instant it expires the lease is gone
    with pytest.raises(
        LeaseLostError, match=re.escape("its lease expired at 2030-01-01T12:01:00.000000Z")
    ):
        orders.commit_window(window(0), "run-1", [continuing("p1", at(60))])
    assert orders.get_window("orders", window(0).start).state == WindowState.EXTRACTED


def test_renewing_an_expired_lease_nobody_took_over_lets_the_run_commit(orders, clock):
    orders.plan_window(window(0), "run-1", 60, [position("p1")])
    orders.mark_extracted(window(0), "run-1", 101)
    clock.advance(90)
    renewed = orders.renew_lease(window(0), "run-1", 60)
    assert renewed.lease_expires_at == clock.now + timedelta(seconds=60)
    assert (
        orders.commit_window(window(0), "run-1", [continuing("p1", at(60))]).state
        == WindowState.COMMITTED
    )


def test_a_run_cannot_renew_a_lease_another_run_took_over(orders, clock):
    orders.plan_window(window(0), "run-1", 60, [position("p1")])
    clock.advance(61)
    orders.plan_window(window(0), "run-2", LEASE)
    with pytest.raises(
        LeaseLostError, match="'run-1' cannot renew the lease on .* now held by 'run-2'"
    ):
        orders.renew_lease(window(0), "run-1", 60)


def test_failing_a_window_releases_its_lease_for_the_next_run(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    orders.mark_failed(window(0), "run-1", "Spark job exited with 1")

    retry = orders.plan_window(window(0), "run-2", LEASE)

    assert (retry.window.state, retry.window.lease_owner, retry.window.attempt) == (
        WindowState.PLANNED,
        "run-2",
        2,
    )
    with pytest.raises(LeaseLostError, match="the window is now held by 'run-2'"):
        orders.mark_failed(window(0), "run-1", "late failure report")


def test_a_failed_window_lease_cannot_be_renewed(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    orders.mark_failed(window(0), "run-1", "boom")
    with pytest.raises(
        LeaseLostError,
        match="the window is FAILED and its lease was released; plan the window again",
    ):
        orders.renew_lease(window(0), "run-1", LEASE)


def test_a_held_window_names_the_release_lease_command_for_a_dead_holder(orders):
    orders.plan_window(window(0), "dag/run-1", LEASE, [position("p1")])
    with pytest.raises(WindowLeaseHeldError) as raised:
        orders.plan_window(window(0), "dag/run-2", LEASE, [position("p1")])
    assert raised.value.holder == "dag/run-1"
    assert str(raised.value).endswith(
        "release its lease: airflow-cdc release-lease orders 2024-01-01T00:00:00.000000Z "
        "--owner 'dag/run-1'"
    )


def test_a_released_lease_lets_the_next_run_take_the_window_over_at_once(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    orders.mark_extracted(window(0), "run-1", 101)

    orders.release_lease(window(0), "run-1")
    taken = orders.plan_window(window(0), "run-2", LEASE)

    assert (taken.window.lease_owner, taken.window.attempt) == ("run-2", 2)
    assert taken.window.state == WindowState.EXTRACTED
    with pytest.raises(LeaseLostError):
        orders.commit_window(window(0), "run-1", [continuing("p1", at(60), "tok-run-1")])


def test_only_the_holder_s_lease_can_be_released(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    with pytest.raises(LeaseLostError):
        orders.release_lease(window(0), "run-2")
    assert orders.get_window("orders", window(0).start).lease_expires_at > at(0)
