"""When each step of a window ran (``cdc_window_steps``): observed, never a guard.

A protocol task records its step once the step succeeded: when it started, when it ended and
what it reported (apply: the dead-letter rows). ``airflow-cdc lag-chart`` and the CDC view in
the Airflow UI read them as per-step durations. A re-run of a step replaces its row; no
transition reads these rows, so they can neither block nor change the window protocol.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Connection

from airflow_cdc.model import Window
from airflow_cdc.state.records import WindowStepRecord
from airflow_cdc.state.rows import window_key, window_step_record
from airflow_cdc.state.tables import dumps, window_steps

# The protocol's steps, in the order a window runs them.
STEPS = ("plan", "extract", "commit", "apply", "gate")


def record(
    conn: Connection,
    now: datetime,
    window: Window,
    step: str,
    started_at: datetime,
    finished_at: datetime,
    details: Mapping[str, Any],
) -> WindowStepRecord:
    """The step's row, replacing the one an earlier run of the same step left."""
    conn.execute(
        delete(window_steps)
        .where(*window_key(window_steps, window))
        .where(window_steps.c.step == step)
    )
    conn.execute(
        insert(window_steps).values(
            stream_id=window.stream_id,
            window_start=window.start,
            step=step,
            started_at=started_at,
            finished_at=finished_at,
            details=dumps(dict(details)),
        )
    )
    return WindowStepRecord(
        window.stream_id, window.start, step, started_at, finished_at, dict(details)
    )


def of_windows(
    conn: Connection, stream_id: str, starts: Sequence[datetime]
) -> dict[datetime, dict[str, WindowStepRecord]]:
    """The recorded steps of the stream's windows starting at ``starts``, by start and step."""
    found: dict[datetime, dict[str, WindowStepRecord]] = {}
    if not starts:
        return found
    rows = conn.execute(
        select(window_steps)
        .where(window_steps.c.stream_id == stream_id)
        .where(window_steps.c.window_start.in_(sorted(set(starts))))
    )
    for row in rows:
        step = window_step_record(row)
        found.setdefault(step.window_start, {})[step.step] = step
    return found
