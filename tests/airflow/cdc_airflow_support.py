"""Window W1 of stream ``orders`` in the state store, up to a chosen step (Airflow-side tests)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow_cdc.model import PartitionOutcome, PartitionPosition, Window

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
W1 = Window("orders", T0, T0 + timedelta(hours=1))
TARGET = "lake.current.orders"


def applied(store, b_watermark=None, apply=True, window=W1):
    """``window`` committed with partition a at its end, b at ``b_watermark`` (default: the end).

    The first window plans partitions a and b; later ones continue from the store.
    """
    positions = [PartitionPosition("a", window.start), PartitionPosition("b", window.start)]
    store.plan_window(window, "run", 600, positions)
    store.mark_extracted(window, "run", 11)
    store.commit_window(
        window, "run",
        [
            PartitionOutcome("a", False, window.end),
            PartitionOutcome("b", False, b_watermark or window.end),
        ],
        {"changes": 5},
    )
    if apply:
        store.mark_applied(window, "run", {TARGET: 7})
