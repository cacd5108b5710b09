"""Partitions discovered after the first window (file sources: one partition per event file)."""

from __future__ import annotations

from airflow_cdc.model import PartitionState

from .helpers import LEASE, at, continuing, finished, position, run_window, window


def test_later_window_reads_newly_discovered_partitions_with_the_running_ones(orders):
    run_window(orders, window(0), [continuing("progress", at(10))], initial=[position("progress")])

    plan = orders.plan_window(
        window(1), "run-2", LEASE, new_partitions=[position("file-b", at(60)), position("file-a", at(60))]
    )

    assert [p.partition_id for p in plan.positions] == ["file-a", "file-b", "progress"]
    assert orders.list_partitions("orders", states=[PartitionState.READY])[0].partition_id == "file-a"


def test_consumed_partition_is_not_created_again_when_discovered_again(orders):
    run_window(
        orders,
        window(0),
        [finished("file-a", at(0)), continuing("progress", at(10))],
        initial=[position("file-a"), position("progress")],
    )

    plan = orders.plan_window(
        window(1), "run-2", LEASE, new_partitions=[position("file-a", at(60)), position("file-c", at(60))]
    )

    assert [p.partition_id for p in plan.positions] == ["file-c", "progress"]
    states = {p.partition_id: p.state for p in orders.list_partitions("orders")}
    assert states["file-a"] is PartitionState.FINISHED


def test_replanning_a_window_ignores_partitions_discovered_since(orders):
    run_window(orders, window(0), [continuing("progress", at(10))], initial=[position("progress")])
    first = orders.plan_window(window(1), "run-2", LEASE, new_partitions=[position("file-a", at(60))])

    again = orders.plan_window(
        window(1), "run-2", LEASE, new_partitions=[position("file-late", at(60))]
    )

    assert again.positions == first.positions
    assert "file-late" not in {p.partition_id for p in orders.list_partitions("orders")}


def test_first_window_reads_initial_and_new_partitions_once_each(orders):
    plan = orders.plan_window(
        window(0), "run-1", LEASE, [position("progress")],
        new_partitions=[position("file-a"), position("progress")],
    )

    assert [p.partition_id for p in plan.positions] == ["file-a", "progress"]
