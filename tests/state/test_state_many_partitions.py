"""Windows of more partitions than one statement carries: plans and commits written in chunks
(airflow_cdc/state/bulk.py), every row still guarded."""

from __future__ import annotations

import pytest

from airflow_cdc.model import PartitionState
from airflow_cdc.state import bulk
from airflow_cdc.state.errors import WindowConflictError
from airflow_cdc.state.outcomes import OutcomeChange
from airflow_cdc.state.partitions import record_outcomes

from .helpers import HOUR, LEASE, T0, at, child, continuing, finished, position, run_window, window

# More than two chunks, the last one short.
MANY = 2 * bulk.CHUNK_ROWS + 7


def ids(count: int) -> list[str]:
    return [f"p{index:05d}" for index in range(count)]


def test_a_window_of_more_partitions_than_a_chunk_records_every_outcome_and_child(orders):
    first = window(0)
    run_window(orders, first, [continuing(p, T0 + HOUR, resume=f"r-{p}", records=3) for p in ids(MANY)],
               initial=[position(p) for p in ids(MANY)])
    second = window(1)
    plan = orders.plan_window(second, "run-1", LEASE)
    assert [p.partition_id for p in plan.positions] == ids(MANY)
    assert {p.resume_position for p in plan.positions} == {f"r-{p}" for p in ids(MANY)}
    orders.mark_extracted(second, "run-1", 2)
    split = at(90)
    outcomes = [
        finished(p, split, children=(child(f"{p}-a", split, p), child(f"{p}-b", split, p)))
        if index % 3 == 0 else continuing(p, T0 + 2 * HOUR, resume=f"s-{p}", records=5)
        for index, p in enumerate(ids(MANY))
    ]
    record = orders.commit_window(second, "run-1", outcomes)

    partitions = {p.partition_id: p for p in orders.list_partitions("orders")}
    splitting = ids(MANY)[::3]
    assert record.low_watermark == split
    for partition_id in ids(MANY):
        stored = partitions[partition_id]
        if partition_id in splitting:
            assert (stored.state, stored.watermark, stored.finished_window) == (
                PartitionState.FINISHED, split, second.start)
            assert partitions[f"{partition_id}-a"].state is PartitionState.READY
        else:
            assert (stored.state, stored.watermark, stored.resume_position) == (
                PartitionState.RUNNING, T0 + 2 * HOUR, f"s-{partition_id}")
    found = {row.partition_id: row for row in orders.window_partitions(second)}
    assert len(found) == MANY
    assert all(found[p].records == (5 if p not in splitting else 0) for p in ids(MANY))
    assert all(found[p].finished == (p in splitting) for p in ids(MANY))


def test_a_partition_no_longer_in_the_state_a_commit_read_fails_the_write_naming_it(orders):
    first = window(0)
    run_window(orders, first, [continuing(p, T0 + HOUR) for p in ids(MANY)],
               initial=[position(p) for p in ids(MANY)])
    stale = ids(MANY)[-1]
    changes = [
        # The last one as if it were still READY: it has been RUNNING since the first commit.
        OutcomeChange(continuing(p, T0 + 2 * HOUR), PartitionState.READY if p == stale
                      else PartitionState.RUNNING, T0 + HOUR, True)
        for p in ids(MANY)
    ]
    engine = orders._engine
    with pytest.raises(WindowConflictError, match=f"partition '{stale}' changed while"):
        with engine.begin() as conn:
            record_outcomes(conn, T0 + 2 * HOUR, window(1), changes)
    # The transaction rolled back: no partition moved.
    assert {p.watermark for p in orders.list_partitions("orders")} == {T0 + HOUR}
