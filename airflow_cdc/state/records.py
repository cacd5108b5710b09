"""What the state store hands back: small immutable values, never database rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from airflow_cdc.model import PartitionPosition, PartitionState, Window, WindowState, format_ts

# Window states from which the window's outcomes are recorded: the next window may start.
COMMITTED_OR_LATER = frozenset({WindowState.COMMITTED, WindowState.APPLIED, WindowState.COMPLETE})
# Window states whose next step needs the window's lease (extract, commit, apply): while one of
# them holds a live lease, no other run may plan the window, and the next window waits for it.
LEASED_STATES = frozenset({WindowState.PLANNED, WindowState.EXTRACTED, WindowState.COMMITTED})
# Partition states that still have changes to deliver.
LIVE_PARTITION_STATES = (PartitionState.CREATED, PartitionState.READY, PartitionState.RUNNING)
# Partition states a window reads.
READABLE_PARTITION_STATES = (PartitionState.READY, PartitionState.RUNNING)


def window_name(stream_id: str, start: datetime, end: datetime) -> str:
    """How messages name a window: ``window orders[2024-01-01T00:00:00.000000Z, ...)``."""
    return f"window {stream_id}[{format_ts(start)}, {format_ts(end)})"


@dataclass(frozen=True)
class StreamRecord:
    stream_id: str
    source_kind: str
    config_fingerprint: str
    created_at: datetime


@dataclass(frozen=True)
class PartitionRecord:
    """One partition of a stream and how far it has been read.

    ``watermark`` is the instant up to which the partition's changes are read (its ``start``
    until it is first read); ``watermark_since`` is when the watermark last advanced, so a
    stalled partition can be reported with the time it stalled.
    """

    stream_id: str
    partition_id: str
    state: PartitionState
    parent_ids: tuple[str, ...]
    reported_by: tuple[str, ...]
    start: datetime
    watermark: datetime
    watermark_since: datetime
    resume_position: str | None
    created_window: datetime | None
    finished_window: datetime | None
    updated_at: datetime

    @property
    def next_position(self) -> PartitionPosition:
        """Where the next window reads this partition from: its watermark and resume position."""
        return PartitionPosition(
            partition_id=self.partition_id,
            start=self.watermark,
            resume_position=self.resume_position,
            parent_ids=self.parent_ids,
        )


@dataclass(frozen=True)
class WindowLease:
    """Who holds an open window and until when, as ``status`` and the CDC view show it.

    ``owner`` is the holder's lease owner, for a DAG run ``dag_id/run_id``; ``live`` says
    whether the lease is unexpired at the instant asked about: a live lease keeps every other
    run from planning the window (I6), an expired one is taken over by the window's next plan.
    """

    owner: str
    expires_at: datetime
    live: bool

    @property
    def dag_run(self) -> tuple[str, str] | None:
        """(dag_id, run_id) when the owner is a DAG run (``dag_id/run_id``), else None."""
        dag_id, _, run_id = self.owner.partition("/")
        return (dag_id, run_id) if dag_id and run_id else None


@dataclass(frozen=True)
class WindowRecord:
    """One window of a stream with its state, lease and results."""

    stream_id: str
    start: datetime
    end: datetime
    state: WindowState
    attempt: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    low_watermark: datetime | None
    counts: dict
    changelog_snapshot_id: int | None
    target_snapshot_ids: dict
    failure_reason: str | None
    completeness_note: str | None
    created_at: datetime
    updated_at: datetime

    @property
    def window(self) -> Window:
        return Window(self.stream_id, self.start, self.end)

    @property
    def committed(self) -> bool:
        """Whether the window's outcomes are recorded (COMMITTED, APPLIED or COMPLETE)."""
        return self.state in COMMITTED_OR_LATER

    def lease_at(self, now: datetime) -> WindowLease | None:
        """The window's lease at ``now`` while a step still needs it (PLANNED, EXTRACTED,
        COMMITTED), live or expired; None once the window is applied, complete or failed, or
        was never leased (those leases hold nothing back)."""
        if self.state not in LEASED_STATES or not self.lease_owner or self.lease_expires_at is None:
            return None
        return WindowLease(self.lease_owner, self.lease_expires_at, self.lease_expires_at > now)


@dataclass(frozen=True)
class WindowPartitionRecord:
    """One partition one window read: from where (plan) and, once committed, what it found.

    ``origin`` is ``planned`` for partitions in the window's plan and ``child`` for children
    born in the window and read in it.
    """

    stream_id: str
    window_start: datetime
    partition_id: str
    origin: str
    parent_ids: tuple[str, ...]
    start: datetime
    resume_position: str | None
    finished: bool | None
    watermark: datetime | None
    records: int | None

    @property
    def position(self) -> PartitionPosition:
        return PartitionPosition(
            partition_id=self.partition_id,
            start=self.start,
            resume_position=self.resume_position,
            parent_ids=self.parent_ids,
        )


@dataclass(frozen=True)
class WindowStepRecord:
    """When one step of a window last ran to success, and what it reported (``details``)."""

    stream_id: str
    window_start: datetime
    step: str
    started_at: datetime
    finished_at: datetime
    details: dict

    @property
    def seconds(self) -> float:
        return max(0.0, (self.finished_at - self.started_at).total_seconds())


@dataclass(frozen=True)
class WindowPlan:
    """A window and the partition positions it reads; the same every time it is planned."""

    window: WindowRecord
    positions: tuple[PartitionPosition, ...]


@dataclass(frozen=True)
class CoveredIntervalRecord:
    """A DAG run's interval that a catch-up window read with its own: the run's record.

    ``window`` is the covering window (it starts before the interval and ends at or after
    it); the interval's gate opens when that window is COMPLETE.
    """

    stream_id: str
    start: datetime
    end: datetime
    window_start: datetime
    window_end: datetime
    recorded_at: datetime

    @property
    def interval(self) -> Window:
        return Window(self.stream_id, self.start, self.end)

    @property
    def window(self) -> Window:
        return Window(self.stream_id, self.window_start, self.window_end)
