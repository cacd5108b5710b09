"""The state store's public facade: each method checks its arguments and runs one transaction.

:class:`StateStore` checks its callers' arguments (:mod:`.arguments`), opens one transaction
and hands it, with the current time, to the role module that owns the transition:
:mod:`.streams`, :mod:`.windows` (the window protocol), :mod:`.leases` (invariant I6),
:mod:`.partitions` and :mod:`.plans`. What every transition shares, the stream lock and the
guarded UPDATE, is stated once in :mod:`.transitions`; a commit's outcomes are resolved by
:mod:`.outcomes`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.engine import URL
from sqlalchemy.exc import IntegrityError

from airflow_cdc.faults import crash_point
from airflow_cdc.model import (
    UTC,
    PartitionOutcome,
    PartitionPosition,
    PartitionState,
    Window,
    WindowState,
    ensure_utc,
    validate_identifier,
)
from airflow_cdc.state import engine as engines
from airflow_cdc.state import (
    coverage,
    leases,
    migrations,
    partitions,
    plans,
    steps,
    streams,
    windows,
)
from airflow_cdc.state.arguments import (
    check_initial_positions,
    require_int,
    require_json,
    require_lease_seconds,
    require_limit,
    require_text,
    require_window,
)
from airflow_cdc.state.errors import SchemaVersionError
from airflow_cdc.state.records import (
    LIVE_PARTITION_STATES,
    CoveredIntervalRecord,
    PartitionRecord,
    StreamRecord,
    WindowPartitionRecord,
    WindowPlan,
    WindowRecord,
    WindowStepRecord,
)


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
        require_text("source kind", source_kind)
        require_text("config fingerprint", config_fingerprint)
        try:
            return self._write(streams.register, stream_id, source_kind, config_fingerprint)
        except IntegrityError:
            # PostgreSQL: another process registered it between our read and insert.
            return self._write(streams.register, stream_id, source_kind, config_fingerprint)

    def streams(self) -> list[StreamRecord]:
        with self._read() as conn:
            return streams.list_streams(conn)

    def reset_stream(self, stream_id: str) -> None:
        """Delete every row of the stream: its windows, plans, partitions and registration."""
        validate_identifier("stream id", stream_id)
        self._write(streams.reset, stream_id)

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
        require_window(window)
        require_text("lease owner", owner)
        lease = require_lease_seconds(lease_seconds)
        positions = tuple(initial_positions)
        check_initial_positions(window, positions)
        discovered = tuple(new_partitions)
        check_initial_positions(window, discovered)

        def run(conn, now: datetime) -> WindowPlan:
            plan = windows.plan(conn, now, window, owner, now + lease, positions, discovered)
            crash_point("plan.in_transaction")
            return plan

        return self._write(run)

    def mark_extracted(
        self, window: Window, owner: str, changelog_snapshot_id: int | None
    ) -> WindowRecord:
        """PLANNED -> EXTRACTED: the window's changes are in that changelog snapshot (None:
        the window was proven empty and has no changelog commit, see
        :mod:`airflow_cdc.pipeline.empty_window`)."""
        require_window(window)
        require_text("lease owner", owner)
        if changelog_snapshot_id is not None:
            require_int("changelog snapshot id", changelog_snapshot_id)
        return self._write(windows.mark_extracted, window, owner, changelog_snapshot_id)

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
        require_window(window)
        require_text("lease owner", owner)
        extra_counts = dict(counts or {})
        require_json("counts", extra_counts)

        def run(conn, now: datetime) -> WindowRecord:
            record = windows.commit(conn, now, window, owner, tuple(outcomes), extra_counts)
            crash_point("commit.in_transaction")
            return record

        return self._write(run)

    def mark_applied(
        self, window: Window, owner: str, target_snapshot_ids: Mapping[str, int]
    ) -> WindowRecord:
        """COMMITTED -> APPLIED: the target tables hold the window, at these snapshots."""
        require_window(window)
        require_text("lease owner", owner)
        snapshot_ids = dict(target_snapshot_ids)
        for table, snapshot_id in snapshot_ids.items():
            require_text("target table name", table)
            require_int(f"snapshot id of target {table!r}", snapshot_id)
        return self._write(windows.mark_applied, window, owner, snapshot_ids)

    def mark_complete(self, window: Window, completeness_note: str | None = None) -> WindowRecord:
        """APPLIED -> COMPLETE (the gate saw progress cover the window); releases the lease."""
        require_window(window)
        return self._write(windows.complete, window, completeness_note)

    def mark_failed(self, window: Window, owner: str, reason: str) -> WindowRecord:
        """PLANNED or EXTRACTED -> FAILED, with the reason; releases the lease.

        Planning the window again retries it. The owner need not hold an unexpired lease,
        only still own it: failing is always safe for the run that owns the window.
        """
        require_window(window)
        require_text("lease owner", owner)
        require_text("failure reason", reason)
        return self._write(windows.fail, window, owner, reason)

    def renew_lease(self, window: Window, owner: str, lease_seconds: float) -> WindowRecord:
        """Extend ``owner``'s lease to ``now + lease_seconds`` (call it during long steps).

        An owner whose lease expired may still renew it as long as nobody took the window
        over: taking over changes the owner, so nothing happened meanwhile.
        """
        require_window(window)
        require_text("lease owner", owner)
        lease = require_lease_seconds(lease_seconds)
        return self._write(leases.renew, window, owner, lease)

    def release_lease(self, window: Window, owner: str) -> WindowRecord:
        """Expire ``owner``'s lease on ``window`` now, so another run may take the window over.

        The repair for a run that died holding its lease (a killed worker, a crashed
        ``airflow dags test``): the window keeps its state and recorded plan, and the next
        plan of the window takes it over (attempt + 1), after which the released owner's steps
        raise :class:`LeaseLostError` and change nothing (I6). ``owner`` must be the holder,
        so a run that took the window over meanwhile is never released by mistake. Releasing
        an expired lease changes nothing; a COMPLETE or FAILED window holds no lease.
        """
        require_window(window)
        require_text("lease owner", owner)
        return self._write(leases.release, window, owner)

    def get_window(self, stream_id: str, start: datetime) -> WindowRecord | None:
        """The window of ``stream_id`` starting at ``start``, or None if it was never planned."""
        validate_identifier("stream id", stream_id)
        start = ensure_utc("window start", start)
        with self._read() as conn:
            return windows.get(conn, stream_id, start)

    def list_windows(
        self, stream_id: str, states: Iterable[WindowState] | None = None
    ) -> list[WindowRecord]:
        """The stream's windows in time order, optionally only those in ``states``."""
        validate_identifier("stream id", stream_id)
        with self._read() as conn:
            return windows.list_windows(conn, stream_id, states)

    def newest_windows(
        self,
        stream_id: str,
        limit: int,
        states: Iterable[WindowState] | None = None,
        before: datetime | None = None,
    ) -> list[WindowRecord]:
        """At most ``limit`` windows of the stream, newest first, optionally only those in
        ``states`` or starting before ``before`` (the next page): one bounded query, however
        many windows the stream has."""
        validate_identifier("stream id", stream_id)
        limit = require_limit(limit)
        if before is not None:
            before = ensure_utc("before", before)
        wanted = None if states is None else tuple(states)
        with self._read() as conn:
            return windows.newest(conn, stream_id, limit, wanted, before)

    def covering_window(self, stream_id: str, start: datetime) -> WindowRecord | None:
        """The stream's window that starts before ``start`` and ends after it: the catch-up
        window that read the interval starting at ``start`` (None if no window did)."""
        validate_identifier("stream id", stream_id)
        start = ensure_utc("interval start", start)
        with self._read() as conn:
            return coverage.covering(conn, stream_id, start)

    def record_covered_interval(self, interval: Window) -> CoveredIntervalRecord:
        """Record that ``interval`` (a DAG run's data interval) was read by the catch-up window
        covering it (:mod:`airflow_cdc.state.coverage`); recording it again changes nothing."""
        require_window(interval)
        return self._write(coverage.record, interval)

    def covered_interval(self, stream_id: str, start: datetime) -> CoveredIntervalRecord | None:
        """The recorded covered interval of the stream starting at ``start``, if any."""
        validate_identifier("stream id", stream_id)
        start = ensure_utc("interval start", start)
        with self._read() as conn:
            return coverage.get(conn, stream_id, start)

    def covered_intervals(
        self, stream_id: str, window_start: datetime | None = None,
        window_starts: Collection[datetime] | None = None,
    ) -> list[CoveredIntervalRecord]:
        """The stream's covered intervals in time order; only one window's, or those of the
        windows starting at ``window_starts`` (the CDC view's shown windows), if named."""
        validate_identifier("stream id", stream_id)
        if window_start is not None:
            window_starts = [window_start]
        if window_starts is not None:
            window_starts = [ensure_utc("window start", start) for start in window_starts]
        with self._read() as conn:
            return coverage.of_stream(conn, stream_id, window_starts)

    def window_state_counts(self, stream_id: str) -> dict[WindowState, int]:
        """How many windows the stream has in each state."""
        validate_identifier("stream id", stream_id)
        with self._read() as conn:
            return windows.count_by_state(conn, stream_id)

    def record_step(
        self,
        window: Window,
        step: str,
        started_at: datetime,
        finished_at: datetime,
        details: Mapping[str, Any] | None = None,
    ) -> WindowStepRecord:
        """Record that ``step`` of ``window`` ran from ``started_at`` to ``finished_at``.

        Observed only (the CDC view and lag-chart show it as the step's duration): a re-run
        replaces the row, and no transition reads it. The window must have been planned.
        """
        require_window(window)
        if step not in steps.STEPS:
            raise ValueError(f"step {step!r} is not a step of the window protocol: use one of "
                             f"{', '.join(steps.STEPS)}")
        started = ensure_utc("step start", started_at)
        finished = ensure_utc("step end", finished_at)
        reported = dict(details or {})
        require_json("step details", reported)
        try:
            return self._write(steps.record, window, step, started, finished, reported)
        except IntegrityError:
            # PostgreSQL: the same step recorded at once by two runs; the second one wins.
            return self._write(steps.record, window, step, started, finished, reported)

    def window_steps(
        self, stream_id: str, starts: Iterable[datetime]
    ) -> dict[datetime, dict[str, WindowStepRecord]]:
        """The recorded steps of the stream's windows starting at ``starts``, by start and step."""
        validate_identifier("stream id", stream_id)
        wanted = [ensure_utc("window start", start) for start in starts]
        with self._read() as conn:
            return steps.of_windows(conn, stream_id, wanted)

    def window_partitions(self, window: Window) -> list[WindowPartitionRecord]:
        """The partitions ``window`` planned and the children it read, with their outcomes."""
        require_window(window)
        with self._read() as conn:
            return plans.list_plan(conn, window)

    # --- partitions --------------------------------------------------------------------------
    def list_partitions(
        self, stream_id: str, states: Iterable[PartitionState] | None = None
    ) -> list[PartitionRecord]:
        """The stream's partitions by id, optionally only those in ``states``."""
        validate_identifier("stream id", stream_id)
        with self._read() as conn:
            return partitions.list_partitions(conn, stream_id, states)

    def partitions_by_id(
        self, stream_id: str, partition_ids: Iterable[str]
    ) -> list[PartitionRecord]:
        """The stream's partitions among ``partition_ids`` (purged ones are left out), by id:
        a read bounded by the ids asked for, however many partitions the stream has."""
        validate_identifier("stream id", stream_id)
        with self._read() as conn:
            return partitions.by_ids(conn, stream_id, partition_ids)

    def lowest_live_partitions(self, stream_id: str, limit: int) -> list[PartitionRecord]:
        """At most ``limit`` live partitions, lowest watermark first (the ones holding the
        stream back come first): one bounded query."""
        validate_identifier("stream id", stream_id)
        limit = require_limit(limit)
        with self._read() as conn:
            return partitions.lowest_live(conn, stream_id, limit)

    def count_live_partitions(
        self, stream_id: str, behind: datetime | None = None
    ) -> tuple[int, int]:
        """(live partitions, how many of them have a watermark before ``behind``)."""
        validate_identifier("stream id", stream_id)
        if behind is not None:
            behind = ensure_utc("behind", behind)
        with self._read() as conn:
            return partitions.count_live(conn, stream_id, behind)

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
        return self._write(partitions.purge_finished, stream_id, cutoff)

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

    def _write(self, transition: Callable[..., Any], *args: Any) -> Any:
        """Run ``transition(conn, now, *args)`` in one write transaction."""
        self._require_schema()
        with engines.write_transaction(self._engine) as conn:
            return transition(conn, self._now(), *args)

    def _read(self):
        self._require_schema()
        return engines.read_transaction(self._engine)
