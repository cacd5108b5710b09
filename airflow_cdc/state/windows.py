"""Windows (``cdc_windows``) and the window protocol: one function per guarded transition.

A window moves PLANNED -> EXTRACTED -> COMMITTED -> APPLIED -> COMPLETE, or to FAILED before it
commits (and from FAILED back to PLANNED when it is planned again). Every transition takes the
locked window (:func:`transitions.locked_window`), refuses what the protocol forbids and ends
with the guarded UPDATE (:func:`transitions.guarded_update`).

Re-running any step is harmless (invariant I1): a transition into the state the window is
already in, by the lease holder, changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection, Row

from airflow_cdc.model import PartitionOutcome, PartitionPosition, Window, WindowState, format_ts
from airflow_cdc.state import leases, partitions, plans
from airflow_cdc.state.errors import (
    IllegalTransitionError,
    LeaseLostError,
    SnapshotMismatchError,
    WindowOrderError,
)
from airflow_cdc.state.outcomes import resolve_commit
from airflow_cdc.state.records import COMMITTED_OR_LATER, WindowPlan, WindowRecord, window_name
from airflow_cdc.state.rows import name, of_stream, window_record, window_row
from airflow_cdc.state.tables import dumps, windows
from airflow_cdc.state.transitions import (
    guarded_update,
    lock_stream,
    locked_window,
    require_same_end,
)

S = WindowState
# The window protocol: the states each state may move to.
_NEXT_STATES: dict[WindowState, tuple[WindowState, ...]] = {
    S.PLANNED: (S.EXTRACTED, S.FAILED),
    S.EXTRACTED: (S.COMMITTED, S.FAILED),
    S.COMMITTED: (S.APPLIED,),
    S.APPLIED: (S.COMPLETE,),
    S.COMPLETE: (),
    S.FAILED: (S.PLANNED,),
}
_FIX_BY_TARGET = {
    S.EXTRACTED: "it was extracted and committed already: a re-run of a committed window "
    "skips extract and commit",
    S.COMMITTED: "extract it first: mark_extracted records its changelog snapshot",
    S.APPLIED: "commit it first: commit_window records its partition outcomes",
    S.COMPLETE: "apply it first: mark_applied records its target snapshots",
    S.FAILED: "its outcomes are committed: re-run its apply or gate step instead of failing it",
}
# The steps that need the caller's unexpired lease, as messages name them.
_STEP_VERBS = {
    S.EXTRACTED: "mark as extracted",
    S.COMMITTED: "commit",
    S.APPLIED: "mark as applied",
}


# --- plan --------------------------------------------------------------------------------------
def plan(
    conn: Connection,
    now: datetime,
    window: Window,
    owner: str,
    expires_at: datetime,
    initial_positions: tuple[PartitionPosition, ...],
    new_partitions: tuple[PartitionPosition, ...],
) -> WindowPlan:
    """Open the window, or take it again; either way return its recorded plan."""
    lock_stream(conn, window.stream_id)
    row = window_row(conn, window.stream_id, window.start)
    if row is None:
        _open(conn, now, window, owner, expires_at, initial_positions, new_partitions)
    else:
        _reopen(conn, now, row, window, owner, expires_at)
    record = window_record(window_row(conn, window.stream_id, window.start))
    return WindowPlan(record, plans.planned_positions(conn, window))


def _open(
    conn: Connection,
    now: datetime,
    window: Window,
    owner: str,
    expires_at: datetime,
    initial_positions: tuple[PartitionPosition, ...],
    new_partitions: tuple[PartitionPosition, ...],
) -> None:
    """A new window: create its partitions, then record the window and its plan."""
    latest = _latest_window(conn, window.stream_id)
    if latest is not None:
        _require_follows(conn, window, latest)
    known = partitions.known_ids(conn, window.stream_id)
    created = list(initial_positions) if latest is None else []
    created_ids = {p.partition_id for p in created}
    created += [p for p in new_partitions if p.partition_id not in known | created_ids]
    positions = sorted(created, key=lambda p: p.partition_id)
    partitions.create_ready(conn, now, window, positions)
    if latest is not None:
        positions = partitions.readable_positions(conn, window.stream_id)
    conn.execute(
        insert(windows).values(
            stream_id=window.stream_id,
            window_start=window.start,
            window_end=window.end,
            state=S.PLANNED.value,
            low_watermark=None,
            counts=dumps({}),
            changelog_snapshot_id=None,
            target_snapshot_ids=None,
            attempt=1,
            lease_owner=owner,
            lease_expires_at=expires_at,
            failure_reason=None,
            completeness_note=None,
            created_at=now,
            updated_at=now,
        )
    )
    plans.record(conn, window, positions)


def _reopen(
    conn: Connection, now: datetime, row: Row, window: Window, owner: str, expires_at: datetime
) -> None:
    """A planned window again: retried, renewed, refused or taken over; COMPLETE stays."""
    require_same_end(row, window)
    if row.state == S.COMPLETE:
        return
    if row.state == S.FAILED:
        _retry(conn, now, row, owner, expires_at)
    elif row.lease_owner == owner:
        leases.extend(conn, row, owner, expires_at, now)
    else:
        leases.require_not_held(row, owner, now)
        leases.take_over(conn, row, owner, expires_at, now)


def _retry(conn: Connection, now: datetime, row: Row, owner: str, expires_at: datetime) -> None:
    """FAILED -> PLANNED (attempt + 1) for whoever plans it."""
    guarded_update(
        conn,
        row,
        {
            "state": S.PLANNED.value,
            "attempt": row.attempt + 1,
            "lease_owner": owner,
            "lease_expires_at": expires_at,
            "failure_reason": None,
        },
        now=now,
    )


# --- steps -------------------------------------------------------------------------------------
def mark_extracted(
    conn: Connection, now: datetime, window: Window, owner: str, changelog_snapshot_id: int
) -> WindowRecord:
    """PLANNED -> EXTRACTED; a re-run must report the same changelog snapshot."""
    row = locked_window(conn, window)
    if row.state == S.EXTRACTED and row.lease_owner == owner:
        if row.changelog_snapshot_id != changelog_snapshot_id:
            raise SnapshotMismatchError(
                f"{name(row)} was extracted into changelog snapshot "
                f"{row.changelog_snapshot_id}, but this run reports snapshot "
                f"{changelog_snapshot_id}: a window has exactly one changelog commit, so "
                f"a re-run must find the commit tagged with the window and write nothing"
            )
        return window_record(row)
    _require_step(row, owner, S.EXTRACTED, now)
    values = {"changelog_snapshot_id": changelog_snapshot_id}
    return _move(conn, now, row, S.EXTRACTED, owner=owner, values=values)


def commit(
    conn: Connection,
    now: datetime,
    window: Window,
    owner: str,
    outcomes: Sequence[PartitionOutcome],
    extra_counts: Mapping[str, Any],
) -> WindowRecord:
    """EXTRACTED -> COMMITTED, recording the partition outcomes.

    1. The holder's re-run of a committed window changes nothing; anyone else's is refused.
    2. The step needs the unexpired lease and the previous window committed.
    3. The outcomes are resolved against the plan and the stored lineage (pure).
    4. Children, then the reading partitions, then the plan's findings are written.
    5. The window commits with the lowest live watermark (its end when none is live).
    """
    row = locked_window(conn, window)
    if WindowState(row.state) in COMMITTED_OR_LATER:
        if row.lease_owner == owner:
            return window_record(row)
        raise LeaseLostError(
            f"{owner!r} cannot commit {name(row)}: the window is already {row.state} "
            f"and held by {row.lease_owner!r} (attempt {row.attempt}); this run's "
            f"outcomes are discarded and nothing was changed"
        )
    _require_step(row, owner, S.COMMITTED, now)
    _require_previous_committed(conn, row)
    planned_ids = plans.planned_ids(conn, window)
    stored = partitions.stored_for_commit(conn, window.stream_id, planned_ids, outcomes)
    changes = resolve_commit(window, planned_ids, stored, outcomes, extra_counts)
    partitions.record_children(conn, now, window, changes.children)
    partitions.record_outcomes(conn, now, window, changes.outcomes)
    plans.record_findings(conn, window, changes)
    lowest = partitions.lowest_live_watermark(conn, window.stream_id)
    values = {
        "low_watermark": window.end if lowest is None else lowest,
        "counts": dumps(changes.counts),
    }
    return _move(conn, now, row, S.COMMITTED, owner=owner, values=values)


def mark_applied(
    conn: Connection, now: datetime, window: Window, owner: str, snapshot_ids: dict[str, int]
) -> WindowRecord:
    """COMMITTED -> APPLIED, at these target snapshots."""
    row = locked_window(conn, window)
    if row.state == S.APPLIED and row.lease_owner == owner:
        return window_record(row)
    _require_step(row, owner, S.APPLIED, now)
    values = {"target_snapshot_ids": dumps(snapshot_ids)}
    return _move(conn, now, row, S.APPLIED, owner=owner, values=values)


def complete(
    conn: Connection, now: datetime, window: Window, completeness_note: str | None
) -> WindowRecord:
    """APPLIED -> COMPLETE; the lease is released (no owner check: the gate is anyone's)."""
    row = locked_window(conn, window)
    if row.state == S.COMPLETE:
        return window_record(row)
    _require_transition(row, S.COMPLETE)
    values = {"completeness_note": completeness_note, "lease_expires_at": None}
    return _move(conn, now, row, S.COMPLETE, values=values)


def fail(conn: Connection, now: datetime, window: Window, owner: str, reason: str) -> WindowRecord:
    """PLANNED or EXTRACTED -> FAILED; the owner needs no unexpired lease, only ownership."""
    row = locked_window(conn, window)
    if row.state == S.FAILED and row.lease_owner == owner:
        return window_record(row)
    leases.require_owner(row, owner, "fail")
    _require_transition(row, S.FAILED)
    values = {"failure_reason": reason, "lease_expires_at": now}
    return _move(conn, now, row, S.FAILED, owner=owner, values=values)


# --- reads -------------------------------------------------------------------------------------
def get(conn: Connection, stream_id: str, start: datetime) -> WindowRecord | None:
    row = window_row(conn, stream_id, start)
    return None if row is None else window_record(row)


def list_windows(
    conn: Connection, stream_id: str, states: Iterable[WindowState] | None
) -> list[WindowRecord]:
    rows = conn.execute(of_stream(windows, stream_id, states, WindowState, windows.c.window_start))
    return [window_record(row) for row in rows]


def newest(
    conn: Connection,
    stream_id: str,
    limit: int,
    states: Iterable[WindowState] | None,
    before: datetime | None,
) -> list[WindowRecord]:
    """At most ``limit`` of the stream's windows, newest first, starting before ``before``.

    With ``states``, one query per state, each walking the (stream, state, start) index
    backwards to at most ``limit`` rows: given the states as one IN list, SQLite's planner
    walks the primary key instead, through every window of the stream.
    """
    found = []
    for state in [None] if states is None else sorted({WindowState(s) for s in states}):
        query = of_stream(windows, stream_id, None if state is None else [state], WindowState,
                          windows.c.window_start.desc())
        if before is not None:
            query = query.where(windows.c.window_start < before)
        found.extend(window_record(row) for row in conn.execute(query.limit(limit)))
    found.sort(key=lambda w: w.start, reverse=True)
    return found[:limit]


def count_by_state(conn: Connection, stream_id: str) -> dict[WindowState, int]:
    """How many windows the stream has in each state (states without one are left out)."""
    rows = conn.execute(
        select(windows.c.state, func.count())
        .where(windows.c.stream_id == stream_id)
        .group_by(windows.c.state)
    )
    return {WindowState(state): count for state, count in rows}


# --- the protocol's checks ---------------------------------------------------------------------
def _move(
    conn: Connection,
    now: datetime,
    row: Row,
    target: WindowState,
    *,
    owner: str | None = None,
    values: Mapping[str, Any],
) -> WindowRecord:
    """The guarded UPDATE into ``target``; the lease steps also need the lease still live."""
    guarded_update(
        conn,
        row,
        {"state": target.value, **values},
        owner=owner,
        lease_live_at=now if target in _STEP_VERBS else None,
        now=now,
    )
    return window_record(window_row(conn, row.stream_id, row.window_start))


def _require_step(row: Row, owner: str, target: WindowState, now: datetime) -> None:
    """The checks of a step that needs the caller's lease: owner, protocol, expiry."""
    action = _STEP_VERBS[target]
    leases.require_owner(row, owner, action)
    _require_transition(row, target)
    leases.require_unexpired(row, owner, action, now)


def _require_transition(row: Row, target: WindowState) -> None:
    current = WindowState(row.state)
    allowed = _NEXT_STATES[current]
    if target in allowed:
        return
    if current == S.FAILED:
        fix = "plan the window again (StateStore.plan_window) to retry it"
    elif current == S.COMPLETE:
        fix = "it is final: a re-run of a complete window has nothing to do"
    else:
        fix = _FIX_BY_TARGET[target]
    may = ", ".join(s.value for s in allowed) if allowed else "nowhere"
    raise IllegalTransitionError(
        f"{name(row)} cannot go from {current.value} to {target.value} (from "
        f"{current.value} it may go to {may}): {fix}"
    )


def _require_previous_committed(conn: Connection, row: Row) -> None:
    previous = conn.execute(
        select(windows)
        .where(windows.c.stream_id == row.stream_id)
        .where(windows.c.window_start < row.window_start)
        .order_by(windows.c.window_start.desc())
        .limit(1)
    ).first()
    if previous is not None and WindowState(previous.state) not in COMMITTED_OR_LATER:
        raise WindowOrderError(
            f"{name(row)} cannot commit: previous {name(previous)} is "
            f"{previous.state}, not committed; windows of a stream commit strictly in "
            f"order, so commit {name(previous)} first"
        )


def _require_follows(conn: Connection, window: Window, latest: Row) -> None:
    """A new window must start where the stream's latest window ends, after it committed."""
    new = window_name(window.stream_id, window.start, window.end)
    if window.start > latest.window_end:
        raise WindowOrderError(
            f"{new} cannot start: the stream's latest {name(latest)} ends at "
            f"{format_ts(latest.window_end)}, so [{format_ts(latest.window_end)}, "
            f"{format_ts(window.start)}) would never be read; plan the window starting at "
            f"{format_ts(latest.window_end)} first (with catchup, Airflow runs the missed "
            f"intervals) or reset the stream"
        )
    if window.start < latest.window_end:
        overlapped = conn.execute(
            select(windows)
            .where(windows.c.stream_id == window.stream_id)
            .where(windows.c.window_start < window.end)
            .where(windows.c.window_end > window.start)
            .order_by(windows.c.window_start)
            .limit(1)
        ).first()
        if overlapped is not None:
            raise WindowOrderError(
                f"{new} overlaps recorded {name(overlapped)}: a stream's windows are "
                f"contiguous and never overlap, so no change is read twice; the DAG's schedule "
                f"changed, so keep the old schedule or reset the stream"
            )
        raise WindowOrderError(
            f"{new} lies before the stream's recorded windows, which start at "
            f"{name(_first_window(conn, window.stream_id))}: windows are planned in time order; "
            f"reset the stream to start it earlier"
        )
    if WindowState(latest.state) not in COMMITTED_OR_LATER:
        raise WindowOrderError(
            f"{new} cannot start: previous {name(latest)} is {latest.state}, not committed; "
            f"windows of a stream commit strictly in order, so finish or re-run "
            f"{name(latest)} first"
        )


def _latest_window(conn: Connection, stream_id: str) -> Row | None:
    return conn.execute(
        select(windows)
        .where(windows.c.stream_id == stream_id)
        .order_by(windows.c.window_start.desc())
        .limit(1)
    ).first()


def _first_window(conn: Connection, stream_id: str) -> Row:
    return conn.execute(
        select(windows)
        .where(windows.c.stream_id == stream_id)
        .order_by(windows.c.window_start)
        .limit(1)
    ).first()
