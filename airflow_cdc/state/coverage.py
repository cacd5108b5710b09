"""Intervals a catch-up window covered (``cdc_covered_intervals``).

A catch-up window ``[s, E)`` reads the intervals of the DAG runs after its own; each of those
runs records its interval here, naming the window that read it. Windows stay contiguous and
never overlap: a covered interval is not a window, it is a record that points at one. The
rules, checked under the stream's lock:

* the covering window starts before the interval and ends at or after its end: an interval
  the window only partly read would leave the rest to a window that can never start there
  (the DAG's schedule changed; refused, naming both);
* recording an interval again changes nothing (I1); another end for the same start is
  refused like a window's.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import insert, select
from sqlalchemy.engine import Connection, Row

from airflow_cdc.model import Window, format_ts
from airflow_cdc.state.errors import WindowNotFoundError, WindowOrderError
from airflow_cdc.state.records import CoveredIntervalRecord, window_name
from airflow_cdc.state.rows import name, window_record
from airflow_cdc.state.tables import covered_intervals, windows
from airflow_cdc.state.transitions import lock_stream


def covering_row(conn: Connection, stream_id: str, start: datetime) -> Row | None:
    """The stream's window that starts before ``start`` and ends after it, if any."""
    row = conn.execute(
        select(windows)
        .where(windows.c.stream_id == stream_id)
        .where(windows.c.window_start < start)
        .order_by(windows.c.window_start.desc())
        .limit(1)
    ).first()
    return row if row is not None and row.window_end > start else None


def covering(conn: Connection, stream_id: str, start: datetime):
    row = covering_row(conn, stream_id, start)
    return None if row is None else window_record(row)


def record(conn: Connection, now: datetime, interval: Window) -> CoveredIntervalRecord:
    """Record that ``interval`` was read by the window covering it; the same record again."""
    lock_stream(conn, interval.stream_id)
    known = _row(conn, interval.stream_id, interval.start)
    if known is not None:
        if known.interval_end != interval.end:
            raise WindowOrderError(
                f"interval {_name(interval)} conflicts with the recorded covered interval "
                f"ending at {format_ts(known.interval_end)}: the DAG's schedule changed, so "
                f"keep the old schedule or reset the stream"
            )
        return _record(conn, known)
    row = covering_row(conn, interval.stream_id, interval.start)
    if row is None:
        raise WindowNotFoundError(
            f"interval {_name(interval)} is read by no window: no window of the stream starts "
            f"before it and ends after its start; plan the window starting at "
            f"{format_ts(interval.start)} instead"
        )
    if row.window_end < interval.end:
        raise WindowOrderError(
            f"interval {_name(interval)} is only partly read by {name(row)}: a window that "
            f"starts at {format_ts(row.window_end)} would split it, so the DAG's schedule "
            f"changed; keep the old schedule or reset the stream"
        )
    conn.execute(
        insert(covered_intervals).values(
            stream_id=interval.stream_id,
            interval_start=interval.start,
            interval_end=interval.end,
            window_start=row.window_start,
            recorded_at=now,
        )
    )
    return _record(conn, _row(conn, interval.stream_id, interval.start))


def get(conn: Connection, stream_id: str, start: datetime) -> CoveredIntervalRecord | None:
    row = _row(conn, stream_id, start)
    return None if row is None else _record(conn, row)


def of_stream(
    conn: Connection, stream_id: str, window_starts: Collection[datetime] | None = None,
) -> list[CoveredIntervalRecord]:
    """The stream's covered intervals in time order (only those of the windows starting at
    ``window_starts``, if named)."""
    query = select(covered_intervals, windows.c.window_end).join(
        windows,
        (windows.c.stream_id == covered_intervals.c.stream_id)
        & (windows.c.window_start == covered_intervals.c.window_start),
    ).where(covered_intervals.c.stream_id == stream_id)
    if window_starts is not None:
        query = query.where(covered_intervals.c.window_start.in_(list(window_starts)))
    rows = conn.execute(query.order_by(covered_intervals.c.interval_start))
    return [_from_joined(row) for row in rows]


def _row(conn: Connection, stream_id: str, start: datetime) -> Row | None:
    return conn.execute(
        select(covered_intervals)
        .where(covered_intervals.c.stream_id == stream_id)
        .where(covered_intervals.c.interval_start == start)
    ).first()


def _record(conn: Connection, row: Row) -> CoveredIntervalRecord:
    end = conn.execute(
        select(windows.c.window_end)
        .where(windows.c.stream_id == row.stream_id)
        .where(windows.c.window_start == row.window_start)
    ).scalar_one()
    return CoveredIntervalRecord(row.stream_id, row.interval_start, row.interval_end,
                                 row.window_start, end, row.recorded_at)


def _from_joined(row: Row) -> CoveredIntervalRecord:
    return CoveredIntervalRecord(row.stream_id, row.interval_start, row.interval_end,
                                 row.window_start, row.window_end, row.recorded_at)


def _name(interval: Window) -> str:
    return window_name(interval.stream_id, interval.start, interval.end)
