"""How the store reads its rows: lookups by key, the names messages give them, their records.

Every role module reads windows and partitions by the same keys and turns rows into the
immutable records of :mod:`airflow_cdc.state.records`; that reading lives here once.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.engine import Connection, Row

from airflow_cdc.model import PartitionState, Window, WindowState, format_ts
from airflow_cdc.state.records import (
    PartitionRecord,
    StreamRecord,
    WindowPartitionRecord,
    WindowRecord,
    WindowStepRecord,
    window_name,
)
from airflow_cdc.state.tables import loads, partitions, windows


def window_key(table, window: Window) -> tuple:
    return (table.c.stream_id == window.stream_id, table.c.window_start == window.start)


def partition_key(stream_id: str, partition_id: str) -> tuple:
    return (partitions.c.stream_id == stream_id, partitions.c.partition_id == partition_id)


def of_stream(table, stream_id: str, states: Iterable | None, state_type: type, order_by):
    """The stream's rows of ``table`` in order, only those in ``states`` unless it is None."""
    query = select(table).where(table.c.stream_id == stream_id)
    if states is not None:
        query = query.where(table.c.state.in_([state_type(s).value for s in states]))
    return query.order_by(order_by)


def window_row(conn: Connection, stream_id: str, start: datetime) -> Row | None:
    return conn.execute(
        select(windows)
        .where(windows.c.stream_id == stream_id)
        .where(windows.c.window_start == start)
    ).first()


def name(row: Row) -> str:
    return window_name(row.stream_id, row.window_start, row.window_end)


def ts(value: datetime | None) -> str:
    return "released" if value is None else format_ts(value)


def stream_record(row: Row) -> StreamRecord:
    return StreamRecord(row.stream_id, row.source_kind, row.config_fingerprint, row.created_at)


def window_record(row: Row) -> WindowRecord:
    return WindowRecord(
        stream_id=row.stream_id,
        start=row.window_start,
        end=row.window_end,
        state=WindowState(row.state),
        attempt=row.attempt,
        lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at,
        low_watermark=row.low_watermark,
        counts=loads(row.counts, {}),
        changelog_snapshot_id=row.changelog_snapshot_id,
        target_snapshot_ids=loads(row.target_snapshot_ids, {}),
        failure_reason=row.failure_reason,
        completeness_note=row.completeness_note,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def partition_record(row: Row) -> PartitionRecord:
    return PartitionRecord(
        stream_id=row.stream_id,
        partition_id=row.partition_id,
        state=PartitionState(row.state),
        parent_ids=tuple(loads(row.parent_ids, [])),
        reported_by=tuple(loads(row.reported_by, [])),
        start=row.start_ts,
        watermark=row.watermark,
        watermark_since=row.watermark_since,
        resume_position=row.resume_position,
        created_window=row.created_window,
        finished_window=row.finished_window,
        updated_at=row.updated_at,
    )


def window_partition_record(row: Row) -> WindowPartitionRecord:
    return WindowPartitionRecord(
        stream_id=row.stream_id,
        window_start=row.window_start,
        partition_id=row.partition_id,
        origin=row.origin,
        parent_ids=tuple(loads(row.parent_ids, [])),
        start=row.start_ts,
        resume_position=row.resume_position,
        finished=row.finished,
        watermark=row.watermark,
        records=row.records,
    )


def window_step_record(row: Row) -> WindowStepRecord:
    return WindowStepRecord(
        stream_id=row.stream_id,
        window_start=row.window_start,
        step=row.step,
        started_at=row.started_at,
        finished_at=row.finished_at,
        details=loads(row.details, {}),
    )
