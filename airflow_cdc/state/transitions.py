"""The discipline every guarded transition shares: the stream lock and the guarded UPDATE.

A transition is one transaction that

1. locks the window's stream (PostgreSQL: ``SELECT ... FOR UPDATE`` on its ``cdc_streams`` row;
   SQLite: ``BEGIN IMMEDIATE`` already holds the database's write lock), so the transitions of
   one stream run one at a time (:func:`lock_stream`, :func:`locked_window`);
2. reads the window and refuses what the protocol forbids (the role modules' checks);
3. writes with ``UPDATE ... WHERE state = :expected [AND lease_owner = :me AND
   lease_expires_at > :now]`` and checks that exactly one row changed (:func:`guarded_update`).

The stream lock rather than a window-row lock: a plan inserts a window row that does not
exist yet, and a commit of W and the plan of W+1 both touch the stream's partitions.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Connection, Row

from airflow_cdc.model import Window
from airflow_cdc.state import engine as engines
from airflow_cdc.state.errors import (
    StreamNotRegisteredError,
    WindowConflictError,
    WindowNotFoundError,
    WindowOrderError,
)
from airflow_cdc.state.records import window_name
from airflow_cdc.state.rows import name, window_row
from airflow_cdc.state.tables import streams, windows


def lock_stream(conn: Connection, stream_id: str) -> None:
    found = conn.execute(
        select(streams.c.stream_id).where(streams.c.stream_id == stream_id).with_for_update()
    ).first()
    if found is None:
        raise StreamNotRegisteredError(
            f"stream {stream_id!r} is not registered in the state store "
            f"{engines.safe_url(conn.engine.url)}: register it first (StateStore.register_stream)"
        )


def locked_window(conn: Connection, window: Window) -> Row:
    """The window's row, read after locking its stream; it must have been planned as is."""
    lock_stream(conn, window.stream_id)
    row = window_row(conn, window.stream_id, window.start)
    if row is None:
        raise WindowNotFoundError(
            f"{window_name(window.stream_id, window.start, window.end)} was never planned: "
            f"plan it first (StateStore.plan_window)"
        )
    require_same_end(row, window)
    return row


def require_same_end(row: Row, window: Window) -> None:
    if row.window_end != window.end:
        raise WindowOrderError(
            f"{window_name(window.stream_id, window.start, window.end)} conflicts with recorded "
            f"{name(row)}: same start, different end; the DAG's schedule changed, so keep the "
            f"old schedule or reset the stream (StateStore.reset_stream)"
        )


def guarded_update(
    conn: Connection,
    row: Row,
    values: Mapping[str, Any],
    *,
    now: datetime,
    owner: str | None = None,
    lease_live_at: datetime | None = None,
) -> None:
    """UPDATE the window only if it is still as ``row`` saw it (and leased as required)."""
    guarded = (
        update(windows)
        .where(windows.c.stream_id == row.stream_id)
        .where(windows.c.window_start == row.window_start)
        .where(windows.c.state == row.state)
    )
    if owner is not None:
        guarded = guarded.where(windows.c.lease_owner == owner)
    if lease_live_at is not None:
        guarded = guarded.where(windows.c.lease_expires_at > lease_live_at)
    if conn.execute(guarded.values(**values, updated_at=now)).rowcount != 1:
        raise WindowConflictError(
            f"{name(row)} changed while this run was updating it (expected state "
            f"{row.state}, lease owner {owner or row.lease_owner!r}): another run is active "
            f"on the window; nothing was changed, re-run this step"
        )
