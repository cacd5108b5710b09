"""The completeness gate: a window opens only when progress evidence covers all of it (I4).

It waits until apply committed and every partition live in the window reported progress at
or beyond the window end (heartbeats, records, or a bounded read that returned normally).
While closed, it logs why: which partitions hold the low watermark back, and since when.

Two ways to wait, one rule (:func:`airflow_cdc.pipeline.protocol.gate_status`):

* poke mode (the default unless ``[operators] default_deferrable`` is on): the worker slot
  polls every ``poke_interval``;
* ``deferrable=True``: the task checks once and, when the window is not yet complete, defers
  to :class:`CdcWindowCompleteTrigger`, which polls in the triggerer and frees the worker
  slot. Checking first keeps a window that is already complete (the usual case: the gate
  runs after apply) off Airflow's defer-and-resume path, where a trigger that fires at once
  can lose the task to a scheduler race (apache/airflow#72716). ``timeout`` and ``soft_fail`` behave as in Airflow's
  own sensors: a timeout fails the task with AirflowSensorTimeout (skips it with soft_fail),
  naming the partitions that held the window back.

When the gate opens it marks the window COMPLETE, pushes the window summary to XCom
(``window_summary``), and emits one event per outlet (the pipeline's Iceberg tables) with the
window and the run's interval as extra; with ``asset_partitions`` the interval is also the
event's partition key (:func:`~airflow_cdc.pipeline.catchup.interval_partition_key`). The gate of an interval an earlier
run's catch-up window read (:mod:`airflow_cdc.pipeline.catchup`) opens when that window is
COMPLETE and emits its own interval's events, so every interval has one. On Airflow >= 3.3 it also mirrors the low watermark into each outlet's
``asset_state_store`` and the window's progress into ``task_state_store``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowSensorTimeout,
    BaseSensorOperator,
)

from airflow_cdc.faults import crash_point
from airflow_cdc.hooks.state import DEFAULT_CONN_ID, CdcStateHook
from airflow_cdc.metrics import report_step
from airflow_cdc.operators.task_context import (
    default_deferrable,
    mirror_task_progress,
    window_from_context,
    window_summary,
)
from airflow_cdc.model import format_ts
from airflow_cdc.pipeline.catchup import covering_fields, interval_partition_key, run_window
from airflow_cdc.pipeline.protocol import gate_status

# The deferral's own timeout is a backstop behind the trigger's deadline: the trigger fires
# first and names the lagging partitions; Airflow's timeout only catches a lost triggerer.
_DEFERRAL_BACKSTOP = timedelta(minutes=5)


def asset_event_extra(summary: dict) -> dict:
    """The extra of the gate's asset events: what a downstream consumer needs of the window."""
    return {
        "stream": summary["stream"],
        "window_start": summary["window_start"],
        "window_end": summary["window_end"],
        "low_watermark": summary["low_watermark"],
        "changes": summary["changes"],
        "changelog_snapshot_id": summary["changelog_snapshot_id"],
        "target_snapshot_ids": dict(summary["target_snapshot_ids"]),
    }


