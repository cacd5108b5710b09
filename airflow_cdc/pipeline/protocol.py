"""The window protocol's Airflow-free steps: plan, commit and the completeness gate.

Operators call these; Spark jobs do extract and apply. Every step is safe to run again
(invariant I1): planning returns the recorded plan, committing an already committed window
changes nothing, the gate only reads until it opens.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from airflow_cdc.faults import crash_point
from airflow_cdc.model import (
    CdcError,
    PartitionPosition,
    PartitionState,
    Readiness,
    Window,
    WindowState,
    format_ts,
    parent_handovers,
    validate_identifier,
)
from airflow_cdc.pipeline.files import (
    WindowOutcomeFile,
    WindowPlanFile,
    window_dir,
    write_private,
)
from airflow_cdc.pipeline.partition_lineage import PendingChild

# Source spec keys that may hold secrets: never in plan files, fingerprints, logs or XCom.
SECRET_KEYS = frozenset({"access_token", "password", "credentials", "token"})
# Source spec keys that say how to read, not what is read: declaring a column's type, tuning a
# source's settings (lateness, settle time), moving its class to another module later, or
# (Debezium) naming the connector's signaling table and notification topic to follow its
# incremental snapshots on a running stream must not make the state store refuse the
# stream's recorded positions.
UNFINGERPRINTED_KEYS = frozenset({"column_types", "settings", "class", "signal_table",
                                  "notification_topic"})


# Counts the state store derives from the outcomes itself; an extract job's other counts
# (changes, transactions, events, duplicates ...) are recorded as the job reports them.
STORE_COMPUTED_COUNTS = frozenset({"records", "partitions", "finished", "children"})


class WindowNotReadyError(CdcError):
    """A step ran before the step it depends on finished."""


@dataclass(frozen=True)
class StreamConfig:
    """One stream as every step of its pipeline sees it."""

    stream_id: str
    source_kind: str
    source_spec: dict  # JSON, no secrets (see SECRET_KEYS)
    namespace: str = "cdc"
    work_root: str = ""

    def __post_init__(self) -> None:
        validate_identifier("stream id", self.stream_id)
        validate_identifier("Iceberg namespace", self.namespace)
        leaked = _secret_paths(self.source_spec)
        if leaked:
            raise ValueError(
                f"source spec of stream {self.stream_id!r} holds secrets at {leaked}: pass "
                f"credentials through the Airflow connection, not the pipeline arguments"
            )

    @classmethod
    def for_source(
        cls, source: str, stream_id: str, spec: Mapping, *, namespace: str = "cdc", work_root: str = ""
    ) -> StreamConfig:
        """The stream of ``source`` (a kind or ``module:Class``) configured by ``spec``, which the
        source validates now (when the DAG is parsed)."""
        from airflow_cdc.sources.registry import source_spec

        recorded = source_spec(source, stream_id, spec)  # the source's own checks come first
        return cls(stream_id=stream_id, source_kind=recorded["kind"], source_spec=recorded,
                   namespace=namespace, work_root=work_root)

    @property
    def source_name(self) -> str:
        """How the registry finds this stream's source: its import path, else its kind."""
        return self.source_spec.get("class") or self.source_kind

    @property
    def changelog_table(self) -> str:
        """``<namespace>.<stream>_changelog`` (the catalog name is added by the Spark side)."""
        return f"{self.namespace}.{self.stream_id}_changelog"

    @property
    def dead_letter_table(self) -> str:
        return f"{self.namespace}.{self.stream_id}_dead_letters"

    @property
    def fingerprint(self) -> str:
        """Changes when the source config changes: the state store then refuses the stream."""
        spec = {k: v for k, v in self.source_spec.items() if k not in UNFINGERPRINTED_KEYS}
        text = json.dumps({"kind": self.source_kind, "spec": spec}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def window_dir(self, window: Window):
        """The window's folder (a Path, or an ObjectPath under a URI work root)."""
        return window_dir(self.work_root, window)

    def plan_path(self, window: Window):
        return self.window_dir(window) / "plan.json"

    def outcome_path(self, window: Window):
        return self.window_dir(window) / "outcome.json"


def _secret_paths(spec: dict, prefix: str = "") -> list[str]:
    found = []
    for key, value in spec.items():
        path = f"{prefix}{key}"
        if key in SECRET_KEYS and value:
            found.append(path)
        elif isinstance(value, dict):
            found.extend(_secret_paths(value, path + "."))
    return found


def plan_window(
    store,
    config: StreamConfig,
    window: Window,
    owner: str,
    lease_seconds: float,
    initial_positions: list[PartitionPosition],
    catalog_name: str,
    *,
    new_partitions: Sequence[PartitionPosition] = (),
    plan_options: Callable[[Mapping | None, tuple[PartitionPosition, ...]], dict] | None = None,
) -> WindowPlanFile:
    """Open the window in the state store and write its plan file (same plan on re-runs).

    ``new_partitions`` are partitions the source discovered since the last window (file
    sources: one per settled event file); the store creates them in the transaction that
    opens the window. ``plan_options(kept, positions)`` gives the options the source's extract
    job reads from the plan file; ``kept`` is the options of the plan file an earlier attempt
    wrote (None for the first), so a choice made once (when it was planned, the source's
    primary keys, the files it reads) stays the same on every re-plan; ``positions`` are where
    the window reads each partition from.
    """
    store.register_stream(config.stream_id, config.source_kind, config.fingerprint)
    plan = store.plan_window(
        window, owner, lease_seconds, initial_positions, new_partitions=new_partitions
    )
    path = config.plan_path(window)
    recorded = recorded_plan(path, plan.window)
    if recorded is not None:
        return recorded
    pending = tuple(
        PendingChild(
            partition_id=p.partition_id,
            start=p.start,
            parent_ids=tuple(p.parent_ids),
            reported_by=set(p.reported_by),
            handovers=dict(parent_handovers(p.resume_position) or {}),
        )
        for p in store.list_partitions(config.stream_id, states=[PartitionState.CREATED])
    )
    options = {"dead_letter_table": f"{catalog_name}.{config.dead_letter_table}"}
    if plan_options is not None:
        kept = WindowPlanFile.from_json(path.read_text()) if path.exists() else None
        options.update(plan_options(kept.options if kept is not None else None, tuple(plan.positions)))
    plan_file = WindowPlanFile(
        window=window,
        positions=tuple(plan.positions),
        pending_children=pending,
        source=config.source_spec,
        changelog_table=f"{catalog_name}.{config.changelog_table}",
        attempt=plan.window.attempt,
        options=options,
    )
    write_private(path, plan_file.to_json())
    return WindowPlanFile.from_json(path.read_text())


def recorded_plan(path: Path, record) -> WindowPlanFile | None:
    """The plan file a re-plan must return unchanged, or None when it may be (re)written.

    Once a window is past PLANNED its extract has read the partitions the file names, so the
    file is the record of what W read (I1: a cleared window reads the same positions). While
    it is PLANNED nothing was read yet: a re-plan writes it again (a lease taken over raises
    the attempt the file carries). The one rule every source's plan step uses.
    """
    if path.exists() and record.state is not WindowState.PLANNED:
        return WindowPlanFile.from_json(path.read_text())
    return None


def committed_window(store, window: Window):
    """The window's record when its outcomes are already recorded (COMMITTED or later), else None.

    The protocol's rule for re-runs (I1): the extract and commit steps of a committed window
    do nothing again, whichever run asks; the changelog commit and outcomes are recorded, and
    running them again could only find them. The state store's commit transaction keeps its
    own check under the stream's lock, where it also refuses another owner (I6).
    """
    record = store.get_window(window.stream_id, window.start)
    return record if record is not None and record.committed else None


def commit_window(
    store, config: StreamConfig, window: Window, owner: str, lease_seconds: float | None = None
):
    """Record the extract job's outcome file in one state-store transaction.

    With ``lease_seconds`` the owner's lease is renewed first: it may have run out while the
    commit task waited for a worker, and the owner may renew it as long as nobody took over.
    """
    recorded = committed_window(store, window)
    if recorded is not None:
        return recorded
    if store.get_window(window.stream_id, window.start) is None:
        raise WindowNotReadyError(f"window {window.window_id} of {window.stream_id} was never planned")
    if lease_seconds is not None:
        store.renew_lease(window, owner, lease_seconds)
    path = config.outcome_path(window)
    if not path.exists():
        raise WindowNotReadyError(
            f"window {window.window_id} of {window.stream_id} has no outcome file at {path}: "
            f"the extract task has not finished; clear it to run it again"
        )
    outcome = WindowOutcomeFile.from_json(path.read_text())
    if outcome.window_id != window.window_id:
        raise WindowNotReadyError(
            f"outcome file {path} is for window {outcome.window_id}, not {window.window_id}"
        )
    extra = {k: v for k, v in outcome.counts.items() if k not in STORE_COMPUTED_COUNTS}
    crash_point("commit.before_transaction")
    return store.commit_window(window, owner, list(outcome.outcomes), extra)


def require_earlier_windows_applied(store, window: Window) -> None:
    """Windows of a stream apply in order: W's apply job may run only once every earlier window
    is applied (APPLIED or COMPLETE); otherwise :class:`WindowNotReadyError` names the first.

    W may commit as soon as W-1 has committed, so a W-1 whose apply failed can be re-run
    (cleared) while W runs. Applied after W, it would lose data: the ordering-key guard makes
    W-1's older change to a key lose against W's, so a partial image (only the columns it
    changed) of W-1 touching other columns than W's is dropped whole, and a history (SCD 2)
    chain would be closed out of order. Earlier windows are all committed once W is (commits
    are in order), so those not applied yet are the COMMITTED ones.
    """
    pending = [
        w for w in store.list_windows(window.stream_id, states=[WindowState.COMMITTED])
        if w.start < window.start
    ]
    if pending:
        first = pending[0]
        raise WindowNotReadyError(
            f"window {window.window_id} of {window.stream_id} cannot apply yet: the earlier "
            f"window {first.window.window_id} is COMMITTED, not applied; windows of a stream "
            f"apply in order (an older window applied after a newer one would lose its partial "
            f"updates), so run the apply of {first.window.window_id} first (clear its apply "
            f"task), then this one"
        )


def planning_readiness(store, window: Window) -> Readiness | None:
    """What the protocol itself says about planning ``window`` now, before its source is asked;
    None when only the source can tell.

    A window planned before is ready: its re-run returns the recorded plan and reads what the
    first run read, whatever the source shows now. So is an interval a catch-up window of an
    earlier run covers (:mod:`airflow_cdc.pipeline.catchup`): its run only records that. Windows of a stream commit strictly in
    order: W waits while W-1 is still running (PLANNED or EXTRACTED). A FAILED W-1 will not
    commit by waiting, so that is not a wait: planning then fails and names it (re-run W-1).
    """
    if store.get_window(window.stream_id, window.start) is not None:
        return Readiness(True, "the window was planned before: its recorded plan is read")
    covering = store.covering_window(window.stream_id, window.start)
    if covering is not None:
        return Readiness(
            True, f"the interval is read by the catch-up window {covering.window.window_id}"
        )
    earlier = [w for w in store.list_windows(window.stream_id) if w.start < window.start]
    if not earlier or earlier[-1].committed or earlier[-1].state is WindowState.FAILED:
        return None
    previous = earlier[-1]
    return Readiness(
        False,
        f"the previous window [{format_ts(previous.start)}, {format_ts(previous.end)}) is "
        f"{previous.state.value}: windows of a stream commit in order",
    )


@dataclass(frozen=True)
class LaggingPartition:
    partition_id: str
    watermark: datetime
    since: datetime


@dataclass(frozen=True)
class GateStatus:
    """Whether a window is proven complete (I4), and if not, why not, visibly."""

    open: bool
    reason: str
    state: WindowState | None = None
    low_watermark: datetime | None = None
    lagging: tuple[LaggingPartition, ...] = field(default=())


def gate_status(store, window: Window, covers: Callable | None = None) -> GateStatus:
    """Open when apply committed and every partition live in the window covered it.

    ``window`` is a DAG run's interval: the window planned from its start (a catch-up
    window reaching past it is gated whole), or, for an interval an earlier run's catch-up
    window read, that window's gate (:func:`covered_gate_status`).

    ``covers(window, watermark, finished)`` is the source's rule
    (:meth:`~airflow_cdc.sources.base.ChangeSource.covers`; the base rule by default).
    """
    from airflow_cdc.sources.base import ChangeSource

    covers = covers or ChangeSource.covers
    record = store.get_window(window.stream_id, window.start)
    if record is None:
        covering = store.covering_window(window.stream_id, window.start)
        if covering is None:
            return GateStatus(False, f"window {window.window_id} was never planned")
        return covered_gate_status(covering)
    # A catch-up window ends after its run's interval: the gate proves the whole window.
    window = record.window
    state = WindowState(record.state)
    if state is WindowState.FAILED:
        return GateStatus(False, f"window failed: {record.failure_reason}", state)
    if state not in (WindowState.APPLIED, WindowState.COMPLETE):
        return GateStatus(
            False, f"window is {state.value}: apply has not committed yet", state,
            record.low_watermark,
        )
    read = {wp.partition_id: wp for wp in store.window_partitions(window)}
    # Only the partitions the window read and did not finish: the stream may keep thousands more.
    unfinished = [partition_id for partition_id, wp in read.items() if not wp.finished]
    current = {p.partition_id: p for p in store.partitions_by_id(window.stream_id, unfinished)}
    lagging = []
    for partition_id, wp in sorted(read.items()):
        if wp.finished:
            continue
        # A later window may have carried a partition past this window's end since.
        partition = current.get(partition_id)
        watermark = max(
            (w for w in (wp.watermark, partition.watermark if partition else None) if w),
            default=None,
        )
        finished = partition is not None and partition.state is PartitionState.FINISHED
        if not covers(window, watermark, finished):
            since = partition.watermark_since if partition else None
            lagging.append(LaggingPartition(partition_id, watermark or wp.start, since or wp.start))
    if lagging:
        worst = min(lagging, key=lambda p: p.watermark)
        return GateStatus(
            False,
            f"{len(lagging)} partition(s) hold the low watermark before the window end "
            f"{format_ts(window.end)}; lowest {worst.partition_id} at "
            f"{format_ts(worst.watermark)} since {format_ts(worst.since)}",
            state,
            record.low_watermark,
            tuple(lagging),
        )
    return GateStatus(True, "every partition live in the window reached its end", state,
                      record.low_watermark)


def covered_gate_status(covering) -> GateStatus:
    """The gate of an interval a catch-up window read (``covering``, its record): open once
    that window is COMPLETE, which its own gate proved for the whole window."""
    state = WindowState(covering.state)
    name = f"catch-up window {covering.window.window_id}"
    if state is WindowState.COMPLETE:
        return GateStatus(True, f"the {name} that read this interval is COMPLETE", state,
                          covering.low_watermark)
    if state is WindowState.FAILED:
        return GateStatus(False, f"the {name} that reads this interval failed: "
                                 f"{covering.failure_reason}; re-run the DAG run that planned it",
                          state, covering.low_watermark)
    return GateStatus(False, f"the {name} that reads this interval is {state.value}: the "
                             f"interval's gate opens when that window is COMPLETE",
                      state, covering.low_watermark)
