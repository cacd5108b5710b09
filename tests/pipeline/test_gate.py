"""The completeness gate (I4): closed with a visible reason until progress covers the window."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc.model import ChildPartition, PartitionOutcome, PartitionPosition, Window
from airflow_cdc.pipeline.protocol import gate_status
from airflow_cdc.state import StateStore

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
W1 = Window("orders", T0, T0 + timedelta(hours=1))


@pytest.fixture
def store(tmp_path):
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.migrate()
    store.register_stream("orders", "test", "f")
    return store


def committed(store, outcomes, apply=True):
    store.plan_window(W1, "run", 600, [PartitionPosition("a", T0), PartitionPosition("b", T0)])
    store.mark_extracted(W1, "run", 1)
    store.commit_window(W1, "run", outcomes)
    if apply:
        store.mark_applied(W1, "run", {"lake.current.orders": 7})


def test_gate_opens_when_every_live_partition_reached_the_window_end(store):
    committed(store, [PartitionOutcome("a", False, W1.end), PartitionOutcome("b", False, W1.end)])
    status = gate_status(store, W1)
    assert status.open and status.low_watermark == W1.end


def test_gate_stays_closed_until_apply_committed(store):
    committed(
        store,
        [PartitionOutcome("a", False, W1.end), PartitionOutcome("b", False, W1.end)],
        apply=False,
    )
    status = gate_status(store, W1)
    assert not status.open
    assert status.reason == "window is COMMITTED: apply has not committed yet"


def test_stalled_partition_keeps_the_gate_closed_naming_it_and_since_when(store):
    stalled_at = T0 + timedelta(minutes=20)
    committed(store, [PartitionOutcome("a", False, W1.end), PartitionOutcome("b", False, stalled_at)])
    status = gate_status(store, W1)
    assert not status.open
    assert [(p.partition_id, p.watermark) for p in status.lagging] == [("b", stalled_at)]
    assert "lowest b at 2024-05-01T09:20:00.000000Z since" in status.reason


def test_finished_partition_with_children_read_to_the_end_opens_the_gate(store):
    split = T0 + timedelta(minutes=10)
    committed(
        store,
        [
            PartitionOutcome("a", True, split, children=(ChildPartition("a1", split, ("a",)),)),
            PartitionOutcome("a1", False, W1.end),
            PartitionOutcome("b", False, W1.end),
        ],
    )
    assert gate_status(store, W1).open


def test_gate_of_an_unplanned_window_is_closed(store):
    status = gate_status(store, W1)
    assert not status.open and "never planned" in status.reason
