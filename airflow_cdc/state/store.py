"""The state store: streams, partitions and windows, every transition one guarded transaction.

A window moves PLANNED -> EXTRACTED -> COMMITTED -> APPLIED -> COMPLETE, or to FAILED before it
commits (and from FAILED back to PLANNED when it is planned again). Each transition is one
transaction that

1. locks the window's stream (PostgreSQL: ``SELECT ... FOR UPDATE`` on its ``cdc_streams`` row;
   SQLite: ``BEGIN IMMEDIATE`` already holds the database's write lock), so the transitions of
   one stream run one at a time;
2. reads the window and refuses what the protocol forbids: an illegal state change, a lease
   the caller does not hold, a window out of order, a watermark moving backwards;
3. writes with ``UPDATE ... WHERE state = :expected [AND lease_owner = :me AND
   lease_expires_at > :now]`` and checks that exactly one row changed.

The stream lock rather than a window-row lock: a plan inserts a window row that does not
exist yet, and a commit of W and the plan of W+1 both touch the stream's partitions.

Leases (invariant I6): planning a window gives the caller (``owner``, e.g. the DAG run) a lease
until ``now + lease_seconds``. Extract, commit and apply need the unexpired lease; another
owner may take the window over only once the lease expired, after which the old owner's steps
raise :class:`LeaseLostError` and change nothing. Lease times come from this process's clock:
lease lengths are minutes, far above the clock skew between synchronized workers.

Re-running any step is harmless (invariant I1): a transition into the state the window is
already in, by the lease holder, changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import URL, Connection, Row
from sqlalchemy.exc import IntegrityError

from airflow_cdc.model import (
    UTC,
    PartitionOutcome,
    PartitionPosition,
    PartitionState,
    Window,
    WindowState,
    ensure_utc,
    format_ts,
    validate_identifier,
)
from airflow_cdc.state import engine as engines
from airflow_cdc.state import migrations
from airflow_cdc.state.errors import (
    IllegalTransitionError,
    InvalidPlanError,
    LeaseLostError,
    SchemaVersionError,
    SnapshotMismatchError,
    StreamConfigChangedError,
    StreamNotRegisteredError,
    WindowConflictError,
    WindowLeaseHeldError,
    WindowNotFoundError,
    WindowOrderError,
)
from airflow_cdc.state.outcomes import resolve_commit
from airflow_cdc.state.records import (
    COMMITTED_OR_LATER,
    LIVE_PARTITION_STATES,
    READABLE_PARTITION_STATES,
    PartitionRecord,
    StreamRecord,
    WindowPartitionRecord,
    WindowPlan,
    WindowRecord,
    window_name,
)
from airflow_cdc.state.tables import dumps, loads, partitions, streams, window_partitions, windows

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

_MAX_LEASE_SECONDS = 366 * 24 * 3600  # beyond a year is a unit mistake (ms for s)
_STEP_VERBS = {
    S.EXTRACTED: "mark as extracted",
    S.COMMITTED: "commit",
    S.APPLIED: "mark as applied",
}


def _utc_now() -> datetime:
    return datetime.now(UTC)


class StateStore:
    """The metadata tables of airflow-cdc on SQLite (default) or PostgreSQL.

    ``StateStore(url)`` does not touch the database; call :meth:`migrate` once (it is cheap
    and idempotent) before the first use of a new database. ``clock`` returns the current
    time as an aware datetime (tests pass a fake one to expire leases).
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
        busy_timeout_seconds: float = 30.0,
    ) -> None:
        self._url = engines.default_url() if url is None else url
        self._engine = engines.make_engine(self._url, busy_timeout_seconds)
        self._clock = clock or _utc_now
        self._schema_ready = False

    # --- set-up ------------------------------------------------------------------------------
    @staticmethod
    def default_url() -> str:
        """``$AIRFLOW_CDC_STATE_URL`` if set, else the SQLite file cdc_state.db in AIRFLOW_HOME."""
        return engines.default_url()

    @property
    def url(self) -> str:
        """The database URL, without its password."""
        return engines.safe_url(self._url)

    def close(self) -> None:
        """Close the store's pooled connections."""
        self._engine.dispose()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def migrate(self, target_version: int | None = None) -> int:
        """Create or upgrade the state tables to ``target_version`` (default: the newest).

        One transaction per migration step; idempotent; refuses a database whose schema is
        newer than this airflow-cdc. Returns the database's schema version.
        """
        version = migrations.migrate(self._engine, self._now, target_version)
        self._schema_ready = version == migrations.HEAD_VERSION
        return version

    def schema_version(self) -> int:
        """The database's schema version (0 when it has no state tables yet)."""
        with engines.read_transaction(self._engine) as conn:
            return migrations.current_version(conn)

    # --- streams -----------------------------------------------------------------------------
    def register_stream(
        self, stream_id: str, source_kind: str, config_fingerprint: str
    ) -> StreamRecord:
        """Record a stream once; registering it again with the same config changes nothing.

        A different source kind or fingerprint raises :class:`StreamConfigChangedError`: the
        recorded partitions and positions belong to the old configuration.
        """
        validate_identifier("stream id", stream_id)
        _require_text("source kind", source_kind)
        _require_text("config fingerprint", config_fingerprint)

        def run(conn: Connection, now: datetime) -> StreamRecord:
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
            return _stream_record(row)

        try:
            return self._write(run)
        except IntegrityError:
            # PostgreSQL: another process registered it between our read and insert.
            return self._write(run)

    def streams(self) -> list[StreamRecord]:
        with self._read() as conn:
            rows = conn.execute(select(streams).order_by(streams.c.stream_id))
            return [_stream_record(row) for row in rows]

    def reset_stream(self, stream_id: str) -> None:
        """Delete every row of the stream: its windows, plans, partitions and registration."""
        validate_identifier("stream id", stream_id)

        def run(conn: Connection, now: datetime) -> None:
            conn.execute(
                select(streams.c.stream_id)
                .where(streams.c.stream_id == stream_id)
                .with_for_update()
            )
            for table in (window_partitions, windows, partitions, streams):
                conn.execute(delete(table).where(table.c.stream_id == stream_id))

        self._write(run)

    # --- windows -----------------------------------------------------------------------------
    def plan_window(
        self,
        window: Window,
        owner: str,
        lease_seconds: float,
        initial_positions: Iterable[PartitionPosition] = (),
        new_partitions: Iterable[PartitionPosition] = (),
    ) -> WindowPlan:
        """Open ``window`` for ``owner`` and return the partition positions it reads.

        ``new_partitions`` are partitions a source discovered since the last window (file
        sources: one partition per event file). When the window is opened they are created
        READY in the same transaction, unless the stream already knows their id (in any state,
        so a consumed file is never read twice), and the window reads them. They are ignored
        when the window was planned before: a re-run reads exactly the recorded partitions.

        The stream's first window creates its partitions from ``initial_positions`` (ignored
        for later windows). A later window must start where the stream's latest window ends,
        and that window must be committed; it reads the stream's READY and RUNNING partitions
        from their watermarks and resume positions. The plan is recorded, so planning the
        window again returns the same positions and takes the lease: renewed for the same
        owner, taken over (attempt + 1) when the lease expired, or refused with
        :class:`WindowLeaseHeldError` while another owner holds it. A FAILED window goes back
        to PLANNED (attempt + 1); a committed window keeps its state; a COMPLETE one is
        returned as it is.
        """
        _require_window(window)
        _require_text("lease owner", owner)
        lease = _require_lease_seconds(lease_seconds)
        positions = tuple(initial_positions)
        _check_initial_positions(window, positions)
        discovered = tuple(new_partitions)
        _check_initial_positions(window, discovered)

        def run(conn: Connection, now: datetime) -> WindowPlan:
            self._lock_stream(conn, window.stream_id)
            row = _window_row(conn, window.stream_id, window.start)
            if row is None:
                self._open_window(conn, window, owner, now + lease, positions, now, discovered)
            else:
                self._reopen_window(conn, row, window, owner, now + lease, now)
            record = _window_record(_window_row(conn, window.stream_id, window.start))
            planned = conn.execute(
                select(window_partitions)
                .where(*_window_key(window_partitions, window))
                .where(window_partitions.c.origin == "planned")
                .order_by(window_partitions.c.partition_id)
            )
            return WindowPlan(record, tuple(_window_partition_record(r).position for r in planned))

        return self._write(run)

    def mark_extracted(
        self, window: Window, owner: str, changelog_snapshot_id: int
    ) -> WindowRecord:
        """PLANNED -> EXTRACTED: the window's changes are in that changelog snapshot."""
        _require_window(window)
        _require_text("lease owner", owner)
        _require_int("changelog snapshot id", changelog_snapshot_id)

        def run(conn: Connection, now: datetime) -> WindowRecord:
            row = self._locked_window(conn, window)
            if row.state == S.EXTRACTED and row.lease_owner == owner:
                if row.changelog_snapshot_id != changelog_snapshot_id:
                    raise SnapshotMismatchError(
                        f"{_name(row)} was extracted into changelog snapshot "
                        f"{row.changelog_snapshot_id}, but this run reports snapshot "
                        f"{changelog_snapshot_id}: a window has exactly one changelog commit, so "
                        f"a re-run must find the commit tagged with the window and write nothing"
                    )
                return _window_record(row)
            self._require_step(row, owner, S.EXTRACTED, now)
            return self._move(
                conn,
                row,
                S.EXTRACTED,
                now,
                owner=owner,
                values={"changelog_snapshot_id": changelog_snapshot_id},
            )

        return self._write(run)

    def commit_window(
        self,
        window: Window,
        owner: str,
        outcomes: Sequence[PartitionOutcome],
        counts: Mapping[str, Any] | None = None,
    ) -> WindowRecord:
        """EXTRACTED -> COMMITTED: record the partition outcomes in one transaction.

        Finished partitions become FINISHED; the others RUNNING from their new resume position
        and watermark (never backwards). Reported children are created (CREATED) or gain the
        reporting parent, and become READY once every parent reported them; a child read in
        this same window may have its own outcome. The window's low watermark is the lowest
        watermark of the partitions still live afterwards (the window end when none is).
        The previous window must be committed. Committing again by the same owner changes
        nothing; a lost lease raises :class:`LeaseLostError` and changes nothing.
        """
        _require_window(window)
        _require_text("lease owner", owner)
        outcomes = tuple(outcomes)
        extra_counts = dict(counts or {})
        _require_json("counts", extra_counts)

        def run(conn: Connection, now: datetime) -> WindowRecord:
            row = self._locked_window(conn, window)
            if WindowState(row.state) in COMMITTED_OR_LATER:
                if row.lease_owner == owner:
                    return _window_record(row)
                raise LeaseLostError(
                    f"{owner!r} cannot commit {_name(row)}: the window is already {row.state} "
                    f"and held by {row.lease_owner!r} (attempt {row.attempt}); this run's "
                    f"outcomes are discarded and nothing was changed"
                )
            self._require_step(row, owner, S.COMMITTED, now)
            previous = conn.execute(
                select(windows)
                .where(windows.c.stream_id == window.stream_id)
                .where(windows.c.window_start < window.start)
                .order_by(windows.c.window_start.desc())
                .limit(1)
            ).first()
            if previous is not None and WindowState(previous.state) not in COMMITTED_OR_LATER:
                raise WindowOrderError(
                    f"{_name(row)} cannot commit: previous {_name(previous)} is "
                    f"{previous.state}, not committed; windows of a stream commit strictly in "
                    f"order, so commit {_name(previous)} first"
                )
            self._record_outcomes(conn, window, owner, outcomes, extra_counts, now)
            return _window_record(_window_row(conn, window.stream_id, window.start))

        return self._write(run)

    def mark_applied(
        self, window: Window, owner: str, target_snapshot_ids: Mapping[str, int]
    ) -> WindowRecord:
        """COMMITTED -> APPLIED: the target tables hold the window, at these snapshots."""
        _require_window(window)
        _require_text("lease owner", owner)
        snapshot_ids = dict(target_snapshot_ids)
        for table, snapshot_id in snapshot_ids.items():
            _require_text("target table name", table)
            _require_int(f"snapshot id of target {table!r}", snapshot_id)

        def run(conn: Connection, now: datetime) -> WindowRecord:
            row = self._locked_window(conn, window)
            if row.state == S.APPLIED and row.lease_owner == owner:
                return _window_record(row)
            self._require_step(row, owner, S.APPLIED, now)
            return self._move(
                conn,
                row,
                S.APPLIED,
                now,
                owner=owner,
                values={"target_snapshot_ids": dumps(snapshot_ids)},
            )

        return self._write(run)

    def mark_complete(self, window: Window, completeness_note: str | None = None) -> WindowRecord:
        """APPLIED -> COMPLETE (the gate saw progress cover the window); releases the lease."""
        _require_window(window)

        def run(conn: Connection, now: datetime) -> WindowRecord:
            row = self._locked_window(conn, window)
            if row.state == S.COMPLETE:
                return _window_record(row)
            _require_transition(row, S.COMPLETE)
            return self._move(
                conn,
                row,
                S.COMPLETE,
                now,
                values={"completeness_note": completeness_note, "lease_expires_at": None},
            )

        return self._write(run)

    def mark_failed(self, window: Window, owner: str, reason: str) -> WindowRecord:
        """PLANNED or EXTRACTED -> FAILED, with the reason; releases the lease.

        Planning the window again retries it. The owner need not hold an unexpired lease,
        only still own it: failing is always safe for the run that owns the window.
        """
        _require_window(window)
        _require_text("lease owner", owner)
        _require_text("failure reason", reason)

        def run(conn: Connection, now: datetime) -> WindowRecord:
            row = self._locked_window(conn, window)
            if row.state == S.FAILED and row.lease_owner == owner:
                return _window_record(row)
            _require_owner(row, owner, "fail")
            _require_transition(row, S.FAILED)
            return self._move(
                conn,
                row,
                S.FAILED,
                now,
                owner=owner,
                values={"failure_reason": reason, "lease_expires_at": now},
            )

        return self._write(run)

    def renew_lease(self, window: Window, owner: str, lease_seconds: float) -> WindowRecord:
        """Extend ``owner``'s lease to ``now + lease_seconds`` (call it during long steps).

        An owner whose lease expired may still renew it as long as nobody took the window
        over: taking over changes the owner, so nothing happened meanwhile.
        """
        _require_window(window)
        _require_text("lease owner", owner)
        lease = _require_lease_seconds(lease_seconds)

        def run(conn: Connection, now: datetime) -> WindowRecord:
            row = self._locked_window(conn, window)
            _require_owner(row, owner, "renew the lease on")
            if row.state in (S.FAILED, S.COMPLETE):
                raise LeaseLostError(
                    f"{owner!r} cannot renew its lease on {_name(row)}: the window is "
                    f"{row.state} and its lease was released; plan the window again to take a "
                    f"new lease"
                )
            self._guarded_update(conn, row, {"lease_expires_at": now + lease}, owner=owner, now=now)
            return _window_record(_window_row(conn, window.stream_id, window.start))

        return self._write(run)

    def release_lease(self, window: Window, owner: str) -> WindowRecord:
        """Expire ``owner``'s lease on ``window`` now, so another run may take the window over.

        The repair for a run that died holding its lease (a killed worker, a crashed
        ``airflow dags test``): the window keeps its state and recorded plan, and the next
        plan of the window takes it over (attempt + 1), after which the released owner's steps
        raise :class:`LeaseLostError` and change nothing (I6). ``owner`` must be the holder,
        so a run that took the window over meanwhile is never released by mistake. Releasing
        an expired lease changes nothing; a COMPLETE or FAILED window holds no lease.
        """
        _require_window(window)
        _require_text("lease owner", owner)

        def run(conn: Connection, now: datetime) -> WindowRecord:
            row = self._locked_window(conn, window)
            _require_owner(row, owner, "release the lease on")
            if row.state in (S.FAILED, S.COMPLETE):
                raise LeaseLostError(
                    f"{_name(row)} is {row.state}: it holds no lease to release; plan the "
                    f"window again to run it"
                )
            if row.lease_expires_at is not None and row.lease_expires_at <= now:
                return _window_record(row)
            self._guarded_update(conn, row, {"lease_expires_at": now}, owner=owner, now=now)
            return _window_record(_window_row(conn, window.stream_id, window.start))

        return self._write(run)

    def get_window(self, stream_id: str, start: datetime) -> WindowRecord | None:
        """The window of ``stream_id`` starting at ``start``, or None if it was never planned."""
        validate_identifier("stream id", stream_id)
        start = ensure_utc("window start", start)
        with self._read() as conn:
            row = _window_row(conn, stream_id, start)
            return None if row is None else _window_record(row)

    def list_windows(
        self, stream_id: str, states: Iterable[WindowState] | None = None
    ) -> list[WindowRecord]:
        """The stream's windows in time order, optionally only those in ``states``."""
        validate_identifier("stream id", stream_id)
        query = select(windows).where(windows.c.stream_id == stream_id)
        if states is not None:
            query = query.where(windows.c.state.in_([WindowState(s).value for s in states]))
        with self._read() as conn:
            rows = conn.execute(query.order_by(windows.c.window_start))
            return [_window_record(row) for row in rows]

    def window_partitions(self, window: Window) -> list[WindowPartitionRecord]:
        """The partitions ``window`` planned and the children it read, with their outcomes."""
        _require_window(window)
        with self._read() as conn:
            rows = conn.execute(
                select(window_partitions)
                .where(*_window_key(window_partitions, window))
                .order_by(window_partitions.c.partition_id)
            )
            return [_window_partition_record(row) for row in rows]

    # --- partitions --------------------------------------------------------------------------
    def list_partitions(
        self, stream_id: str, states: Iterable[PartitionState] | None = None
    ) -> list[PartitionRecord]:
        """The stream's partitions by id, optionally only those in ``states``."""
        validate_identifier("stream id", stream_id)
        query = select(partitions).where(partitions.c.stream_id == stream_id)
        if states is not None:
            query = query.where(partitions.c.state.in_([PartitionState(s).value for s in states]))
        with self._read() as conn:
            rows = conn.execute(query.order_by(partitions.c.partition_id))
            return [_partition_record(row) for row in rows]

    def live_partitions(self, stream_id: str) -> list[PartitionRecord]:
        """The stream's partitions that still have changes to deliver (not FINISHED)."""
        return self.list_partitions(stream_id, LIVE_PARTITION_STATES)

    def purge_finished_partitions(self, stream_id: str, older_than: datetime) -> int:
        """Delete the stream's FINISHED partitions last updated before ``older_than``; count them.

        Window plans keep their own copy of every position, so purging never changes what a
        re-run of an old window reads.
        """
        validate_identifier("stream id", stream_id)
        cutoff = ensure_utc("older_than", older_than)

        def run(conn: Connection, now: datetime) -> int:
            self._lock_stream(conn, stream_id)
            result = conn.execute(
                delete(partitions)
                .where(partitions.c.stream_id == stream_id)
                .where(partitions.c.state == PartitionState.FINISHED.value)
                .where(partitions.c.updated_at < cutoff)
            )
            return result.rowcount

        return self._write(run)

    # --- transactions ------------------------------------------------------------------------
    def _now(self) -> datetime:
        return ensure_utc("state store clock", self._clock())

    def _require_schema(self) -> None:
        if self._schema_ready:
            return
        version = self.schema_version()
        if version > migrations.HEAD_VERSION:
            raise migrations.newer_schema_error(version)
        if version < migrations.HEAD_VERSION:
            found = "has no state tables yet" if version == 0 else f"is at schema version {version}"
            raise SchemaVersionError(
                f"state store {self.url} {found}, this airflow-cdc needs version "
                f"{migrations.HEAD_VERSION}: run StateStore(url).migrate() to create or upgrade "
                f"its tables"
            )
        self._schema_ready = True

    def _write(self, run: Callable[[Connection, datetime], Any]) -> Any:
        self._require_schema()
        with engines.write_transaction(self._engine) as conn:
            return run(conn, self._now())

    def _read(self):
        self._require_schema()
        return engines.read_transaction(self._engine)

    def _lock_stream(self, conn: Connection, stream_id: str) -> None:
        found = conn.execute(
            select(streams.c.stream_id).where(streams.c.stream_id == stream_id).with_for_update()
        ).first()
        if found is None:
            raise StreamNotRegisteredError(
                f"stream {stream_id!r} is not registered in the state store {self.url}: "
                f"register it first (StateStore.register_stream)"
            )

    def _locked_window(self, conn: Connection, window: Window) -> Row:
        self._lock_stream(conn, window.stream_id)
        row = _window_row(conn, window.stream_id, window.start)
        if row is None:
            raise WindowNotFoundError(
                f"{window_name(window.stream_id, window.start, window.end)} was never planned: "
                f"plan it first (StateStore.plan_window)"
            )
        _require_same_end(row, window)
        return row

    def _require_step(self, row: Row, owner: str, target: WindowState, now: datetime) -> None:
        """The checks of a step that needs the caller's lease: owner, protocol, expiry."""
        action = _STEP_VERBS[target]
        _require_owner(row, owner, action)
        _require_transition(row, target)
        if row.lease_expires_at is None or row.lease_expires_at <= now:
            raise LeaseLostError(
                f"{owner!r} cannot {action} {_name(row)}: its lease expired at "
                f"{_ts(row.lease_expires_at)}, so another run may take the window over; renew "
                f"the lease (StateStore.renew_lease) during long steps, or plan the window "
                f"again. Nothing was changed"
            )

    def _move(
        self,
        conn: Connection,
        row: Row,
        target: WindowState,
        now: datetime,
        *,
        owner: str | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> WindowRecord:
        self._guarded_update(
            conn,
            row,
            {"state": target.value, **(values or {})},
            owner=owner,
            lease_live_at=now if target in (S.EXTRACTED, S.COMMITTED, S.APPLIED) else None,
            now=now,
        )
        return _window_record(_window_row(conn, row.stream_id, row.window_start))

    def _guarded_update(
        self,
        conn: Connection,
        row: Row,
        values: Mapping[str, Any],
        *,
        owner: str | None = None,
        lease_live_at: datetime | None = None,
        now: datetime | None = None,
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
        stamp = {"updated_at": now if now is not None else self._now()}
        if conn.execute(guarded.values(**values, **stamp)).rowcount != 1:
            raise WindowConflictError(
                f"{_name(row)} changed while this run was updating it (expected state "
                f"{row.state}, lease owner {owner or row.lease_owner!r}): another run is active "
                f"on the window; nothing was changed, re-run this step"
            )

    def _open_window(
        self,
        conn: Connection,
        window: Window,
        owner: str,
        lease_expires_at: datetime,
        initial_positions: tuple[PartitionPosition, ...],
        now: datetime,
        new_partitions: tuple[PartitionPosition, ...] = (),
    ) -> None:
        latest = conn.execute(
            select(windows)
            .where(windows.c.stream_id == window.stream_id)
            .order_by(windows.c.window_start.desc())
            .limit(1)
        ).first()
        if latest is not None:
            _require_follows(conn, window, latest)
        known = set(
            conn.execute(
                select(partitions.c.partition_id).where(partitions.c.stream_id == window.stream_id)
            ).scalars()
        )
        created = list(initial_positions) if latest is None else []
        created_ids = {p.partition_id for p in created}
        created += [
            p for p in new_partitions if p.partition_id not in known | created_ids
        ]
        positions = sorted(created, key=lambda p: p.partition_id)
        for position in positions:
            conn.execute(
                insert(partitions).values(
                    stream_id=window.stream_id,
                    partition_id=position.partition_id,
                    parent_ids=dumps(list(position.parent_ids)),
                    reported_by=dumps(sorted(position.parent_ids)),
                    resume_position=position.resume_position,
                    start_ts=position.start,
                    watermark=position.start,
                    watermark_since=now,
                    state=PartitionState.READY.value,
                    created_window=window.start,
                    finished_window=None,
                    updated_at=now,
                )
            )
        if latest is not None:
            readable = conn.execute(
                select(partitions)
                .where(partitions.c.stream_id == window.stream_id)
                .where(partitions.c.state.in_([s.value for s in READABLE_PARTITION_STATES]))
                .order_by(partitions.c.partition_id)
            )
            positions = [_partition_record(row).next_position for row in readable]
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
                lease_expires_at=lease_expires_at,
                failure_reason=None,
                completeness_note=None,
                created_at=now,
                updated_at=now,
            )
        )
        for position in positions:
            conn.execute(
                insert(window_partitions).values(
                    stream_id=window.stream_id,
                    window_start=window.start,
                    partition_id=position.partition_id,
                    parent_ids=dumps(list(position.parent_ids)),
                    start_ts=position.start,
                    resume_position=position.resume_position,
                    origin="planned",
                )
            )

    def _reopen_window(
        self,
        conn: Connection,
        row: Row,
        window: Window,
        owner: str,
        lease_expires_at: datetime,
        now: datetime,
    ) -> None:
        _require_same_end(row, window)
        if row.state == S.COMPLETE:
            return
        if row.state == S.FAILED:
            self._guarded_update(
                conn,
                row,
                {
                    "state": S.PLANNED.value,
                    "attempt": row.attempt + 1,
                    "lease_owner": owner,
                    "lease_expires_at": lease_expires_at,
                    "failure_reason": None,
                },
                now=now,
            )
        elif row.lease_owner == owner:
            self._guarded_update(
                conn, row, {"lease_expires_at": lease_expires_at}, owner=owner, now=now
            )
        elif row.lease_expires_at is not None and row.lease_expires_at > now:
            raise WindowLeaseHeldError(
                f"{_name(row)} is being run by {row.lease_owner!r} (attempt {row.attempt}, "
                f"lease until {_ts(row.lease_expires_at)}), so {owner!r} cannot run it: two "
                f"runs of one window cannot run at once; wait until that run finishes or "
                f"fails, or until its lease expires at {_ts(row.lease_expires_at)}. If that "
                f"run is dead (killed, crashed), release its lease: airflow-cdc release-lease "
                f"{row.stream_id} {_ts(row.window_start)} --owner '{row.lease_owner}'",
                holder=row.lease_owner,
            )
        else:
            self._guarded_update(
                conn,
                row,
                {
                    "attempt": row.attempt + 1,
                    "lease_owner": owner,
                    "lease_expires_at": lease_expires_at,
                },
                owner=row.lease_owner,
                now=now,
            )

    def _record_outcomes(
        self,
        conn: Connection,
        window: Window,
        owner: str,
        outcomes: tuple[PartitionOutcome, ...],
        extra_counts: dict,
        now: datetime,
    ) -> None:
        planned_ids = frozenset(
            conn.execute(
                select(window_partitions.c.partition_id)
                .where(*_window_key(window_partitions, window))
                .where(window_partitions.c.origin == "planned")
            ).scalars()
        )
        wanted = set(planned_ids)
        for outcome in outcomes:
            wanted.add(outcome.partition_id)
            wanted.update(child.partition_id for child in outcome.children)
        stored = {
            row.partition_id: _partition_record(row)
            for row in conn.execute(
                select(partitions)
                .where(partitions.c.stream_id == window.stream_id)
                .where(partitions.c.partition_id.in_(sorted(wanted)))
            )
        }
        changes = resolve_commit(window, planned_ids, stored, outcomes, extra_counts)

        for change in changes.children:
            child = change.child
            if change.existing_state is None:
                conn.execute(
                    insert(partitions).values(
                        stream_id=window.stream_id,
                        partition_id=child.partition_id,
                        parent_ids=dumps(list(child.parent_ids)),
                        reported_by=dumps(list(change.reported_by)),
                        resume_position=None,
                        start_ts=child.start,
                        watermark=child.start,
                        watermark_since=now,
                        state=change.new_state.value,
                        created_window=window.start,
                        finished_window=None,
                        updated_at=now,
                    )
                )
            else:
                _require_one_row(
                    conn.execute(
                        update(partitions)
                        .where(*_partition_key(window.stream_id, child.partition_id))
                        .where(partitions.c.state == change.existing_state.value)
                        .values(
                            reported_by=dumps(list(change.reported_by)),
                            state=change.new_state.value,
                            updated_at=now,
                        )
                    ),
                    window,
                    child.partition_id,
                )

        children_by_id = {change.child.partition_id: change.child for change in changes.children}
        for change in changes.outcomes:
            outcome = change.outcome
            values: dict[str, Any] = {
                "state": (
                    PartitionState.FINISHED if outcome.finished else PartitionState.RUNNING
                ).value,
                "watermark": outcome.watermark,
                "resume_position": outcome.resume_position,
                "updated_at": now,
            }
            if outcome.watermark > change.previous_watermark:
                values["watermark_since"] = now
            if outcome.finished:
                values["finished_window"] = window.start
            _require_one_row(
                conn.execute(
                    update(partitions)
                    .where(*_partition_key(window.stream_id, outcome.partition_id))
                    .where(partitions.c.state == change.previous_state.value)
                    .where(partitions.c.watermark <= outcome.watermark)  # never backwards
                    .values(**values)
                ),
                window,
                outcome.partition_id,
            )
            found = {
                "finished": outcome.finished,
                "watermark": outcome.watermark,
                "records": outcome.records,
            }
            if change.planned:
                conn.execute(
                    update(window_partitions)
                    .where(*_window_key(window_partitions, window))
                    .where(window_partitions.c.partition_id == outcome.partition_id)
                    .values(**found)
                )
            else:
                child = children_by_id[outcome.partition_id]
                conn.execute(
                    insert(window_partitions).values(
                        stream_id=window.stream_id,
                        window_start=window.start,
                        partition_id=child.partition_id,
                        parent_ids=dumps(list(child.parent_ids)),
                        start_ts=child.start,
                        resume_position=None,
                        origin="child",
                        **found,
                    )
                )

        lowest = conn.execute(
            select(func.min(partitions.c.watermark))
            .where(partitions.c.stream_id == window.stream_id)
            .where(partitions.c.state.in_([s.value for s in LIVE_PARTITION_STATES]))
        ).scalar()
        row = _window_row(conn, window.stream_id, window.start)
        self._guarded_update(
            conn,
            row,
            {
                "state": S.COMMITTED.value,
                "low_watermark": window.end if lowest is None else lowest,
                "counts": dumps(changes.counts),
            },
            owner=owner,
            lease_live_at=now,
            now=now,
        )


