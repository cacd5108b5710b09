"""The stream registry (``cdc_streams``): register once, list, reset.

A stream's row is also what every transition locks (:func:`transitions.lock_stream`), so a
stream must be registered before any window of it is planned.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Connection

from airflow_cdc.state.errors import StreamConfigChangedError
from airflow_cdc.state.records import StreamRecord
from airflow_cdc.state.rows import stream_record
from airflow_cdc.state.tables import (
    covered_intervals,
    partitions,
    streams,
    window_partitions,
    window_steps,
    windows,
)


def register(
    conn: Connection, now: datetime, stream_id: str, source_kind: str, config_fingerprint: str
) -> StreamRecord:
    row = conn.execute(select(streams).where(streams.c.stream_id == stream_id)).first()
    if row is None:
        conn.execute(
            insert(streams).values(
                stream_id=stream_id,
                source_kind=source_kind,
                config_fingerprint=config_fingerprint,
                created_at=now,
            )
        )
        return StreamRecord(stream_id, source_kind, config_fingerprint, now)
    if (row.source_kind, row.config_fingerprint) != (source_kind, config_fingerprint):
        raise StreamConfigChangedError(
            f"stream {stream_id!r} was registered as {row.source_kind} with config "
            f"fingerprint {row.config_fingerprint!r} and is now configured as "
            f"{source_kind} with fingerprint {config_fingerprint!r}: its recorded "
            f"partitions and positions belong to the old configuration; reset the "
            f"stream (StateStore.reset_stream({stream_id!r})) or use a new stream id"
        )
    return stream_record(row)


def list_streams(conn: Connection) -> list[StreamRecord]:
    rows = conn.execute(select(streams).order_by(streams.c.stream_id))
    return [stream_record(row) for row in rows]


def reset(conn: Connection, now: datetime, stream_id: str) -> None:
    """Delete every row of the stream, dependent tables first."""
    # Locked like a transition, but an unregistered stream has nothing to reset: no error.
    conn.execute(
        select(streams.c.stream_id).where(streams.c.stream_id == stream_id).with_for_update()
    )
    for table in (covered_intervals, window_steps, window_partitions, windows, partitions,
                  streams):
        conn.execute(delete(table).where(table.c.stream_id == stream_id))
