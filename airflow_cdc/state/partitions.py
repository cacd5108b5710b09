"""The stream's partitions: created when a window opens, moved by a commit, purged when finished.

Each write is guarded like a window's: an UPDATE names the state it expects (and never moves a
watermark backwards) and must change exactly one row, else another run is active on the stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Connection

from airflow_cdc.model import PartitionOutcome, PartitionPosition, PartitionState, Window
from airflow_cdc.state.errors import WindowConflictError
from airflow_cdc.state.outcomes import ChildChange, OutcomeChange
from airflow_cdc.state.records import (
    LIVE_PARTITION_STATES,
    READABLE_PARTITION_STATES,
    PartitionRecord,
    window_name,
)
from airflow_cdc.state.rows import of_stream, partition_key, partition_record
from airflow_cdc.state.tables import dumps, partitions
from airflow_cdc.state.transitions import lock_stream


def list_partitions(
    conn: Connection, stream_id: str, states: Iterable[PartitionState] | None
) -> list[PartitionRecord]:
    query = of_stream(partitions, stream_id, states, PartitionState, partitions.c.partition_id)
    rows = conn.execute(query)
    return [partition_record(row) for row in rows]


def known_ids(conn: Connection, stream_id: str) -> set[str]:
    """Every partition id the stream ever had and still keeps, in any state."""
    return set(
        conn.execute(
            select(partitions.c.partition_id).where(partitions.c.stream_id == stream_id)
        ).scalars()
    )


def create_ready(
    conn: Connection, now: datetime, window: Window, positions: Sequence[PartitionPosition]
) -> None:
    """New partitions, READY to be read from their start by ``window``."""
    for position in positions:
        _insert(
            conn,
            now,
            window,
            position,
            reported_by=sorted(position.parent_ids),
            state=PartitionState.READY,
        )


def readable_positions(conn: Connection, stream_id: str) -> list[PartitionPosition]:
    """Where the next window reads each READY or RUNNING partition from."""
    readable = conn.execute(
        select(partitions)
        .where(partitions.c.stream_id == stream_id)
        .where(partitions.c.state.in_([s.value for s in READABLE_PARTITION_STATES]))
        .order_by(partitions.c.partition_id)
    )
    return [partition_record(row).next_position for row in readable]


def stored_for_commit(
    conn: Connection,
    stream_id: str,
    planned_ids: frozenset[str],
    outcomes: Sequence[PartitionOutcome],
) -> dict[str, PartitionRecord]:
    """The stored rows of every planned, reporting or reported partition of a commit."""
    wanted = set(planned_ids)
    for outcome in outcomes:
        wanted.add(outcome.partition_id)
        wanted.update(child.partition_id for child in outcome.children)
    return {
        row.partition_id: partition_record(row)
        for row in conn.execute(
            select(partitions)
            .where(partitions.c.stream_id == stream_id)
            .where(partitions.c.partition_id.in_(sorted(wanted)))
        )
    }


def record_children(
    conn: Connection, now: datetime, window: Window, changes: Sequence[ChildChange]
) -> None:
    """Reported children are created, or gain their reporters (READY once all reported)."""
    for change in changes:
        child = change.child
        if change.existing_state is None:
            born = PartitionPosition(
                child.partition_id, child.start, change.resume_position, child.parent_ids
            )
            _insert(conn, now, window, born, list(change.reported_by), change.new_state)
            continue
        reported = conn.execute(
            update(partitions)
            .where(*partition_key(window.stream_id, child.partition_id))
            .where(partitions.c.state == change.existing_state.value)
            .values(
                reported_by=dumps(list(change.reported_by)),
                resume_position=change.resume_position,
                state=change.new_state.value,
                updated_at=now,
            )
        )
        _require_one_row(reported.rowcount, window, child.partition_id)


def record_outcomes(
    conn: Connection, now: datetime, window: Window, changes: Sequence[OutcomeChange]
) -> None:
    """FINISHED, or RUNNING from the new resume position and watermark (never backwards)."""
    for change in changes:
        outcome = change.outcome
        values: dict[str, Any] = {
            "state": (
                PartitionState.FINISHED if outcome.finished else PartitionState.RUNNING
            ).value,
            "watermark": outcome.watermark,
            "resume_position": outcome.resume_position,
            "updated_at": now,
        }
        if outcome.watermark > change.previous_watermark:
            values["watermark_since"] = now
        if outcome.finished:
            values["finished_window"] = window.start
        moved = conn.execute(
            update(partitions)
            .where(*partition_key(window.stream_id, outcome.partition_id))
            .where(partitions.c.state == change.previous_state.value)
            .where(partitions.c.watermark <= outcome.watermark)  # never backwards
            .values(**values)
        )
        _require_one_row(moved.rowcount, window, outcome.partition_id)


def lowest_live_watermark(conn: Connection, stream_id: str) -> datetime | None:
    """The lowest watermark of the partitions not FINISHED (None when every one is)."""
    return conn.execute(
        select(func.min(partitions.c.watermark))
        .where(partitions.c.stream_id == stream_id)
        .where(partitions.c.state.in_([s.value for s in LIVE_PARTITION_STATES]))
    ).scalar()


def purge_finished(conn: Connection, now: datetime, stream_id: str, cutoff: datetime) -> int:
    """Delete the stream's FINISHED partitions last updated before ``cutoff``; count them."""
    lock_stream(conn, stream_id)
    result = conn.execute(
        delete(partitions)
        .where(partitions.c.stream_id == stream_id)
        .where(partitions.c.state == PartitionState.FINISHED.value)
        .where(partitions.c.updated_at < cutoff)
    )
    return result.rowcount


def _insert(
    conn: Connection,
    now: datetime,
    window: Window,
    position: PartitionPosition,
    reported_by: list[str],
    state: PartitionState,
) -> None:
    """A partition the stream did not know, created by ``window`` at its start position."""
    conn.execute(
        insert(partitions).values(
            stream_id=window.stream_id,
            partition_id=position.partition_id,
            parent_ids=dumps(list(position.parent_ids)),
            reported_by=dumps(reported_by),
            resume_position=position.resume_position,
            start_ts=position.start,
            watermark=position.start,
            watermark_since=now,
            state=state.value,
            created_window=window.start,
            finished_window=None,
            updated_at=now,
        )
    )


def _require_one_row(rowcount: int, window: Window, partition_id: str) -> None:
    if rowcount != 1:
        raise WindowConflictError(
            f"partition {partition_id!r} changed while "
            f"{window_name(window.stream_id, window.start, window.end)} was committing: another "
            f"run is active on the stream; nothing was changed, re-run this step"
        )