# --- checks ------------------------------------------------------------------------------------
def _require_window(window: object) -> None:
    if not isinstance(window, Window):
        raise TypeError(f"window must be an airflow_cdc.model.Window, got {type(window).__name__}")


def _require_text(what: str, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")


def _require_int(what: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an integer (an Iceberg snapshot id), got {value!r}")


def _require_lease_seconds(value: object) -> timedelta:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value < _MAX_LEASE_SECONDS
    ):
        raise ValueError(
            f"lease_seconds must be a positive number of seconds below one year, got {value!r}"
        )
    return timedelta(seconds=value)


def _require_json(what: str, value: object) -> None:
    try:
        dumps(value)
    except TypeError as exc:
        raise TypeError(f"{what} must hold JSON values (numbers, strings, lists): {exc}") from None


def _check_initial_positions(window: Window, positions: tuple[PartitionPosition, ...]) -> None:
    seen: set[str] = set()
    for position in positions:
        if not isinstance(position, PartitionPosition):
            raise TypeError(
                f"initial positions must be PartitionPosition values, got "
                f"{type(position).__name__}: {position!r}"
            )
        _require_text("partition id", position.partition_id)
        if position.partition_id in seen:
            raise InvalidPlanError(
                f"partition {position.partition_id!r} appears twice in the initial positions "
                f"of stream {window.stream_id!r}: the source adapter must plan each partition once"
            )
        seen.add(position.partition_id)


def _require_owner(row: Row, owner: str, action: str) -> None:
    if row.lease_owner != owner:
        raise LeaseLostError(
            f"{owner!r} cannot {action} {_name(row)}: the window is now held by "
            f"{row.lease_owner!r} (attempt {row.attempt}, lease until "
            f"{_ts(row.lease_expires_at)}); another run took it over, so this run must stop. "
            f"Nothing was changed"
        )


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
        f"{_name(row)} cannot go from {current.value} to {target.value} (from "
        f"{current.value} it may go to {may}): {fix}"
    )


