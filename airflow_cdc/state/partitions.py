"""The stream's partitions: created when a window opens, moved by a commit, purged when finished.

Each write is guarded like a window's: an UPDATE names the state it expects (and never moves a
watermark backwards) and must change exactly one row, else another run is active on the stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import String, Text, case, delete, func, literal, select
from sqlalchemy.engine import Connection

from airflow_cdc.model import PartitionOutcome, PartitionPosition, PartitionState, Window
from airflow_cdc.state import bulk
from airflow_cdc.state.errors import WindowConflictError
from airflow_cdc.state.outcomes import ChildChange, OutcomeChange
from airflow_cdc.state.records import (
    LIVE_PARTITION_STATES,
    READABLE_PARTITION_STATES,
    PartitionRecord,
    window_name,
)
from airflow_cdc.state.rows import of_stream, partition_record
from airflow_cdc.state.tables import UtcDateTime, dumps, partitions
from airflow_cdc.state.transitions import lock_stream


def list_partitions(
    conn: Connection, stream_id: str, states: Iterable[PartitionState] | None
) -> list[PartitionRecord]:
    query = of_stream(partitions, stream_id, states, PartitionState, partitions.c.partition_id)
    rows = conn.execute(query)
    return [partition_record(row) for row in rows]


# Bound values per IN list: well below SQLite's limit on a statement's variables.
_IDS_PER_QUERY = 5000


def lowest_live(conn: Connection, stream_id: str, limit: int) -> list[PartitionRecord]:
    """At most ``limit`` live partitions, lowest watermark first: those holding the stream back."""
    rows = conn.execute(
        select(partitions)
        .where(partitions.c.stream_id == stream_id)
        .where(partitions.c.state.in_([s.value for s in LIVE_PARTITION_STATES]))
        .order_by(partitions.c.watermark, partitions.c.partition_id)
        .limit(limit)
    )
    return [partition_record(row) for row in rows]


def by_ids(conn: Connection, stream_id: str, partition_ids: Iterable[str]) -> list[PartitionRecord]:
    """The stream's partitions among ``partition_ids`` (the ones it still keeps), by id."""
    wanted = sorted(set(partition_ids))
    found = []
    for k in range(0, len(wanted), _IDS_PER_QUERY):
        found.extend(
            partition_record(row)
            for row in conn.execute(
                select(partitions)
                .where(partitions.c.stream_id == stream_id)
                .where(partitions.c.partition_id.in_(wanted[k:k + _IDS_PER_QUERY]))
            )
        )
    return sorted(found, key=lambda p: p.partition_id)


def count_live(conn: Connection, stream_id: str, behind: datetime | None) -> tuple[int, int]:
    """(live partitions, those of them whose watermark is before ``behind``; 0 without it)."""
    live = (partitions.c.stream_id == stream_id) & partitions.c.state.in_(
        [s.value for s in LIVE_PARTITION_STATES]
    )
    total = conn.execute(select(func.count()).where(live)).scalar() or 0
    if behind is None:
        return total, 0
    lagging = conn.execute(
        select(func.count()).where(live).where(partitions.c.watermark < behind)
    ).scalar()
    return total, lagging or 0


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
    """New partitions, READY to be read from their start by ``window`` (one INSERT)."""
    bulk.insert_all(conn, partitions, [
        _new_row(now, window, position, sorted(position.parent_ids), PartitionState.READY)
        for position in positions
    ])


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
    stored = {}
    # In chunks: SQLite refuses a statement of more than 32,766 bound values.
    for ids in bulk.chunks(sorted(wanted), 10 * bulk.CHUNK_ROWS):
        for row in conn.execute(
            select(partitions)
            .where(partitions.c.stream_id == stream_id)
            .where(partitions.c.partition_id.in_(ids))
        ):
            stored[row.partition_id] = partition_record(row)
    return stored


