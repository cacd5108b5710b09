"""The operators of the window protocol, one set for every source: plan, extract, commit, apply.

Each is parameterized by the stream (:class:`~airflow_cdc.pipeline.protocol.StreamConfig`),
whose spec names its source (:mod:`airflow_cdc.sources.registry`); what differs between
sources is asked of the source object (:class:`~airflow_cdc.sources.base.ChangeSource`) and of
its Airflow hook, built from ``source_conn`` (connection ids and the like).

Each DAG run owns one window ``[data_interval_start, data_interval_end)``. The lease owner
is the DAG run, so a cleared task of the same run continues its own window, while a second
run of the same interval cannot commit it too (I6). Operators are thin: the protocol lives
in :mod:`airflow_cdc.pipeline`, Spark work in ``spark_jobs``.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    BaseOperator,
    TaskDeferred,
)

from airflow_cdc.faults import crash_point
from airflow_cdc.hooks.state import DEFAULT_CONN_ID, CdcStateHook
from airflow_cdc.metrics import report_step
from airflow_cdc.model import Window, WindowState, format_ts
from airflow_cdc.operators.task_context import (
    FINISHED_RUN_STATES,
    GONE_RUN,
    default_deferrable,
    holder_run_state,
    mirror_task_progress,
    run_owner,
    window_from_context,
    window_summary,
)
from airflow_cdc.pipeline.protocol import (
    StreamConfig,
    commit_window,
    committed_window,
    require_earlier_windows_applied,
)
from airflow_cdc.spark.iceberg import IcebergCatalog

# A window's lease: long enough for scheduling gaps between its tasks, short enough that a
# run killed holding it blocks a re-run for minutes, not hours. Spark steps renew it every
# third of its length while they run (kept_lease), and each step renews it when it starts.
DEFAULT_LEASE_SECONDS = 10 * 60


def default_work_root() -> str:
    """Where plan and outcome files live: ``$AIRFLOW_CDC_WORK_ROOT`` or AIRFLOW_HOME/cdc_work."""
    configured = os.environ.get("AIRFLOW_CDC_WORK_ROOT")
    if configured:
        return configured
    home = os.environ.get("AIRFLOW_HOME") or str(Path.home() / "airflow")
    return str(Path(home) / "cdc_work")


@contextmanager
def kept_lease(store, window: Window, owner: str, lease_seconds: float, log=None):
    """Renew ``owner``'s lease every third of its length while the block runs (a Spark job).

    A renewal that finds the lease lost stops renewing and is logged; the step's own guarded
    transition afterwards fails with LeaseLostError and changes nothing (I6).
    """
    stop = threading.Event()
    every = max(1.0, float(lease_seconds) / 3)

    def renew() -> None:
        while not stop.wait(every):
            try:
                store.renew_lease(window, owner, lease_seconds)
            except Exception as error:  # noqa: BLE001 - reported, the step decides
                if log is not None:
                    log.warning("stopped renewing the lease on %s: %s", window.window_id, error)
                return

    keeper = threading.Thread(target=renew, name=f"lease-{window.stream_id}", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join(timeout=30)


class CdcWindowOperator(BaseOperator):
    """Base of the protocol's operators: stream, source, state store, catalog, work folder.

    ``source_conn`` are the arguments of the source's Airflow hook (e.g. ``gcp_conn_id``);
    they are templated. The Iceberg catalog is ``catalog``, or the ``iceberg_catalog``
    connection ``iceberg_conn_id`` (:mod:`airflow_cdc.hooks.iceberg_catalog`, read when the
    task runs), or else the default local Hadoop catalog.
    """

    ui_color = "#e8f4fd"
    template_fields = ("source_conn",)

    def __init__(
        self,
        *,
        stream: StreamConfig,
        source_conn: Mapping[str, Any] | None = None,
        catalog: IcebergCatalog | None = None,
        iceberg_conn_id: str | None = None,
        cdc_state_conn_id: str = DEFAULT_CONN_ID,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if catalog is not None and iceberg_conn_id:
            raise ValueError(
                f"task {kwargs.get('task_id')!r}: give catalog= or iceberg_conn_id=, not both"
            )
        self.stream = stream
        self.source_conn = dict(source_conn or {})
        self.catalog = catalog
        self.iceberg_conn_id = iceberg_conn_id
        self._connection_catalog: IcebergCatalog | None = None
        self.cdc_state_conn_id = cdc_state_conn_id
        self.lease_seconds = lease_seconds

    def change_source(self, options: Mapping[str, Any] | None = None):
        """The stream's source (:class:`~airflow_cdc.sources.base.ChangeSource`)."""
        from airflow_cdc.sources.registry import build_source

        return build_source(self.stream.source_spec, options)

    def source_hook(self, source):
        """The source's Airflow hook built from ``source_conn`` (None if it needs none)."""
        from airflow_cdc.hooks.source import source_hook

        return source_hook(source, self.source_conn)

    @property
    def stream_config(self) -> StreamConfig:
        if self.stream.work_root:
            return self.stream
        from dataclasses import replace

        return replace(self.stream, work_root=default_work_root())

    @property
    def iceberg_catalog(self) -> IcebergCatalog:
        if self.catalog is not None:
            return self.catalog
        if self.iceberg_conn_id:
            if self._connection_catalog is None:
                from airflow_cdc.hooks.iceberg_catalog import IcebergCatalogHook

                hook = IcebergCatalogHook(iceberg_conn_id=self.iceberg_conn_id)
                self._connection_catalog = hook.get_catalog()
            return self._connection_catalog
        return IcebergCatalog()

    def state_store(self):
        return CdcStateHook(cdc_state_conn_id=self.cdc_state_conn_id).get_store()

    def window(self, context) -> Window:
        return window_from_context(self.stream.stream_id, context)

    def open_window(self, context, store, window: Window, plan: Callable[[], Any]) -> Any:
        """Run ``plan`` (a call that plans the window); take the window over from a dead run.

        When another run holds the window's lease and Airflow says that run has finished
        (success or failed) or no longer has it (deleted: ``airflow dags test`` of the same
        date, the UI), it can act no more: its lease is released and the window planned
        again, which takes it over (attempt + 1). A run still running keeps the window:
        WindowLeaseHeldError names it, what Airflow says of it, and the ``airflow-cdc
        release-lease`` command.
        """
        from airflow_cdc.state.errors import WindowLeaseHeldError

        try:
            return plan()
        except WindowLeaseHeldError as held:
            state = holder_run_state(context, held.holder)
            if state not in FINISHED_RUN_STATES | {GONE_RUN}:
                said = ("Airflow could not say whether that run still exists" if state is None
                        else f"Airflow says that DAG run is {state}")
                raise WindowLeaseHeldError(f"{held} ({said})", holder=held.holder) from held
            self.log.warning(
                "window %s is leased to %s, whose DAG run is %s: taking it over",
                window.window_id, held.holder, state,
            )
            store.release_lease(window, held.holder)
            return plan()


