"""Steps 0 and 1 as an Airflow task: wait until the window can be read, then plan it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.common.compat.sdk import AirflowException

from airflow_cdc.metrics import report_step
from airflow_cdc.model import Window, format_ts
from airflow_cdc.operators.base import CdcWindowOperator
from airflow_cdc.operators.task_context import (
    default_deferrable,
    previous_run_task,
    run_owner,
    schedule_of,
)
from airflow_cdc.pipeline.catchup import (
    DEFAULT_MAX_CATCHUP,
    CatchupLimit,
    covered_summary,
    following_intervals,
)
from airflow_cdc.pipeline.plan_step import (
    next_ask_in,
    plan_step,
    plan_summary,
    previous_interval_order,
    wait_deadline,
    wait_timed_out_message,
)
from airflow_cdc.pipeline.protocol import planning_readiness

# How long the plan waits for a source's evidence by default: six hours.
DEFAULT_WAIT_TIMEOUT = 6 * 3600


class CdcPlanOperator(CdcWindowOperator):
    """Steps 0 and 1: wait until the window can be read, then plan it.

    A source whose evidence for ``[s, e)`` exists only some time after ``e``
    (:meth:`~airflow_cdc.sources.base.ChangeSource.evidence_delay`: Datastream's lateness)
    is asked (:meth:`~airflow_cdc.sources.base.ChangeSource.readiness`) until it says the
    window can be read, deferred to :class:`~airflow_cdc.triggers.ready.CdcWindowReadyTrigger`
    (the worker slot is freed) or, with ``deferrable=False``, polling in the task. A wait that
    outlasts ``wait_timeout`` fails the task naming the source's reason; the window stays
    unplanned and nothing is skipped. A window also waits for the plan of the interval before
    it when that one is still unplanned
    (:func:`~airflow_cdc.pipeline.plan_step.previous_interval_order`). Then the window is
    planned (:func:`~airflow_cdc.pipeline.plan_step.plan_step`): its partitions (the
    stream's first window: the source's initial ones; partitions the source discovered are
    added) and the source's plan options go into the state store and the plan file.

    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``).
    :param wait_poke_interval: seconds between two questions to the source.
    :param wait_timeout: seconds after which the wait fails the task.
    :param max_catchup: how far one window may reach past its own interval when the stream
        is behind: a ``timedelta`` (the longest window), an ``int`` (the most intervals one
        window reads) or None (one interval per window); see
        :mod:`airflow_cdc.pipeline.catchup`.
    :param skip_when_covered: task ids this task skips when its interval is covered by an
        earlier run's catch-up window (the pipelines pass extract, commit and apply).

    The other parameters are :class:`~airflow_cdc.operators.base.CdcWindowOperator`'s.
    """

    def __init__(
        self,
        *,
        deferrable: bool | None = None,
        wait_poke_interval: float = 30,
        wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
        max_catchup: Any = DEFAULT_MAX_CATCHUP,
        skip_when_covered: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.catchup_limit = CatchupLimit.parse(max_catchup)
        self.skip_when_covered = tuple(skip_when_covered)
        self.deferrable = default_deferrable() if deferrable is None else bool(deferrable)
        self.wait_poke_interval = float(wait_poke_interval)
        self.wait_timeout = float(wait_timeout)

    def readiness_probe(self, context) -> tuple[str, dict]:
        """``("module:Class", kwargs)`` of the window's readiness probe: the protocol's own
        rule (the previous window still running: wait), then the source's."""
        from airflow_cdc.triggers.ready import SourceWindowProbe

        window = self.interval(context)
        return (
            f"{SourceWindowProbe.__module__}:{SourceWindowProbe.__qualname__}",
            {
                "source_spec": self.source_spec,
                "window_start": format_ts(window.start),
                "window_end": format_ts(window.end),
                "cdc_state_conn_id": self.cdc_state_conn_id,
                "source_conn": dict(self.source_conn),
            },
        )

    def plan(self, context, decided: dict | None = None) -> dict:
        """Plan the run's window; ``decided`` are plan options the readiness answer gave.

        An interval an earlier run's catch-up window covers is recorded, not planned
        (:meth:`record_covered`). A first plan extends the window over the following intervals
        of the DAG's schedule that are ready, up to ``max_catchup``.
        """
        store = self.state_store()
        run = self.run_window(context, store)
        if run.covered:
            return self.record_covered(context, store, run)
        interval = run.interval
        source = self.change_source()
        following = () if run.planned else self.following_intervals(context, interval)
        plan, found = plan_step(
            store, self.stream_config, interval, run_owner(context), self.lease_seconds,
            source=source, hook=self.source_hook(source), catalog_name=self.iceberg_catalog.name,
            decided=decided, following=following,
            guard=lambda call: self.open_window(context, store, interval, call),
        )
        window = plan.window
        if window.end > interval.end:
            self.log.info("catch-up window %s reads the intervals up to %s with this run's",
                          window.window_id, format_ts(window.end))
        report_step(context, store, window, "plan")
        return plan_summary(window, plan, found, source)

    def following_intervals(self, context, interval: Window) -> list:
        """The ends of the intervals after the run's that its window may cover now."""
        if not self.catchup_limit.enabled:
            return []
        next_interval = schedule_of(context)
        if next_interval is None:
            return []
        return following_intervals(interval, next_interval, datetime.now(timezone.utc),
                                   self.catchup_limit)

    def record_covered(self, context, store, run) -> dict:
        """The run of an interval an earlier catch-up window read: record it, skip the steps
        that would read, commit and apply it (that window's run does), and let the gate wait
        for that window."""
        from airflow.providers.common.compat.sdk import DownstreamTasksSkipped

        record = store.record_covered_interval(run.interval)
        summary = covered_summary(run)
        self.log.info("interval %s is read by the catch-up window %s (recorded %s)",
                      run.interval.window_id, record.window.window_id,
                      format_ts(record.recorded_at))
        if not self.skip_when_covered:
            return summary
        context["ti"].xcom_push(key="return_value", value=summary)
        raise DownstreamTasksSkipped(tasks=list(self.skip_when_covered))

    def execute(self, context) -> dict:
        """Ask the source until the window can be read (deferring, or polling here), then plan."""
        from airflow_cdc.triggers.ready import load_probe

        named = self.readiness_probe(context)
        window = self.interval(context)
        probe = load_probe(*named)
        started = datetime.now(timezone.utc)
        deadline = wait_deadline(started, self.wait_timeout)
        status = self._ordered(context, window, probe.check(started))
        while not status.ready:
            now = datetime.now(timezone.utc)
            if now >= deadline:
                self._wait_timed_out(window, status.reason)
            if self.deferrable:
                self._defer_wait(window, named, deadline, status.reason)
            self.log.info("window %s waits: %s", window.window_id, status.reason)
            time.sleep(next_ask_in(status, now, deadline, self.wait_poke_interval))
            status = self._ordered(context, window, probe.check(datetime.now(timezone.utc)))
        self.log.info("window %s can be planned: %s", window.window_id, status.reason)
        return self.plan(context, status.options)

    def _defer_wait(self, window: Window, named: tuple[str, dict], deadline: datetime,
                    reason: str | None) -> None:
        from airflow_cdc.triggers.ready import CdcWindowReadyTrigger

        self.log.info("window %s waits in the triggerer: %s", window.window_id, reason)
        self.defer(
            trigger=CdcWindowReadyTrigger(
                probe=named[0],
                probe_kwargs=named[1],
                window_id=window.window_id,
                poll_interval=self.wait_poke_interval,
                deadline=format_ts(deadline),
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.wait_timeout) + timedelta(minutes=5),
        )

    def execute_complete(self, context, event: dict | None = None) -> dict:
        """Resume after the wait: plan on ``ready``, fail naming the reason otherwise."""
        event = event or {}
        window = self.interval(context)
        if event.get("status") == "timeout":
            self._wait_timed_out(window, event.get("reason"))
        if event.get("status") != "ready":
            raise AirflowException(
                event.get("message") or f"window {window.window_id}: unknown wait event {event!r}"
            )
        # The trigger's answer may be older than the state store: the interval before may have
        # been planned since (its window still running), or still be unplanned. Either waits.
        waiting = self._ordered(context, window, planning_readiness(self.state_store(), window))
        if waiting is not None and not waiting.ready:
            # The source is ready but an earlier interval's window still runs or is unplanned:
            # wait for it here, then ask the probe again from the start.
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

    # A task deferred under this name resumes into the same method.
    execute_ready = execute_complete

    def execute_again(self, context, event: dict | None = None) -> dict:
        """Resume after waiting on an earlier interval's plan: wait for the window as at first."""
        return self.execute(context)

    def _ordered(self, context, window: Window, status):
        """``status``, held back while the window waits for the plan of the interval before it."""
        return previous_interval_order(self.state_store(), window, self.task_id,
                                  lambda: previous_run_task(context), status)

    def _wait_timed_out(self, window: Window, reason: str | None) -> None:
        from airflow.providers.common.compat.sdk import AirflowSensorTimeout

        raise AirflowSensorTimeout(wait_timed_out_message(window, self.wait_timeout, reason))
