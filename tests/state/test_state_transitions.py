"""Window transitions: the protocol's order, illegal moves refused, re-runs harmless (I1)."""

from __future__ import annotations

import re

import pytest

from airflow_cdc.model import PartitionState, WindowState
from airflow_cdc.state import (
    IllegalTransitionError,
    LeaseLostError,
    OutcomeError,
    SnapshotMismatchError,
    WatermarkRegressionError,
    WindowNotFoundError,
)

from .helpers import LEASE, at, continuing, finished, partition_states, position, run_window, window

W0 = "window orders[2024-01-01T00:00:00.000000Z, 2024-01-01T01:00:00.000000Z)"


def test_a_window_goes_through_every_state_to_complete(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    extracted = orders.mark_extracted(window(0), "run-1", 101)
    committed = orders.commit_window(
        window(0), "run-1", [continuing("p1", at(60), records=7)], {"bytes": 512}
    )
    applied = orders.mark_applied(window(0), "run-1", {"lake.db.orders": 202})
    complete = orders.mark_complete(window(0), "progress >= window end on 1 partition")

    assert [extracted.state, committed.state, applied.state, complete.state] == [
        WindowState.EXTRACTED,
        WindowState.COMMITTED,
        WindowState.APPLIED,
        WindowState.COMPLETE,
    ]
    stored = orders.get_window("orders", window(0).start)
    assert stored.changelog_snapshot_id == 101
    assert stored.target_snapshot_ids == {"lake.db.orders": 202}
    assert stored.counts == {
        "bytes": 512,
        "children": 0,
        "finished": 0,
        "partitions": 1,
        "records": 7,
    }
    assert stored.completeness_note == "progress >= window end on 1 partition"
    assert stored.lease_expires_at is None  # released: nobody holds a complete window


def test_commit_records_partition_outcomes_and_what_the_window_read(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1"), position("p2")])
    orders.mark_extracted(window(0), "run-1", 101)
    orders.commit_window(
        window(0),
        "run-1",
        [continuing("p1", at(60), "tok-1b", records=3), finished("p2", at(41), records=4)],
    )

    p1, p2 = orders.list_partitions("orders")
    assert (p1.state, p1.watermark, p1.resume_position) == (
        PartitionState.RUNNING,
        at(60),
        "tok-1b",
    )
    assert (p2.state, p2.watermark, p2.finished_window) == (
        PartitionState.FINISHED,
        at(41),
        window(0).start,
    )
    assert [
        (r.partition_id, r.finished, r.watermark, r.records)
        for r in orders.window_partitions(window(0))
    ] == [
        ("p1", False, at(60), 3),
        ("p2", True, at(41), 4),
    ]


def test_applied_before_committed_is_an_illegal_transition(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    orders.mark_extracted(window(0), "run-1", 101)
    with pytest.raises(IllegalTransitionError) as raised:
        orders.mark_applied(window(0), "run-1", {"t": 1})
    assert str(raised.value).startswith(f"{W0} cannot go from EXTRACTED to APPLIED")
    assert "commit it first" in str(raised.value)
    assert orders.get_window("orders", window(0).start).state == WindowState.EXTRACTED


def test_a_complete_window_cannot_go_back_to_extracted(orders):
    run_window(orders, window(0), [continuing("p1", at(60))], initial=[position("p1")])
    orders.mark_applied(window(0), "run-1", {"t": 1})
    orders.mark_complete(window(0))
    with pytest.raises(IllegalTransitionError) as raised:
        orders.mark_extracted(window(0), "run-1", 101)
    assert str(raised.value).startswith(f"{W0} cannot go from COMPLETE to EXTRACTED")
    assert "it may go to nowhere" in str(raised.value)


def test_commit_before_extract_is_an_illegal_transition(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    with pytest.raises(IllegalTransitionError, match="from PLANNED to COMMITTED.*extract it first"):
        orders.commit_window(window(0), "run-1", [continuing("p1", at(60))])
    assert partition_states(orders) == {"p1": "READY"}


def test_a_committed_window_cannot_be_marked_failed(orders):
    run_window(orders, window(0), [continuing("p1", at(60))], initial=[position("p1")])
    with pytest.raises(IllegalTransitionError, match="from COMMITTED to FAILED.*re-run its apply"):
        orders.mark_failed(window(0), "run-1", "apply failed")
    assert orders.get_window("orders", window(0).start).state == WindowState.COMMITTED


def test_a_failed_window_cannot_be_extracted_before_it_is_planned_again(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    failed = orders.mark_failed(window(0), "run-1", "source unavailable")
    assert (failed.state, failed.failure_reason) == (WindowState.FAILED, "source unavailable")
    with pytest.raises(
        IllegalTransitionError, match="from FAILED to EXTRACTED.*plan the window again"
    ):
        orders.mark_extracted(window(0), "run-1", 101)


def test_a_transition_on_a_window_never_planned_says_to_plan_it(orders):
    with pytest.raises(
        WindowNotFoundError, match=re.escape(f"{W0} was never planned: plan it first")
    ):
        orders.mark_extracted(window(0), "run-1", 101)


def test_repeating_each_step_changes_nothing(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    orders.mark_extracted(window(0), "run-1", 101)
    assert orders.mark_extracted(window(0), "run-1", 101).state == WindowState.EXTRACTED
    outcomes = [continuing("p1", at(60), "tok", records=5)]
    committed = orders.commit_window(window(0), "run-1", outcomes)
    partitions_after_commit = orders.list_partitions("orders")
    read_after_commit = orders.window_partitions(window(0))

    assert orders.commit_window(window(0), "run-1", outcomes) == committed
    orders.mark_applied(window(0), "run-1", {"t": 7})
    applied_again = orders.mark_applied(window(0), "run-1", {"t": 8})
    orders.mark_complete(window(0), "first")
    complete_again = orders.mark_complete(window(0), "second")

    assert orders.list_partitions("orders") == partitions_after_commit
    assert orders.window_partitions(window(0)) == read_after_commit
    assert applied_again.target_snapshot_ids == {"t": 7}
    assert complete_again.completeness_note == "first"
    assert complete_again.counts == committed.counts


def test_extracting_again_into_another_changelog_snapshot_is_refused(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    orders.mark_extracted(window(0), "run-1", 101)
    with pytest.raises(
        SnapshotMismatchError, match="snapshot 101, but this run reports snapshot 102"
    ):
        orders.mark_extracted(window(0), "run-1", 102)


def test_committing_a_window_committed_by_another_owner_is_refused(orders):
    run_window(
        orders, window(0), [continuing("p1", at(60))], initial=[position("p1")], owner="run-1"
    )
    with pytest.raises(
        LeaseLostError, match="'run-2' cannot commit .* already COMMITTED and held by 'run-1'"
    ):
        orders.commit_window(window(0), "run-2", [continuing("p1", at(60))])


def test_a_watermark_moving_backwards_is_refused_and_nothing_is_committed(orders):
    run_window(orders, window(0), [continuing("p1", at(60))], initial=[position("p1")])
    orders.plan_window(window(1), "run-2", LEASE)
    orders.mark_extracted(window(1), "run-2", 102)
    with pytest.raises(WatermarkRegressionError) as raised:
        orders.commit_window(window(1), "run-2", [continuing("p1", at(59), "tok-old")])
    message = str(raised.value)
    assert "partition 'p1' of stream 'orders' would move its watermark backwards" in message
    assert "from 2024-01-01T01:00:00.000000Z to 2024-01-01T00:59:00.000000Z" in message
    [p1] = orders.list_partitions("orders")
    assert (p1.watermark, p1.resume_position) == (at(60), None)
    assert orders.get_window("orders", window(1).start).state == WindowState.EXTRACTED


def test_an_unchanged_watermark_is_accepted_and_keeps_its_since_time(orders, clock):
    run_window(orders, window(0), [continuing("p1", at(60))], initial=[position("p1")])
    [before] = orders.list_partitions("orders")
    clock.advance(3600)
    run_window(orders, window(1), [continuing("p1", at(60))], owner="run-2")
    [stalled] = orders.list_partitions("orders")
    assert stalled.watermark == at(60)
    assert stalled.watermark_since == before.watermark_since
    assert stalled.updated_at == clock.now


def test_every_planned_partition_needs_an_outcome(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1"), position("p2")])
    orders.mark_extracted(window(0), "run-1", 101)
    with pytest.raises(
        OutcomeError, match=r"planned partitions \['p2'\] but has no outcome for them"
    ):
        orders.commit_window(window(0), "run-1", [continuing("p1", at(60))])
    assert partition_states(orders) == {"p1": "READY", "p2": "READY"}


def test_an_outcome_for_a_partition_neither_planned_nor_born_in_the_window_is_refused(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    orders.mark_extracted(window(0), "run-1", 101)
    with pytest.raises(OutcomeError, match="partition 'stray' has an outcome .* did not plan it"):
        orders.commit_window(
            window(0), "run-1", [continuing("p1", at(60)), continuing("stray", at(60))]
        )
    assert partition_states(orders) == {"p1": "READY"}


def test_counts_that_contradict_the_outcomes_are_refused(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    orders.mark_extracted(window(0), "run-1", 101)
    with pytest.raises(OutcomeError, match=r"counts\['records'\] = 9 .* give 5"):
        orders.commit_window(
            window(0), "run-1", [continuing("p1", at(60), records=5)], {"records": 9}
        )