class CdcPlanOperator(CdcWindowOperator):
    """Steps 0 and 1: wait until the window can be read, then plan it.

    A source whose evidence for ``[s, e)`` exists only some time after ``e``
    (:meth:`~airflow_cdc.sources.base.ChangeSource.evidence_delay`: Datastream's lateness)
    is asked (:meth:`~airflow_cdc.sources.base.ChangeSource.readiness`) until it says the
    window can be read, deferred to :class:`~airflow_cdc.triggers.ready.CdcWindowReadyTrigger`
    (the worker slot is freed) or, with ``deferrable=False``, polling in the task. A wait that
    outlasts ``wait_timeout`` fails the task naming the source's reason; the window stays
    unplanned and nothing is skipped. Then the window is planned: its partitions (the
    stream's first window: the source's initial ones; partitions the source discovered are
    added) and the source's plan options go into the state store and the plan file.
    """

    def __init__(
        self,
        *,
        deferrable: bool | None = None,
        wait_poke_interval: float = 30,
        wait_timeout: float = 6 * 3600,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.deferrable = default_deferrable() if deferrable is None else bool(deferrable)
        self.wait_poke_interval = float(wait_poke_interval)
        self.wait_timeout = float(wait_timeout)

    def readiness_probe(self, context) -> tuple[str, dict]:
        """``("module:Class", kwargs)`` of the window's readiness probe: the protocol's own
        rule (the previous window still running: wait), then the source's."""
        from airflow_cdc.triggers.ready import SourceWindowProbe

        window = self.window(context)
        return (
            f"{SourceWindowProbe.__module__}:{SourceWindowProbe.__qualname__}",
            {
                "source_spec": self.stream.source_spec,
                "window_start": format_ts(window.start),
                "window_end": format_ts(window.end),
                "cdc_state_conn_id": self.cdc_state_conn_id,
                "source_conn": dict(self.source_conn),
            },
        )

    def plan(self, context, decided: dict | None = None) -> dict:
        """Plan the window; ``decided`` are plan options the readiness answer gave."""
        from datetime import datetime, timezone

        from airflow_cdc.pipeline.protocol import plan_window
        from airflow_cdc.sources.base import Discovery

        config = self.stream_config
        window = self.window(context)
        source = self.change_source()
        hook = self.source_hook(source)
        now = datetime.now(timezone.utc)
        store = self.state_store()
        # A window planned before reads its recorded partitions: nothing new is looked for.
        # A stream's first window was held to the interval before it by the wait that led
        # here (_first_window_order), just before this plan.
        planned = store.get_window(window.stream_id, window.start) is not None
        found = Discovery() if planned else source.discover(window, now, hook)
        plan = self.open_window(context, store, window, lambda: plan_window(
            store,
            config,
            window,
            run_owner(context),
            self.lease_seconds,
            source.initial_positions(window),
            self.iceberg_catalog.name,
            new_partitions=found.partitions,
            plan_options=lambda kept, positions: {
                **(dict(decided or {}) if kept is None else {}),
                **source.plan_options(kept, now, hook, positions, window=window),
            },
        ))
        report_step(context, store, window, "plan")
        return {
            "window_id": window.window_id,
            "attempt": plan.attempt,
            "partitions": len(plan.positions),
            "pending_children": len(plan.pending_children),
            **found.seen,
            **source.plan_summary(plan),
        }

    def execute(self, context) -> dict:
        import time
        from datetime import datetime, timedelta, timezone

        from airflow_cdc.triggers.ready import CdcWindowReadyTrigger, load_probe

        named = self.readiness_probe(context)
        window = self.window(context)
        probe = load_probe(*named)
        started = datetime.now(timezone.utc)
        deadline = started + timedelta(seconds=self.wait_timeout)
        status = self._first_window_order(context, window, probe.check(started))
        while not status.ready:
            now = datetime.now(timezone.utc)
            if now >= deadline:
                self._wait_timed_out(window, status.reason)
            if self.deferrable:
                self.log.info("window %s waits in the triggerer: %s", window.window_id, status.reason)
                self.defer(
                    trigger=CdcWindowReadyTrigger(
                        probe=named[0],
                        probe_kwargs=named[1],
                        window_id=window.window_id,
                        poll_interval=self.wait_poke_interval,
                        deadline=format_ts(deadline),
                    ),
                    method_name="execute_ready",
                    timeout=timedelta(seconds=self.wait_timeout) + timedelta(minutes=5),
                )
            self.log.info("window %s waits: %s", window.window_id, status.reason)
            pause = self.wait_poke_interval
            if status.retry_at is not None:
                pause = max(0.5, (status.retry_at - now).total_seconds())
            time.sleep(min(pause, max(0.5, (deadline - now).total_seconds())))
            status = self._first_window_order(context, window, probe.check(datetime.now(timezone.utc)))
        self.log.info("window %s can be planned: %s", window.window_id, status.reason)
        return self.plan(context, status.options)

    def execute_ready(self, context, event: dict | None = None) -> dict:
        """Resume after the wait: plan on ``ready``, fail naming the reason otherwise."""
        event = event or {}
        window = self.window(context)
        if event.get("status") == "timeout":
            self._wait_timed_out(window, event.get("reason"))
        if event.get("status") != "ready":
            raise AirflowException(
                event.get("message") or f"window {window.window_id}: unknown wait event {event!r}"
            )
        waiting = self._first_window_order(context, window, None)
        if waiting is not None:
            # The source is ready but an earlier interval's plan still runs: wait for it here,
            # then ask the probe again from the start.
            from datetime import datetime, timedelta, timezone

            from airflow.providers.standard.triggers.temporal import DateTimeTrigger

            self.log.info("window %s waits: %s", window.window_id, waiting.reason)
            self.defer(
                trigger=DateTimeTrigger(
                    moment=datetime.now(timezone.utc) + timedelta(seconds=self.wait_poke_interval)
                ),
                method_name="execute_again",
            )
        self.log.info("window %s can be planned: %s", window.window_id, event.get("reason"))
        return self.plan(context, event.get("options"))

    def execute_again(self, context, event: dict | None = None) -> dict:
        """Resume after waiting on an earlier interval's plan: wait for the window as at first."""
        return self.execute(context)

    def _first_window_order(self, context, window: Window, status):
        """``status`` (the probe's answer), or a not-ready answer while a stream's first window
        must wait for the plan of the interval before it (:func:`require_previous_interval_planned`).
        With ``status`` None, None when nothing is to wait for."""
        if status is not None and not status.ready:
            return status
        store = self.state_store()
        if store.get_window(window.stream_id, window.start) or store.newest_windows(window.stream_id, 1):
            return status
        reason = require_previous_interval_planned(context, window, self.task_id)
        if reason is None:
            return status
        from airflow_cdc.model import Readiness

        return Readiness(False, reason)

    def _wait_timed_out(self, window: Window, reason: str | None) -> None:
        from airflow.providers.common.compat.sdk import AirflowSensorTimeout

        raise AirflowSensorTimeout(
            f"window {window.window_id} of {window.stream_id!r} could not be planned within "
            f"{self.wait_timeout:.0f}s: {reason}. The window stays unplanned (nothing is "
            f"skipped); clear the plan task to wait again, or fix the source"
        )


# Task instance states of a task that may still succeed without anyone clearing it.
UNFINISHED_TASK_STATES = frozenset({
    None, "scheduled", "queued", "running", "deferred", "up_for_retry", "up_for_reschedule",
    "restarting",
})


def require_previous_interval_planned(context, window: Window, task_id: str) -> str | None:
    """A stream's first window may not leave the interval before it without a record.

    The state store checks that every later window starts where the stream's latest one
    ends, but it knows a stream only from its first plan: an interval whose plan failed
    before that (its wait for evidence timed out, its source refused) left no row. So the
    first window asks Airflow: when the DAG's previous run covers the interval that ends
    where this window starts and its run of this plan task did not succeed, planning here
    would start the stream after that interval and it would never get a window, gate or
    Asset event. A previous plan that succeeded (the stream was reset since) or a run without
    this task (a stream added since) is no gap.

    Returns None when this window may be planned, the reason to wait while that plan is still
    unfinished (with catchup, runs of past intervals become ready together); raises
    WindowOrderError naming the interval and the fix when that plan ended without success.
    """
    from airflow_cdc.operators.task_context import previous_run_task
    from airflow_cdc.state.errors import WindowOrderError

    previous = previous_run_task(context)
    if previous is None or previous.end != window.start or previous.state == "success":
        return None
    interval = f"[{format_ts(previous.start)}, {format_ts(previous.end)})"
    if previous.state in UNFINISHED_TASK_STATES:
        return (
            f"the stream's first window waits for the interval before it, {interval}: its plan "
            f"task {task_id!r} in DAG run {previous.run_id!r} is {previous.state or 'not run yet'}"
        )
    raise WindowOrderError(
        f"window {window.window_id} of {window.stream_id!r} would be the stream's first "
        f"window, but the interval before it, {interval}, has no window: its plan task "
        f"{task_id!r} in DAG run {previous.run_id!r} is {previous.state}, and planning this "
        f"window first would leave {interval} without a record, gate or Asset event. Clear "
        f"{task_id!r} of {previous.run_id!r} so it plans {interval} first; this window follows "
        f"once that one commits (clear this plan task then, or let its retries run it). To "
        f"start the stream at {format_ts(window.start)} on purpose and never read {interval}, "
        f"mark that plan task success instead"
    )


# The fused job's record of its apply (spark_jobs/extract.py --apply-result), in the window folder.
FUSED_APPLY_RESULT = "fused-apply-result.json"


@dataclass(frozen=True)
class ApplySettings:
    """What the apply job is told besides the window: ``targets`` (namespace, mapping,
    history), ``on_dead_letter`` and ``tombstone_horizon_seconds`` (see
    :class:`CdcApplyOperator`). The apply task and a fused extract (``fused_apply``) build
    the same job config from it."""

    targets: Mapping[str, Any] | None = None
    on_dead_letter: str = "fail"
    tombstone_horizon_seconds: int = 7 * 24 * 3600

    def job_config(self, config: StreamConfig, catalog_name: str, window: Window) -> dict:
        """The apply job's ``--job-config`` object for ``window`` (``spark_jobs/apply/config.py``)."""
        from airflow_cdc.sources.registry import class_of_spec

        targets = {"namespace": "current", **dict(self.targets or {})}
        targets.setdefault("dead_letter_table", config.dead_letter_table)
        # A source with its own apply (Bigtable's cells) is named for the apply job.
        source_applies = class_of_spec(config.source_spec).apply_window is not None
        return {
            "catalog": catalog_name,
            "stream": config.stream_id,
            "window_id": window.window_id,
            "window_end": format_ts(window.end),
            "changelog_table": config.changelog_table,
            "targets": targets,
            **({"source": config.source_spec} if source_applies else {}),
            "policies": {
                "on_dead_letter": self.on_dead_letter,
                "tombstone_horizon_seconds": int(self.tombstone_horizon_seconds),
            },
        }


def fused_apply_result(folder, changelog_snapshot_id: int, log=None) -> dict | None:
    """The apply result a fused extract job left for the window (``folder``), when it applied
    the window's changelog commit ``changelog_snapshot_id``; None otherwise (no fused apply,
    or it did not apply: dead letters under ``fail``, an error), and the apply task runs the
    apply job itself, which reports why."""
    path = folder / FUSED_APPLY_RESULT
    if not path.exists():
        return None
    fused = json.loads(path.read_text())
    applied = fused.get("apply") or {}
    if fused.get("changelog_snapshot_id") != changelog_snapshot_id or applied.get("status") != "applied":
        if log is not None:
            log.info("the extract job did not apply the window (%s): running the apply job",
                     fused.get("error") or applied.get("status") or "another changelog commit")
        return None
    if log is not None:
        log.info("the extract job applied the window in the same Spark application: "
                 "recording it, no Spark job")
    return applied


def warn_failed_compactions(log, window_id: str, result: Mapping) -> int:
    """Log a warning per compaction that failed after the window's commits (the apply result's
    ``compaction_errors``): the window is applied, the next window tries again. Returns how
    many there were."""
    errors = [error for table in result.get("tables", []) for error in table.get("compaction_errors") or []]
    for error in errors:
        log.warning("window %s is applied, but a compaction after it failed (the next window "
                    "tries again): %s", window_id, error)
    return len(errors)


class CdcSparkOperator(CdcWindowOperator):
    """A protocol step that runs a Spark job through a runner.

    ``spark_conn_id`` None runs ``spark-submit --master local[*]`` on the worker; a Spark
    connection id runs through the Spark provider's SparkSubmitHook (standalone, YARN, k8s);
    ``dataproc`` (:class:`~airflow_cdc.spark.dataproc.DataprocCluster` or
    :class:`~airflow_cdc.spark.dataproc.DataprocServerless`) submits to Dataproc, the files
    the job needs staged under the work root (a ``gs://`` URI). ``warm_driver_idle_seconds``
    (local Spark only) runs the job in a warm driver on the worker
    (:class:`~airflow_cdc.spark.warm.WarmSparkRunner`), started by the first job and kept that
    many seconds after the last: a window's jobs then pay no JVM, session or catalog start.
    With ``deferrable`` a Dataproc
    job is waited for in the triggerer (:class:`~airflow_cdc.triggers.dataproc.
    CdcDataprocRunTrigger`, which keeps the window's lease); the task then resumes into
    ``execute``, whose steps before the job are idempotent, and takes the job's final state
    instead of submitting it again.
    """

    def __init__(
        self,
        *,
        spark_conn_id: str | None = None,
        spark_conf: Mapping[str, str] | None = None,
        dataproc: Any = None,
        deferrable: bool | None = None,
        warm_driver_idle_seconds: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if spark_conn_id and dataproc is not None:
            raise ValueError(f"task {kwargs.get('task_id')!r}: give spark_conn_id or dataproc, "
                             f"not both")
        if warm_driver_idle_seconds and (spark_conn_id or dataproc is not None):
            raise ValueError(f"task {kwargs.get('task_id')!r}: warm_driver_idle_seconds keeps a "
                             f"local Spark driver warm; it does not apply with spark_conn_id or "
                             f"dataproc (leave it unset there)")
        if warm_driver_idle_seconds is not None and warm_driver_idle_seconds < 0:
            raise ValueError(f"task {kwargs.get('task_id')!r}: warm_driver_idle_seconds="
                             f"{warm_driver_idle_seconds!r} is negative: give seconds, or 0/None "
                             f"for a spark-submit per job")
        self.warm_driver_idle_seconds = warm_driver_idle_seconds or None
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.dataproc = dataproc
        self.deferrable = default_deferrable() if deferrable is None else bool(deferrable)
        self._runner = None
        self._resumed: dict | None = None

    def runner(self):
        from airflow_cdc.spark.runners import LocalSparkRunner, SparkSubmitHookRunner

        if self.dataproc is not None:
            from airflow_cdc.hooks.dataproc import CdcDataprocHook

            hook = CdcDataprocHook(gcp_conn_id=self.dataproc.gcp_conn_id,
                                   impersonation_chain=self.dataproc.impersonation_chain)
            project = self.dataproc.project_id or hook.project_id
            if not project:
                raise AirflowFailException(
                    f"Dataproc runner of {self.task_id!r} has no project: give "
                    f"project_id=... or a project in the connection {self.dataproc.gcp_conn_id!r}")
            return self.dataproc.runner(hook, project, self.stream_config.work_root,
                                        logger=self.log)
        if self.spark_conn_id:
            return SparkSubmitHookRunner(conn_id=self.spark_conn_id)
        if self.warm_driver_idle_seconds:
            from airflow_cdc.spark.warm import WarmSparkRunner

            return WarmSparkRunner(master="local[*]", idle_seconds=self.warm_driver_idle_seconds)
        return LocalSparkRunner(master="local[*]")

    def run_job(self, spec, store=None, window: Window | None = None, owner: str | None = None) -> None:
        """Run the job; with ``store``, ``window`` and ``owner`` the window's lease is kept
        meanwhile. A deferrable Dataproc job defers here (TaskDeferred) after its submission."""
        if self._resumed is not None:
            return self._finish_resumed(spec)
        self._runner = self.runner()
        try:
            if self.deferrable and hasattr(self._runner, "submit"):
                self._defer_job(self._runner.submit(spec), window, owner)
            if store is None:
                self._runner.run(spec)
            else:
                with kept_lease(store, window, owner, self.lease_seconds, log=self.log):
                    self._runner.run(spec)
        finally:
            self._runner = None

    def _defer_job(self, run, window: Window | None, owner: str | None) -> None:
        from airflow_cdc.triggers.dataproc import CdcDataprocRunTrigger

        lease = None if window is None else {
            "cdc_state_conn_id": self.cdc_state_conn_id, "stream_id": window.stream_id,
            "window_start": format_ts(window.start), "window_end": format_ts(window.end),
            "owner": owner, "lease_seconds": self.lease_seconds,
        }
        self.defer(
            trigger=CdcDataprocRunTrigger(
                run=run.to_dict(), gcp_conn_id=self.dataproc.gcp_conn_id,
                impersonation_chain=self.dataproc.impersonation_chain,
                poll_interval=self.dataproc.poll_seconds, lease=lease),
            method_name="execute_after_job",
        )

    def execute_after_job(self, context, event: dict | None = None):
        """Resume after a deferred Dataproc job: ``execute`` again, taking its final state."""
        self._resumed = dict(event or {"status": "error", "message": "no event"})
        return self.execute(context)

    def _finish_resumed(self, spec) -> None:
        from airflow_cdc.spark.dataproc import DataprocRun, RunState

        event, self._resumed = self._resumed, None
        run = DataprocRun.from_dict(event.get("run") or {})
        if run.name != spec.name:
            raise AirflowFailException(
                f"resumed after Dataproc {run.kind} {run.resource_id} of {run.name!r}, but this "
                f"task's job is {spec.name!r}: clear the task to run it again")
        if event.get("status") != "done":
            raise AirflowException(event.get("message") or f"Dataproc wait failed: {event!r}")
        self.runner().finish(run, RunState(event["state"], True, bool(event["succeeded"]),
                                           event.get("details") or "",
                                           event.get("driver_output_uri")))

    def on_kill(self) -> None:
        if self._runner is not None:
            self._runner.kill()

    def job_conf(self, context) -> dict:
        """``spark_conf`` plus the OpenLineage parent-job properties of this task."""
        from airflow_cdc.assets import inject_parent_job

        conf = inject_parent_job(self.spark_conf, context)
        if "spark.openlineage.parentJobName" in conf:
            self.log.info(
                "Spark job's OpenLineage parent job: %s (run %s)",
                conf["spark.openlineage.parentJobName"], conf.get("spark.openlineage.parentRunId"),
            )
        return conf

    def changelog_dataset(self):
        from airflow_cdc.assets import iceberg_datasets

        return iceberg_datasets(self.iceberg_catalog, [self.stream_config.changelog_table])


class CdcExtractOperator(CdcSparkOperator):
    """Step 2: the extract Spark job (``spark_jobs/extract.py``, the same for every source)
    reads the planned partitions into the changelog.

    The source's short-lived secrets (:meth:`~airflow_cdc.sources.base.ChangeSource.
    extract_overrides`, through its hook) reach the job in a 0600 file removed afterwards. A
    source that is not part of airflow-cdc travels with the job: its top-level package is
    zipped into the job's ``--py-files``.

    Two strategies spare Spark applications (measured by ``bench/window.py``):

    * ``fused_apply`` (the apply task's :class:`ApplySettings`): the same Spark application
      then applies the window (``spark_jobs/extract.py --apply-config``), and the apply task
      only records it (:func:`fused_apply_result`). Saves one Spark application per window
      (a JVM, a SparkSession, the catalog); ``bench/window.py`` shows it (figures in
      docs/performance.md).
    * ``empty_window_probe_limit``: a window of a source that can prove it empty
      (:mod:`airflow_cdc.pipeline.empty_window`) is read here first when the previous
      window recorded at most this many changes (-1: never); an empty one starts no Spark
      (``bench/window.py``'s empty window).
    """

    def __init__(
        self,
        *,
        fused_apply: ApplySettings | None = None,
        empty_window_probe_limit: int = -1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.fused_apply = fused_apply
        self.empty_window_probe_limit = int(empty_window_probe_limit)
        self._resolved: dict = {}

    def _extracted_empty(self, store, window: Window, folder) -> bool:
        """Whether the window is EXTRACTED by the empty-window rule already (its outcome file
        written): a re-run must not read again (a second read could differ)."""
        record = store.get_window(window.stream_id, window.start)
        return (record is not None and record.state is WindowState.EXTRACTED
                and record.changelog_snapshot_id is None
                and (folder / "outcome.json").exists())

    def _extract_if_empty(self, context, store, window: Window, owner: str, folder) -> dict | None:
        """The empty-window rule (:mod:`airflow_cdc.pipeline.empty_window`): when it applies
        and reading the window here finds no change, the window is extracted with no Spark
        job and its summary returned; otherwise None (the Spark job reads it)."""
        from airflow_cdc.pipeline.empty_window import (
            probe_empty_window,
            spark_extract_started,
            worth_probing,
        )
        from airflow_cdc.pipeline.files import WindowPlanFile, with_source_overrides, write_private
        from airflow_cdc.sources.registry import build_source

        config = self.stream_config
        if (not self.change_source().proves_empty_windows or spark_extract_started(folder)
                or not worth_probing(store, window, self.empty_window_probe_limit)):
            return None
        plan = WindowPlanFile.from_json(config.plan_path(window).read_text())
        overrides = self.source_overrides(context)
        if overrides:
            plan = with_source_overrides(plan, overrides)
        with kept_lease(store, window, owner, self.lease_seconds, log=self.log):
            outcome = probe_empty_window(build_source(plan.source, plan.options), plan)
        if outcome is None:
            self.log.info("window %s has changes: the Spark job reads it", window.window_id)
            return None
        self.log.info("window %s is empty (every partition read, no change): no Spark job",
                      window.window_id)
        write_private(config.outcome_path(window), outcome.to_json())
        store.mark_extracted(window, owner, None)
        report_step(context, store, window, "extract")
        summary = {"window_id": window.window_id, "changelog_snapshot_id": None,
                   "skipped": False, "empty": True, **outcome.counts}
        mirror_task_progress(context, "extract", summary)
        return summary

    def _fused_apply_args(self, store, window: Window, folder) -> list[str]:
        """The job's arguments to apply the window too (empty when it must not): only with
        ``fused_apply``, and only when every earlier window of the stream is applied
        (windows apply in order; otherwise the apply task runs its own job, in order)."""
        from airflow_cdc.pipeline.files import write_private

        if self.fused_apply is None:
            return []
        pending = [w for w in store.list_windows(window.stream_id, states=[WindowState.COMMITTED])
                   if w.start < window.start]
        if pending:
            self.log.info("window %s: an earlier window is not applied yet, so the apply task "
                          "applies this one", window.window_id)
            return []
        config_path = folder / "apply.json"
        write_private(config_path, json.dumps(
            self.fused_apply.job_config(self.stream_config, self.iceberg_catalog.name, window),
            indent=1))
        return ["--apply-config", str(config_path),
                "--apply-result", str(folder / FUSED_APPLY_RESULT)]

    def source_overrides(self, context) -> dict:
        source = self.change_source()
        self._resolved = source.extract_overrides(self.source_hook(source))
        return self._resolved

    @contextmanager
    def _overrides_file(self, context, folder):
        """The path the job reads the source overrides (a short-lived access token) from, or
        None without any. A driver on this machine reads an anonymous memory file of this
        process (a SIGKILL of the task leaves nothing: :mod:`airflow_cdc.spark.secrets`); a
        driver elsewhere a 0600 file in the window folder, which the job deletes once read and
        this task when the job ends (kept while the task waits in the triggerer)."""
        from airflow_cdc.pipeline.files import write_private
        from airflow_cdc.spark.secrets import process_files_supported, process_secret_file

        overrides = self.source_overrides(context)
        if not overrides:
            yield None
            return
        text = json.dumps(overrides)
        if self._resumed is None and process_files_supported() and self.runner().driver_is_local:
            with process_secret_file(text) as path:
                yield path
            return
        path = folder / "source-overrides.json"
        if self._resumed is None:
            write_private(path, text)
        deferred = False
        try:
            yield str(path)
        except TaskDeferred:
            deferred = True  # the job reads the file while the task waits in the triggerer
            raise
        finally:
            if not deferred:
                path.unlink(missing_ok=True)

    def source_datasets(self) -> list:
        """OpenLineage inputs: what the source names as read (its stream, bucket, tables)."""
        from airflow_cdc.assets import source_datasets

        return source_datasets(self.change_source().lineage_inputs(self._resolved))

    def source_py_files(self) -> list[str]:
        """The source's own code when Spark must be given it: its package zipped, or its
        module file (see :func:`airflow_cdc.sources.registry.source_package`)."""
        import importlib.util

        from airflow_cdc.sources.registry import source_package
        from airflow_cdc.spark.packaging import build_py_files

        top = source_package(self.stream.source_spec)
        if top is None:
            return []
        found = importlib.util.find_spec(top)
        if found is not None and not found.submodule_search_locations and found.origin:
            return [found.origin]  # a single module: spark-submit takes the .py file itself
        return [str(build_py_files([top]))]

    def get_openlineage_facets_on_complete(self, task_instance):
        """Lineage: the source stream in, the stream's Iceberg changelog out."""
        from airflow_cdc.assets import operator_lineage

        return operator_lineage(self.source_datasets(), self.changelog_dataset())

    def execute(self, context) -> dict:
        from airflow_cdc.spark.job import SparkJobError, iceberg_job_spec

        config = self.stream_config
        window = self.window(context)
        owner = run_owner(context)
        store = self.state_store()
        record = committed_window(store, window)
        if record is not None:
            self.log.info("window %s is already %s: nothing to extract", window.window_id,
                          record.state.value)
            return {**window_summary(record), "skipped": True}
        folder = config.window_dir(window)
        if self._extracted_empty(store, window, folder):
            self.log.info("window %s was proven empty before: nothing to extract", window.window_id)
            return {"window_id": window.window_id, "changelog_snapshot_id": None, "skipped": True}
        store.renew_lease(window, owner, self.lease_seconds)
        empty = self._extract_if_empty(context, store, window, owner, folder)
        if empty is not None:
            return empty
        from airflow_cdc.pipeline.empty_window import mark_spark_extract

        mark_spark_extract(folder)  # from now on only the changelog's window tag decides (I1)
        result_path = folder / "extract-result.json"
        args = [
            "--plan", str(config.plan_path(window)),
            "--outcome", str(config.outcome_path(window)),
            "--result", str(result_path),
            *self._fused_apply_args(store, window, folder),
        ]
        with self._overrides_file(context, folder) as overrides_path:
            if overrides_path is not None:
                args += ["--source-overrides", overrides_path]
            spec = iceberg_job_spec(
                "extract",
                self.iceberg_catalog,
                args,
                name=f"cdc-extract-{window.stream_id}-{format_ts(window.start)}",
                conf=self.job_conf(context),
                py_files=self.source_py_files(),
            )
            try:
                self.run_job(spec, store, window, owner)
            except SparkJobError as error:
                raise with_rerun_hint(error, window) from None
        result = json.loads(result_path.read_text())
        if result.get("snapshot_id") is None:
            raise AirflowFailException(
                f"extract of window {window.window_id} found its changelog commit but not its "
                f"snapshot (expired?): the outcome cannot be proven; reset the stream"
            )
        store.mark_extracted(window, owner, int(result["snapshot_id"]))
        report_step(context, store, window, "extract")
        summary = {
            "window_id": window.window_id,
            "changelog_snapshot_id": int(result["snapshot_id"]),
            "skipped": bool(result.get("skipped")),
            **result.get("counts", {}),
        }
        mirror_task_progress(context, "extract", summary)
        return summary


def with_rerun_hint(error, window: Window):
    """``error`` (a failed extract job's SparkJobError, same type and fields) with what it left:
    the window stays PLANNED and is read again by a re-run, which writes each change once (I1).

    The job may have died anywhere (a killed driver writes no error line): before its
    changelog commit nothing of the window is kept; after it, the re-run finds the commit
    tagged with the window and writes nothing, so a re-run is always safe.
    """
    error.args = (
        f"{error}\nwindow {window.window_id} of {window.stream_id!r} stays PLANNED: its extract "
        f"recorded nothing in the state store. Re-run it: the task's retries do, or clear this "
        f"extract task (its downstream tasks follow); a changelog commit the job made before it "
        f"ended is found by its window tag and not written twice.",
    )
    return error


class CdcCommitWindowOperator(CdcWindowOperator):
    """Step 3: record the extract's partition outcomes in one state-store transaction.

    The summary adds the source's own counts (:attr:`~airflow_cdc.sources.base.ChangeSource.
    summary_counts`), and the source's warnings about them are logged.
    """

    def execute(self, context) -> dict:
        window = self.window(context)
        store = self.state_store()
        record = commit_window(
            store, self.stream_config, window, run_owner(context), self.lease_seconds
        )
        log_partition_progress(self.log, store, window)
        report_step(context, store, window, "commit", record)
        source = self.change_source()
        counts = dict(record.counts or {})
        for warning in source.commit_warnings(counts):
            self.log.warning("window %s: %s", window.window_id, warning)
        summary = {**window_summary(record), **{k: counts.get(k) for k in source.summary_counts}}
        mirror_task_progress(context, "commit", summary)
        return summary


def log_partition_progress(log, store, window: Window) -> None:
    """One line per partition the window read: records, watermark, lag behind the window end."""
    rows = store.window_partitions(window)
    log.info("window %s read %d partition(s):", window.window_id, len(rows))
    for row in sorted(rows, key=lambda r: (r.watermark or r.start, r.partition_id)):
        watermark = row.watermark or row.start
        lag = max(0.0, (window.end - watermark).total_seconds())
        log.info(
            "  partition %s: %s records, watermark %s, lag %.3fs%s",
            row.partition_id[:48], row.records if row.records is not None else "?",
            format_ts(watermark), lag, ", finished" if row.finished else "",
        )


class CdcApplyOperator(CdcSparkOperator):
    """Step 4: fold the window's changelog rows into current-state Iceberg tables.

    ``targets`` is the apply job's ``targets`` object: ``namespace`` for target tables,
    ``mapping`` from source table to target name, ``history`` (SCD type 2, off by default),
    ``write_mode`` (``copy-on-write``, the default, or ``merge-on-read``: a window's changes
    as delete files beside the rows, for small windows against large targets; apply compacts
    a table once it holds ``compact_delete_files`` delete files, default 32, 0 never).
    ``on_dead_letter`` is ``fail`` (the default: the window fails and names the bad rows) or
    ``continue``; ``tombstone_horizon_seconds`` bounds how long deletes are remembered (I3).
    Windows apply in order: the job runs only once every earlier window of the stream is
    applied (:func:`~airflow_cdc.pipeline.protocol.require_earlier_windows_applied`).
    """

    def __init__(
        self,
        *,
        targets: Mapping[str, Any] | None = None,
        on_dead_letter: str = "fail",
        tombstone_horizon_seconds: int = 7 * 24 * 3600,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.targets = dict(targets or {})
        self.on_dead_letter = on_dead_letter
        self.tombstone_horizon_seconds = int(tombstone_horizon_seconds)
        self._applied_tables: list[str] = []

    @property
    def settings(self) -> ApplySettings:
        return ApplySettings(self.targets, self.on_dead_letter, self.tombstone_horizon_seconds)

    def apply_config(self, window: Window) -> dict:
        return self.settings.job_config(self.stream_config, self.iceberg_catalog.name, window)

    def execute(self, context) -> dict:
        config = self.stream_config
        window = self.window(context)
        owner = run_owner(context)
        store = self.state_store()
        record = store.get_window(window.stream_id, window.start)
        if record is None or not record.committed:
            state = "never planned" if record is None else record.state.value
            raise AirflowFailException(
                f"window {window.window_id} of {window.stream_id} is {state}: apply runs after "
                f"commit; clear the window's commit task"
            )
        if record.state is WindowState.COMPLETE:
            self.log.info("window %s is already COMPLETE: nothing to apply", window.window_id)
            return {**window_summary(record), "skipped": True}
        if record.state is WindowState.COMMITTED:
            require_earlier_windows_applied(store, window)
        store.renew_lease(window, owner, self.lease_seconds)
        folder = config.window_dir(window)
        if record.changelog_snapshot_id is None:
            # The empty-window rule (pipeline/empty_window.py): no changelog commit, nothing to fold.
            self.log.info("window %s is empty: nothing to apply, no Spark job", window.window_id)
            result = {"tables": [], "dead_letter_rows": 0}
        else:
            result = (fused_apply_result(folder, record.changelog_snapshot_id, self.log)
                      or self._run_apply_job(context, store, window, owner, folder))
        crash_point("apply.before_state_update")
        warn_failed_compactions(self.log, window.window_id, result)
        snapshot_ids = {
            table["target_table"]: int(table["target_snapshot_id"])
            for table in result.get("tables", [])
            if table.get("target_table") and table.get("target_snapshot_id") is not None
        }
        record = store.mark_applied(window, owner, snapshot_ids)
        report_step(context, store, window, "apply", record,
                    {"dead_letter_rows": result.get("dead_letter_rows", 0)})
        self._applied_tables = sorted(snapshot_ids)
        summary = {
            **window_summary(record),
            "dead_letter_rows": result.get("dead_letter_rows", 0),
            "tables": {
                t["source_table"]: {k: t[k] for k in ("changes", "upserts", "deletes")}
                for t in result.get("tables", [])
                if t.get("source_table")
            },
        }
        mirror_task_progress(context, "apply", summary)
        return summary

    def _run_apply_job(self, context, store, window: Window, owner: str, folder) -> dict:
        """The apply Spark job (``spark_jobs/apply_job.py``); its result."""
        from airflow_cdc.pipeline.files import write_private
        from airflow_cdc.spark.job import SparkJobError, iceberg_job_spec

        config_path, result_path = folder / "apply.json", folder / "apply-result.json"
        write_private(config_path, json.dumps(self.apply_config(window), indent=1))
        spec = iceberg_job_spec(
            "apply_job",
            self.iceberg_catalog,
            ["--job-config", str(config_path), "--result", str(result_path)],
            name=f"cdc-apply-{window.stream_id}-{format_ts(window.start)}",
            conf=self.job_conf(context),
        )
        try:
            self.run_job(spec, store, window, owner)
        except SparkJobError as error:
            result = json.loads(result_path.read_text()) if result_path.exists() else {}
            if result.get("status") == "failed":  # the dead-letter policy: a retry cannot help
                raise AirflowFailException(
                    f"apply of window {window.window_id} failed: "
                    f"{result.get('dead_letter_rows')} change rows went to the dead-letter "
                    f"table {result.get('dead_letter_table')} under on_dead_letter='fail'\n{error}"
                )
            raise  # a lost driver, a failed commit: the task's retries run the job again (I1)
        return json.loads(result_path.read_text())

    def get_openlineage_facets_on_complete(self, task_instance):
        """Lineage: the changelog in, the target tables apply committed out.

        Targets are known once apply ran (a change stream may cover any table); before that,
        or for a skipped re-run, the declared ``targets.mapping`` is all there is.
        """
        from airflow_cdc.assets import iceberg_datasets, operator_lineage, target_tables

        tables = self._applied_tables or [
            f"{ns}.{name}" for ns, name in target_tables(self.targets, None)
        ]
        outputs = iceberg_datasets(
            self.iceberg_catalog, tables, self.targets.get("namespace", "current")
        )
        return operator_lineage(self.changelog_dataset(), outputs)
