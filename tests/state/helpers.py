"""Windows, positions and outcomes for state tests, in as few words as the tests need."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow_cdc.model import (
    UTC,
    ChildPartition,
    PartitionOutcome,
    PartitionPosition,
    Window,
)

T0 = datetime(2024, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
LEASE = 600.0


def window(index: int, stream: str = "orders") -> Window:
    """The stream's ``index``-th hourly window from T0."""
    return Window(stream, T0 + index * HOUR, T0 + (index + 1) * HOUR)


def at(minutes: float) -> datetime:
    """T0 plus ``minutes``."""
    return T0 + timedelta(minutes=minutes)


def position(
    partition_id: str, start: datetime = T0, resume: str | None = None
) -> PartitionPosition:
    return PartitionPosition(partition_id, start, resume)


def continuing(
    partition_id: str,
    watermark: datetime,
    resume: str | None = None,
    records: int = 0,
    children: tuple[ChildPartition, ...] = (),
) -> PartitionOutcome:
    return PartitionOutcome(partition_id, False, watermark, records, resume, children)


def finished(
    partition_id: str,
    watermark: datetime,
    children: tuple[ChildPartition, ...] = (),
    records: int = 0,
) -> PartitionOutcome:
    return PartitionOutcome(partition_id, True, watermark, records, None, children)


def child(partition_id: str, start: datetime, *parents: str) -> ChildPartition:
    return ChildPartition(partition_id, start, parents)


def run_window(store, win: Window, outcomes, owner: str = "run-1", initial=(), snapshot: int = 1):
    """Plan, extract and commit ``win`` as ``owner``; return the committed window record."""
    store.plan_window(win, owner, LEASE, initial)
    store.mark_extracted(win, owner, snapshot)
    return store.commit_window(win, owner, outcomes)


def partition_states(store, stream: str = "orders") -> dict[str, str]:
    return {p.partition_id: p.state.value for p in store.list_partitions(stream)}