def _require_same_end(row: Row, window: Window) -> None:
    if row.window_end != window.end:
        raise WindowOrderError(
            f"{window_name(window.stream_id, window.start, window.end)} conflicts with recorded "
            f"{_name(row)}: same start, different end; the DAG's schedule changed, so keep the "
            f"old schedule or reset the stream (StateStore.reset_stream)"
        )


def _require_follows(conn: Connection, window: Window, latest: Row) -> None:
    """A new window must start where the stream's latest window ends, after it committed."""
    name = window_name(window.stream_id, window.start, window.end)
    if window.start > latest.window_end:
        raise WindowOrderError(
            f"{name} cannot start: the stream's latest {_name(latest)} ends at "
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
                f"{name} overlaps recorded {_name(overlapped)}: a stream's windows are "
                f"contiguous and never overlap, so no change is read twice; the DAG's schedule "
                f"changed, so keep the old schedule or reset the stream"
            )
        raise WindowOrderError(
            f"{name} lies before the stream's recorded windows, which start at "
            f"{_name(_first_window(conn, window.stream_id))}: windows are planned in time order; "
            f"reset the stream to start it earlier"
        )
    if WindowState(latest.state) not in COMMITTED_OR_LATER:
        raise WindowOrderError(
            f"{name} cannot start: previous {_name(latest)} is {latest.state}, not committed; "
            f"windows of a stream commit strictly in order, so finish or re-run "
            f"{_name(latest)} first"
        )


