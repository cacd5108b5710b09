"""Partition lineage: children become READY once every parent reported them (Spanner merges),
may be read in the window that births them, and set the window's low watermark."""

from __future__ import annotations

import pytest

from airflow_cdc.model import PartitionState
from airflow_cdc.state import OutcomeError

from .helpers import (
    LEASE,
    at,
    child,
    continuing,
    finished,
    partition_states,
    position,
    run_window,
    window,
)


def test_a_child_of_one_parent_is_ready_and_read_next_window_from_its_start(orders):
    run_window(
        orders,
        window(0),
        [finished("p1", at(40), children=(child("c1", at(40), "p1"),))],
        initial=[position("p1")],
    )

    c1 = next(p for p in orders.list_partitions("orders") if p.partition_id == "c1")
    assert (c1.state, c1.parent_ids, c1.reported_by, c1.created_window) == (
        PartitionState.READY,
        ("p1",),
        ("p1",),
        window(0).start,
    )
    plan = orders.plan_window(window(1), "run-2", LEASE)
    assert [(p.partition_id, p.start, p.parent_ids) for p in plan.positions] == [
        ("c1", at(40), ("p1",))
    ]


def test_a_child_of_two_parents_is_ready_only_when_both_reported_it(orders):
    merged = child("m", at(30), "p1", "p2")
    run_window(
        orders,
        window(0),
        [finished("p1", at(30), children=(merged,)), continuing("p2", at(60))],
        initial=[position("p1"), position("p2")],
    )
    assert partition_states(orders) == {"m": "CREATED", "p1": "FINISHED", "p2": "RUNNING"}
    assert [p.partition_id for p in orders.plan_window(window(1), "run-2", LEASE).positions] == [
        "p2"
    ]

    orders.mark_extracted(window(1), "run-2", 102)
    orders.commit_window(window(1), "run-2", [finished("p2", at(75), children=(merged,))])

    m = next(p for p in orders.list_partitions("orders") if p.partition_id == "m")
    assert (m.state, m.reported_by) == (PartitionState.READY, ("p1", "p2"))


def test_a_child_of_three_parents_waits_for_the_third_across_windows(orders):
    merged = child("m", at(50), "p1", "p2", "p3")
    run_window(
        orders,
        window(0),
        [
            finished("p1", at(50), children=(merged,)),
            finished("p2", at(50), children=(merged,)),
            continuing("p3", at(60)),
        ],
        initial=[position("p1"), position("p2"), position("p3")],
    )
    assert partition_states(orders)["m"] == "CREATED"

    # p3 merges in window 1; the child is read in the window that births it.
    run_window(
        orders,
        window(1),
        [finished("p3", at(70), children=(merged,)), continuing("m", at(120), "tok-m", records=2)],
        owner="run-2",
    )

    m = next(p for p in orders.list_partitions("orders") if p.partition_id == "m")
    assert (m.state, m.reported_by, m.watermark, m.resume_position) == (
        PartitionState.RUNNING,
        ("p1", "p2", "p3"),
        at(120),
        "tok-m",
    )
    read = {
        r.partition_id: (r.origin, r.start, r.records) for r in orders.window_partitions(window(1))
    }
    assert read == {"p3": ("planned", at(60), 0), "m": ("child", at(50), 2)}


def test_a_child_born_and_read_in_one_window_continues_in_the_next(orders):
    merged = child("m", at(20), "p1", "p2")
    committed = run_window(
        orders,
        window(0),
        [
            finished("p1", at(20), children=(merged,)),
            finished("p2", at(20), children=(merged,)),
            continuing("m", at(60), "tok-m", records=4),
        ],
        initial=[position("p1"), position("p2")],
    )
    assert committed.counts == {"records": 4, "partitions": 3, "finished": 2, "children": 1}
    plan = orders.plan_window(window(1), "run-2", LEASE)
    assert [(p.partition_id, p.start, p.resume_position) for p in plan.positions] == [
        ("m", at(60), "tok-m")
    ]


def test_a_child_read_before_all_its_parents_reported_it_is_refused(orders):
    merged = child("m", at(20), "p1", "p2")
    orders.plan_window(window(0), "run-1", LEASE, [position("p1"), position("p2")])
    orders.mark_extracted(window(0), "run-1", 101)
    with pytest.raises(
        OutcomeError,
        match=r"child 'm' was read .* before all its parents reported it "
        r"\(still waiting for \['p2'\]\)",
    ):
        orders.commit_window(
            window(0),
            "run-1",
            [
                finished("p1", at(20), children=(merged,)),
                continuing("p2", at(60)),
                continuing("m", at(60)),
            ],
        )
    assert partition_states(orders) == {"p1": "READY", "p2": "READY"}


def test_a_child_must_list_the_partition_that_reported_it_as_a_parent(orders):
    orders.plan_window(window(0), "run-1", LEASE, [position("p1")])
    orders.mark_extracted(window(0), "run-1", 101)
    with pytest.raises(
        OutcomeError, match="partition 'p1' reported child 'c' .* parents are \\['x'\\]"
    ):
        orders.commit_window(
            window(0), "run-1", [finished("p1", at(20), children=(child("c", at(20), "x"),))]
        )


def test_low_watermark_is_the_lowest_watermark_of_partitions_still_live(orders):
    committed = run_window(
        orders,
        window(0),
        [
            continuing("p1", at(60)),
            finished("p2", at(10), children=(child("m", at(10), "p2", "p9"),)),  # m waits at 00:10
            continuing("p3", at(55)),
        ],
        initial=[position("p1"), position("p2"), position("p3")],
    )
    assert committed.low_watermark == at(10)


def test_low_watermark_is_the_window_end_when_no_partition_is_live(orders):
    committed = run_window(orders, window(0), [finished("p1", at(30))], initial=[position("p1")])
    assert committed.low_watermark == window(0).end
    assert orders.live_partitions("orders") == []


def test_purge_deletes_only_finished_partitions_older_than_the_cutoff(orders, clock):
    run_window(
        orders,
        window(0),
        [finished("p1", at(30), children=(child("c1", at(30), "p1"),)), continuing("p2", at(60))],
        initial=[position("p1"), position("p2")],
    )
    cutoff = clock.now
    clock.advance(60)
    run_window(
        orders, window(1), [finished("c1", at(90)), continuing("p2", at(120))], owner="run-2"
    )

    assert (
        orders.purge_finished_partitions("orders", older_than=cutoff + (clock.now - cutoff) / 2)
        == 1
    )

    assert partition_states(orders) == {"c1": "FINISHED", "p2": "RUNNING"}
    assert [r.partition_id for r in orders.window_partitions(window(0))] == ["p1", "p2"]