class CdcWindowCompleteSensor(BaseSensorOperator):
    """Succeeds when the DAG run's window of ``stream_id`` is proven complete.

    ``source`` (a source kind or ``module:Class``; the pipelines pass the stream's) gives the
    gate its rule (:meth:`~airflow_cdc.sources.base.ChangeSource.covers`) and says when a
    window was declared complete rather than proven (:meth:`~airflow_cdc.sources.base.
    ChangeSource.completeness_note`); without it, the base rule.

    :param stream_id: the stream whose window (the DAG run's data interval) is gated. Templated.
    :param source: the stream's source kind or ``module:Class`` (None: the base rule).
    :param cdc_state_conn_id: the state store's connection.
    :param deferrable: wait in the triggerer (:class:`~airflow_cdc.triggers.gate.
        CdcWindowCompleteTrigger`) instead of a worker slot; default ``[operators]
        default_deferrable``.
    :param asset_partitions: emit the events with the run's interval as partition key
        (:func:`~airflow_cdc.pipeline.catchup.interval_partition_key`), for consumers
        scheduled with ``PartitionedAssetTimetable``. Airflow (3.2 and later) queues a keyed
        event only for partition-aware DAGs and an unkeyed one only for the others, so this
        is a choice per pipeline; default off (the events schedule ``schedule=[asset]`` DAGs).

    ``poke_interval`` (default 30 s), ``timeout`` (default six hours), ``soft_fail`` and the
    other arguments are ``BaseSensorOperator``'s.
    """

    template_fields = ("stream_id",)
    ui_color = "#d4f7dc"

    def __init__(
        self,
        *,
        stream_id: str,
        source: str | None = None,
        cdc_state_conn_id: str = DEFAULT_CONN_ID,
        deferrable: bool | None = None,
        asset_partitions: bool = False,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", 30)
        kwargs.setdefault("timeout", 6 * 3600)
        super().__init__(**kwargs)
        self.source = source
        self.stream_id = stream_id
        self.cdc_state_conn_id = cdc_state_conn_id
        self.deferrable = default_deferrable() if deferrable is None else bool(deferrable)
        self.asset_partitions = bool(asset_partitions)
        self._last_reason: str | None = None

    # --- poke mode ----------------------------------------------------------------------------
    def execute(self, context) -> Any:
        if not self.deferrable:
            try:
                return super().execute(context)
            except AirflowSensorTimeout as error:
                raise AirflowSensorTimeout(
                    f"{error}\nwindow of stream {self.stream_id!r} stayed closed: "
                    f"{self._last_reason}"
                ) from error
        store = CdcStateHook(cdc_state_conn_id=self.cdc_state_conn_id).get_store()
        window = window_from_context(self.stream_id, context)
        status = gate_status(store, window, self._covers())
        if status.open:
            return self._complete(context, store, window, status.reason, polls=0)
        self.log.info("window %s is not complete yet: %s", window.window_id, status.reason)
        self._defer(context)

    def poke(self, context) -> bool:
        store = CdcStateHook(cdc_state_conn_id=self.cdc_state_conn_id).get_store()
        window = window_from_context(self.stream_id, context)
        status = gate_status(store, window, self._covers())
        if not status.open:
            if status.reason != self._last_reason:
                self.log.info("window %s stays closed: %s", window.window_id, status.reason)
                self._last_reason = status.reason
            return False
        self._complete(context, store, window, status.reason)
        return True

    # --- deferred mode ------------------------------------------------------------------------
    def _defer(self, context) -> None:
        from airflow_cdc.model import format_ts
        from airflow_cdc.triggers.gate import CdcWindowCompleteTrigger

        window = window_from_context(self.stream_id, context)
        deadline = datetime.now(timezone.utc) + timedelta(seconds=self.timeout)
        self.log.info(
            "deferring the gate of window %s to the triggerer (poll every %ss, until %s)",
            window.window_id, self.poke_interval, format_ts(deadline),
        )
        self.defer(
            trigger=CdcWindowCompleteTrigger(
                stream_id=self.stream_id,
                window_start=format_ts(window.start),
                window_end=format_ts(window.end),
                cdc_state_conn_id=self.cdc_state_conn_id,
                poll_interval=self.poke_interval,
                deadline=format_ts(deadline),
                source=self.source,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) + _DEFERRAL_BACKSTOP,
        )

    def execute_complete(self, context, event: dict | None = None) -> None:
        """Resume after the trigger fired: open, timed out, or could not read the store."""
        from airflow_cdc.triggers.gate import describe_lagging

        event = event or {}
        status = event.get("status")
        window = window_from_context(self.stream_id, context)
        if status == "timeout":
            # AirflowSensorTimeout: resume_execution turns it into a skip under soft_fail.
            more = event.get("lagging_count", 0) - len(event.get("lagging", []))
            raise AirflowSensorTimeout(
                f"window {window.window_id} of {self.stream_id!r} stayed closed for the "
                f"sensor's timeout of {self.timeout}s: {event.get('reason')}\n"
                f"{describe_lagging(event.get('lagging', []))}"
                + (f"\n  ... and {more} more" if more > 0 else "")
                + "\nFix the source or raise the gate's timeout; the window is not skipped."
            )
        if status != "open":
            raise AirflowException(
                event.get("message")
                or f"gate of window {window.window_id} resumed with an unknown event {event!r}"
            )
        store = CdcStateHook(cdc_state_conn_id=self.cdc_state_conn_id).get_store()
        # The trigger saw the gate open; the rule is checked again here, where the window is
        # marked COMPLETE, so a trigger that fired twice or late cannot complete a window the
        # state store no longer proves complete.
        gate = gate_status(store, window, self._covers())
        if not gate.open:
            raise AirflowException(
                f"window {window.window_id}: the trigger reported it complete but the state "
                f"store now says: {gate.reason}. Clear the gate task to wait again."
            )
        self._complete(context, store, window, gate.reason, polls=event.get("polls"))

    # --- both ---------------------------------------------------------------------------------
    def _source_class(self):
        from airflow_cdc.sources.base import ChangeSource
        from airflow_cdc.sources.registry import source_class

        return source_class(self.source) if self.source else ChangeSource

    def _covers(self):
        return self._source_class().covers

    def completeness(self, store, window, reason: str) -> tuple[str, dict]:
        """The note recorded with the window, and the ``completeness`` field added to its
        summary and Asset extra: ``evidence``, or the source's label when the source declared
        the window complete (Datastream: ``idle-timeout``)."""
        record = store.get_window(window.stream_id, window.start)
        declared = self._source_class().completeness_note((record.counts or {}) if record else {})
        if declared is None:
            return reason, {"completeness": "evidence"}
        label, explanation = declared
        return f"{label}: {explanation}; {reason}", {"completeness": label}

    def _complete(self, context, store, interval, reason: str, polls: int | None = None) -> dict:
        """Record the window COMPLETE (a covered interval's window already is) and emit the
        run's events: one per outlet, with the interval's partition key and the window's
        extra."""
        run = run_window(store, interval)
        if run.covered:
            record = store.get_window(run.window.stream_id, run.window.start)
            note, fields = reason, {"completeness": "covered", **covering_fields(run)}
        else:
            note, fields = self.completeness(store, run.window, reason)
            record = store.mark_complete(run.window, completeness_note=note)
            report_step(context, store, run.window, "gate", record)
        counts = record.counts or {}
        own = {k: counts.get(k) for k in self._source_class().summary_counts}
        key = interval_partition_key(interval)
        intervals = {"interval_start": format_ts(interval.start),
                     "interval_end": format_ts(interval.end), "partition_key": key}
        summary = {**window_summary(record), **own, **fields, **intervals}
        context["ti"].xcom_push(key="window_summary", value=summary)
        extra = {**asset_event_extra(window_summary(record)), **fields, **intervals}
        outlet_events = context.get("outlet_events")
        for asset in self.asset_outlets:
            if outlet_events is not None:
                event = outlet_events[asset]
                event.extra = dict(extra)
                if self.asset_partitions and hasattr(event, "add_partitions"):  # Airflow >= 3.2
                    event.add_partitions(key)
        mirror_task_progress(context, "gate", {**summary, "deferred_polls": polls})
        mirror_asset_watermark(context, self.asset_outlets, summary, log=self.log)
        if run.covered:
            self.log.info("interval %s is complete: %s", interval.window_id, note)
        else:
            self.log.info("window %s is complete: %s", record.window.window_id, note)
        crash_point("gate.after_asset_event")
        return summary

    @property
    def asset_outlets(self) -> list:
        from airflow.sdk import Asset

        return [outlet for outlet in (self.outlets or []) if isinstance(outlet, Asset)]


def mirror_asset_watermark(context, assets, summary: dict, log=None) -> None:
    """Airflow >= 3.3: each asset's state store shows how far its stream is complete.

    A mirror for visibility only (the state store stays authoritative), so a failure to
    write it is logged, not raised.
    """
    accessors = context.get("asset_state_store")
    if accessors is None or not summary.get("low_watermark"):
        return
    for asset in assets:
        try:
            accessor = accessors[asset]
            accessor.set("low_watermark", summary["low_watermark"])
            accessor.set(
                "last_window",
                {
                    "stream": summary["stream"],
                    "window_start": summary["window_start"],
                    "window_end": summary["window_end"],
                },
            )
        except Exception as error:  # a mirror: never fail the gate for it
            if log is not None:
                log.warning("could not mirror the low watermark into asset %s: %s",
                            asset.name, error)