def _require_one_row(result, window: Window, partition_id: str) -> None:
    if result.rowcount != 1:
        raise WindowConflictError(
            f"partition {partition_id!r} changed while "
            f"{window_name(window.stream_id, window.start, window.end)} was committing: another "
            f"run is active on the stream; nothing was changed, re-run this step"
        )


# --- rows and records --------------------------------------------------------------------------
def _window_key(table, window: Window) -> tuple:
    return (table.c.stream_id == window.stream_id, table.c.window_start == window.start)


def _partition_key(stream_id: str, partition_id: str) -> tuple:
    return (partitions.c.stream_id == stream_id, partitions.c.partition_id == partition_id)


def _window_row(conn: Connection, stream_id: str, start: datetime) -> Row | None:
    return conn.execute(
        select(windows)
        .where(windows.c.stream_id == stream_id)
        .where(windows.c.window_start == start)
    ).first()


def _first_window(conn: Connection, stream_id: str) -> Row:
    return conn.execute(
        select(windows)
        .where(windows.c.stream_id == stream_id)
        .order_by(windows.c.window_start)
        .limit(1)
    ).first()


def _name(row: Row) -> str:
    return window_name(row.stream_id, row.window_start, row.window_end)


def _ts(value: datetime | None) -> str:
    return "released" if value is None else format_ts(value)


def _stream_record(row: Row) -> StreamRecord:
    return StreamRecord(row.stream_id, row.source_kind, row.config_fingerprint, row.created_at)


def _window_record(row: Row) -> WindowRecord:
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


def _partition_record(row: Row) -> PartitionRecord:
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


def _window_partition_record(row: Row) -> WindowPartitionRecord:
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
