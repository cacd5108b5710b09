"""A window's plan (``cdc_window_partitions``): the positions it reads and what each one found.

The plan keeps its own copy of every position, so a re-run of a window reads exactly what the
first run read, even after its partitions moved on or were purged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from airflow_cdc.model import PartitionPosition, Window
from airflow_cdc.state.outcomes import CommitChanges
from airflow_cdc.state.records import WindowPartitionRecord
from airflow_cdc.state.rows import window_key, window_partition_record
from airflow_cdc.state.tables import dumps, window_partitions

_PLANNED = window_partitions.c.origin == "planned"


def record(conn: Connection, window: Window, positions: Sequence[PartitionPosition]) -> None:
    for position in positions:
        _insert(conn, window, position, "planned")


def planned_positions(conn: Connection, window: Window) -> tuple[PartitionPosition, ...]:
    planned = conn.execute(
        select(window_partitions)
        .where(*window_key(window_partitions, window))
        .where(_PLANNED)
        .order_by(window_partitions.c.partition_id)
    )
    return tuple(window_partition_record(row).position for row in planned)


def planned_ids(conn: Connection, window: Window) -> frozenset[str]:
    return frozenset(
        conn.execute(
            select(window_partitions.c.partition_id)
            .where(*window_key(window_partitions, window))
            .where(_PLANNED)
        ).scalars()
    )


def record_findings(conn: Connection, window: Window, changes: CommitChanges) -> None:
    """What each partition found: on its planned row, or on a new row for a child read here."""
    children_by_id = {change.child.partition_id: change.child for change in changes.children}
    for change in changes.outcomes:
        outcome = change.outcome
        found = {
            "finished": outcome.finished,
            "watermark": outcome.watermark,
            "records": outcome.records,
        }
        if change.planned:
            conn.execute(
                update(window_partitions)
                .where(*window_key(window_partitions, window))
                .where(window_partitions.c.partition_id == outcome.partition_id)
                .values(**found)
            )
            continue
        child = children_by_id[outcome.partition_id]
        born = PartitionPosition(child.partition_id, child.start, None, child.parent_ids)
        _insert(conn, window, born, "child", found)


def list_plan(conn: Connection, window: Window) -> list[WindowPartitionRecord]:
    rows = conn.execute(
        select(window_partitions)
        .where(*window_key(window_partitions, window))
        .order_by(window_partitions.c.partition_id)
    )
    return [window_partition_record(row) for row in rows]


def _insert(
    conn: Connection,
    window: Window,
    position: PartitionPosition,
    origin: str,
    found: Mapping[str, Any] | None = None,
) -> None:
    conn.execute(
        insert(window_partitions).values(
            stream_id=window.stream_id,
            window_start=window.start,
            partition_id=position.partition_id,
            parent_ids=dumps(list(position.parent_ids)),
            start_ts=position.start,
            resume_position=position.resume_position,
            origin=origin,
            **(found or {}),
        )
    )