def record_children(
    conn: Connection, now: datetime, window: Window, changes: Sequence[ChildChange]
) -> None:
    """Reported children are created, or gain their reporters (READY once all reported).

    New children in one INSERT; known ones in guarded UPDATEs of many rows, each row only
    from the state it was read in (:func:`_require_every_row`)."""
    born = [
        _new_row(
            now,
            window,
            PartitionPosition(c.child.partition_id, c.child.start, c.resume_position, c.child.parent_ids),
            list(c.reported_by),
            c.new_state,
        )
        for c in changes
        if c.existing_state is None
    ]
    bulk.insert_all(conn, partitions, born)
    known = [
        {
            "partition_id": c.child.partition_id,
            "expected_state": c.existing_state.value,
            "state": c.new_state.value,
            "reported_by": dumps(list(c.reported_by)),
            "resume_position": c.resume_position,
        }
        for c in changes
        if c.existing_state is not None
    ]
    reported = bulk.update_from_rows(
        conn,
        partitions,
        known,
        {"partition_id": Text(), "expected_state": String(), "state": String(),
         "reported_by": Text(), "resume_position": Text()},
        where=lambda given: (
            partitions.c.stream_id == window.stream_id,
            partitions.c.partition_id == given.c.partition_id,
            partitions.c.state == given.c.expected_state,
        ),
        changes=lambda given: {
            "reported_by": given.c.reported_by,
            "resume_position": given.c.resume_position,
            "state": given.c.state,
            "updated_at": literal(now, UtcDateTime()),
        },
        returning=partitions.c.partition_id,
    )
    _require_every_row(reported, [row["partition_id"] for row in known], window)


def record_outcomes(
    conn: Connection, now: datetime, window: Window, changes: Sequence[OutcomeChange]
) -> None:
    """FINISHED, or RUNNING from the new resume position and watermark (never backwards).

    Guarded UPDATEs of many rows: each row only from the state it was read in and only to a
    watermark not before its own, and every row must change (:func:`_require_every_row`)."""
    rows = [
        {
            "partition_id": c.outcome.partition_id,
            "expected_state": c.previous_state.value,
            "state": (PartitionState.FINISHED if c.outcome.finished else PartitionState.RUNNING).value,
            "watermark": c.outcome.watermark,
            "resume_position": c.outcome.resume_position,
        }
        for c in changes
    ]
    stamp = literal(now, UtcDateTime())
    moved = bulk.update_from_rows(
        conn,
        partitions,
        rows,
        {"partition_id": Text(), "expected_state": String(), "state": String(),
         "watermark": UtcDateTime(), "resume_position": Text()},
        where=lambda given: (
            partitions.c.stream_id == window.stream_id,
            partitions.c.partition_id == given.c.partition_id,
            partitions.c.state == given.c.expected_state,
            partitions.c.watermark <= given.c.watermark,  # never backwards
        ),
        changes=lambda given: {
            "state": given.c.state,
            "watermark": given.c.watermark,
            "resume_position": given.c.resume_position,
            "updated_at": stamp,
            # SET reads the row as it was: the watermark moved when the new one is later.
            "watermark_since": case(
                (given.c.watermark > partitions.c.watermark, stamp),
                else_=partitions.c.watermark_since,
            ),
            "finished_window": case(
                (given.c.state == PartitionState.FINISHED.value, literal(window.start, UtcDateTime())),
                else_=partitions.c.finished_window,
            ),
        },
        returning=partitions.c.partition_id,
    )
    _require_every_row(moved, [row["partition_id"] for row in rows], window)


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


def _new_row(
    now: datetime,
    window: Window,
    position: PartitionPosition,
    reported_by: list[str],
    state: PartitionState,
) -> dict[str, Any]:
    """The row of a partition the stream did not know, created by ``window`` at its start."""
    return {
        "stream_id": window.stream_id,
        "partition_id": position.partition_id,
        "parent_ids": dumps(list(position.parent_ids)),
        "reported_by": dumps(reported_by),
        "resume_position": position.resume_position,
        "start_ts": position.start,
        "watermark": position.start,
        "watermark_since": now,
        "state": state.value,
        "created_window": window.start,
        "finished_window": None,
        "updated_at": now,
    }


def _require_every_row(changed: Sequence[str], expected: Sequence[str], window: Window) -> None:
    """Each guarded row changed exactly once, else another run changed the stream meanwhile."""
    if len(changed) == len(expected) and set(changed) == set(expected):
        return
    missing = sorted(set(expected) - set(changed))
    partition_id = missing[0] if missing else sorted(changed)[0]
    raise WindowConflictError(
        f"partition {partition_id!r} changed while "
        f"{window_name(window.stream_id, window.start, window.end)} was committing: another "
        f"run is active on the stream; nothing was changed, re-run this step"
    )
