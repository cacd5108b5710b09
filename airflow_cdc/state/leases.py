"""Window leases (invariant I6): who may run a window, and the transitions that move a lease.

Planning a window gives the caller (``owner``, e.g. the DAG run) a lease until
``now + lease_seconds``. Extract, commit and apply need the unexpired lease; another owner may
take the window over only once the lease expired, after which the old owner's steps raise
:class:`LeaseLostError` and change nothing. Lease times come from this process's clock: lease
lengths are minutes, far above the clock skew between synchronized workers.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.engine import Connection, Row

from airflow_cdc.model import Window, WindowState
from airflow_cdc.state.errors import LeaseLostError, WindowLeaseHeldError
from airflow_cdc.state.records import WindowRecord
from airflow_cdc.state.rows import name, ts, window_record, window_row
from airflow_cdc.state.transitions import guarded_update, locked_window

_RELEASED_STATES = (WindowState.FAILED, WindowState.COMPLETE)


def require_owner(row: Row, owner: str, action: str) -> None:
    if row.lease_owner != owner:
        raise LeaseLostError(
            f"{owner!r} cannot {action} {name(row)}: the window is now held by "
            f"{row.lease_owner!r} (attempt {row.attempt}, lease until "
            f"{ts(row.lease_expires_at)}); another run took it over, so this run must stop. "
            f"Nothing was changed"
        )


def require_unexpired(row: Row, owner: str, action: str, now: datetime) -> None:
    if row.lease_expires_at is None or row.lease_expires_at <= now:
        raise LeaseLostError(
            f"{owner!r} cannot {action} {name(row)}: its lease expired at "
            f"{ts(row.lease_expires_at)}, so another run may take the window over; renew "
            f"the lease (StateStore.renew_lease) during long steps, or plan the window "
            f"again. Nothing was changed"
        )


def require_not_held(row: Row, owner: str, now: datetime) -> None:
    """Planning refuses a window another owner holds an unexpired lease on."""
    if row.lease_expires_at is not None and row.lease_expires_at > now:
        raise WindowLeaseHeldError(
            f"{name(row)} is being run by {row.lease_owner!r} (attempt {row.attempt}, "
            f"lease until {ts(row.lease_expires_at)}), so {owner!r} cannot run it: two "
            f"runs of one window cannot run at once; wait until that run finishes or "
            f"fails, or until its lease expires at {ts(row.lease_expires_at)}. If that "
            f"run is dead (killed, crashed), release its lease: airflow-cdc release-lease "
            f"{row.stream_id} {ts(row.window_start)} --owner '{row.lease_owner}'",
            holder=row.lease_owner,
        )


def extend(conn: Connection, row: Row, owner: str, expires_at: datetime, now: datetime) -> None:
    """The holder's lease now lasts until ``expires_at``."""
    guarded_update(conn, row, {"lease_expires_at": expires_at}, owner=owner, now=now)


def take_over(
    conn: Connection, row: Row, owner: str, expires_at: datetime, now: datetime
) -> None:
    """``owner`` takes the window from the holder whose lease expired: attempt + 1."""
    guarded_update(
        conn,
        row,
        {"attempt": row.attempt + 1, "lease_owner": owner, "lease_expires_at": expires_at},
        owner=row.lease_owner,
        now=now,
    )


def renew(
    conn: Connection, now: datetime, window: Window, owner: str, lease: timedelta
) -> WindowRecord:
    """The holder extends its lease; an expired one too, as long as nobody took the window."""
    row = _held(conn, window, owner, "renew the lease on")
    if row.state in _RELEASED_STATES:
        raise LeaseLostError(
            f"{owner!r} cannot renew its lease on {name(row)}: the window is "
            f"{row.state} and its lease was released; plan the window again to take a "
            f"new lease"
        )
    extend(conn, row, owner, now + lease, now)
    return window_record(window_row(conn, window.stream_id, window.start))


def release(conn: Connection, now: datetime, window: Window, owner: str) -> WindowRecord:
    """The holder's lease expires now; an expired lease stays as it is."""
    row = _held(conn, window, owner, "release the lease on")
    if row.state in _RELEASED_STATES:
        raise LeaseLostError(
            f"{name(row)} is {row.state}: it holds no lease to release; plan the "
            f"window again to run it"
        )
    if row.lease_expires_at is not None and row.lease_expires_at <= now:
        return window_record(row)
    extend(conn, row, owner, now, now)
    return window_record(window_row(conn, window.stream_id, window.start))


def _held(conn: Connection, window: Window, owner: str, action: str) -> Row:
    """The locked window, which ``owner`` must still hold."""
    row = locked_window(conn, window)
    require_owner(row, owner, action)
    return row
