"""A window's plan (``cdc_window_partitions``): the positions it reads and what each one found.

The plan keeps its own copy of every position, so a re-run of a window reads exactly what the
first run read, even after its partitions moved on or were purged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import BigInteger, Boolean, Text, select
from sqlalchemy.engine import Connection

from airflow_cdc.model import PartitionPosition, Window
from airflow_cdc.state import bulk
from airflow_cdc.state.outcomes import CommitChanges
from airflow_cdc.state.records import WindowPartitionRecord
from airflow_cdc.state.rows import window_key, window_partition_record
from airflow_cdc.state.tables import UtcDateTime, dumps, window_partitions

_PLANNED = window_partitions.c.origin == "planned"


def record(conn: Connection, window: Window, positions: Sequence[PartitionPosition]) -> None:
    bulk.insert_all(conn, window_partitions, [_row(window, p, "planned") for p in positions])


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
    """What each partition found: on its planned row, or on a new row for a child read here
    (UPDATEs of many rows, one INSERT)."""
    children_by_id = {change.child.partition_id: change.child for change in changes.children}
    planned, born = [], []
    for change in changes.outcomes:
        outcome = change.outcome
        found = {
            "finished": outcome.finished,
            "watermark": outcome.watermark,
            "records": outcome.records,
        }
        if change.planned:
            planned.append({"partition_id": outcome.partition_id, **found})
            continue
        child = children_by_id[outcome.partition_id]
        position = PartitionPosition(child.partition_id, child.start, None, child.parent_ids)
        born.append(_row(window, position, "child", found))
    bulk.update_from_rows(
        conn,
        window_partitions,
        planned,
        {"partition_id": Text(), "finished": Boolean(), "watermark": UtcDateTime(),
         "records": BigInteger()},
        where=lambda given: (
            *window_key(window_partitions, window),
            window_partitions.c.partition_id == given.c.partition_id,
        ),
        changes=lambda given: {
            "finished": given.c.finished,
            "watermark": given.c.watermark,
            "records": given.c.records,
        },
        returning=window_partitions.c.partition_id,
    )
    bulk.insert_all(conn, window_partitions, born)


def list_plan(conn: Connection, window: Window) -> list[WindowPartitionRecord]:
    rows = conn.execute(
        select(window_partitions)
        .where(*window_key(window_partitions, window))
        .order_by(window_partitions.c.partition_id)
    )
    return [window_partition_record(row) for row in rows]


def _row(
    window: Window,
    position: PartitionPosition,
    origin: str,
    found: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    # Every row names every column, so rows of one INSERT share one statement.
    return {
        "stream_id": window.stream_id,
        "window_start": window.start,
        "partition_id": position.partition_id,
        "parent_ids": dumps(list(position.parent_ids)),
        "start_ts": position.start,
        "resume_position": position.resume_position,
        "origin": origin,
        "finished": None,
        "watermark": None,
        "records": None,
        **(found or {}),
    }
