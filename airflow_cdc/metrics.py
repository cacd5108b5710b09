"""What each step of the window protocol reports once it succeeded: its timing, into the state
store (the CDC view and ``airflow-cdc lag-chart`` show it), and the window's metrics, through
Airflow's own Stats, so they go wherever the deployment sends Airflow's metrics (StatsD,
Datadog's DogStatsD or OpenTelemetry: ``[metrics]`` in airflow.cfg).

Every name starts with :data:`PREFIX` and ends with the stream id (an identifier, so a valid
StatsD name); tag-aware backends also get ``stream`` (and ``step``) as tags. StatsD adds its
own ``[metrics] statsd_prefix`` in front (``airflow.`` by default)::

    airflow_cdc.window.committed.<stream>       counter  commit: a window committed
    airflow_cdc.window.changes.<stream>         counter  commit: its change rows
    airflow_cdc.window.dead_letters.<stream>    counter  commit (extract's bad rows) and
                                                         apply (rows apply could not write)
    airflow_cdc.window.lag.<stream>             gauge    commit: seconds its low watermark
                                                         trails its end
    airflow_cdc.window.completed.<stream>       counter  gate: a window became COMPLETE
    airflow_cdc.window.duration.<stream>        timer    gate: plan start to gate open
    airflow_cdc.stream.freshness.<stream>       gauge    gate: seconds from the end of the
                                                         window just completed to now
    airflow_cdc.partitions.live.<stream>        gauge    commit, gate: live partitions
    airflow_cdc.partitions.lagging.<stream>     gauge    commit, gate: live partitions whose
                                                         watermark is before the window's end
    airflow_cdc.step.duration.<step>.<stream>   timer    every step (plan, extract, commit,
                                                         apply, gate): the task's run time

Reporting never fails a step: the data step succeeded; a report that cannot be written is
logged as a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

PREFIX = "airflow_cdc"
log = logging.getLogger(__name__)


def stats():
    """Airflow's Stats (``airflow.sdk.observability.stats`` from 3.3, ``airflow.stats`` before)."""
    try:
        from airflow.sdk.observability.stats import Stats
    except ImportError:  # Airflow < 3.3
        from airflow.stats import Stats
    return Stats


def metric(name: str, stream_id: str) -> str:
    """``airflow_cdc.<name>.<stream>``."""
    return f"{PREFIX}.{name}.{stream_id}"


def task_start(context: Mapping[str, Any] | None) -> datetime | None:
    """When the task instance running the step started (None outside a task)."""
    ti = (context or {}).get("ti")
    started = getattr(ti, "start_date", None)
    if started is None:
        return None
    return started if started.tzinfo else started.replace(tzinfo=timezone.utc)


def report_step(
    context: Mapping[str, Any] | None,
    store,
    window,
    step: str,
    record=None,
    details: Mapping[str, Any] | None = None,
) -> None:
    """Record ``step`` of ``window`` as done now and emit its metrics; never raises.

    ``record`` is the window's record after the step (commit, apply, gate use it);
    ``details`` what the step found (apply: ``dead_letter_rows``).
    """
    finished = datetime.now(timezone.utc)
    started = task_start(context) or finished
    started = min(started, finished)
    details = dict(details or {})
    try:
        store.record_step(window, step, started, finished, details)
    except Exception as error:  # noqa: BLE001 - a report, never a reason to fail the step
        log.warning("could not record the %s step of window %s in the state store: %s",
                    step, window.window_id, error)
    try:
        emit_step_metrics(store, window, step, record, started, finished, details)
    except Exception as error:  # noqa: BLE001
        log.warning("could not emit the %s metrics of window %s: %s", step, window.window_id, error)


def emit_step_metrics(store, window, step: str, record, started: datetime, finished: datetime,
                      details: Mapping[str, Any]) -> None:
    """The metrics of one step (see the module's table)."""
    s = stats()
    stream = window.stream_id
    tags = {"stream": stream}
    s.timing(f"{PREFIX}.step.duration.{step}.{stream}", finished - started,
             tags={**tags, "step": step})
    if step == "commit" and record is not None:
        counts = record.counts or {}
        s.incr(metric("window.committed", stream), tags=tags)
        s.incr(metric("window.changes", stream), int(counts.get("changes") or 0), tags=tags)
        dead = int(counts.get("dead_letters") or 0)
        if dead:
            s.incr(metric("window.dead_letters", stream), dead, tags=tags)
        if record.low_watermark is not None:
            lag = max(0.0, (window.end - record.low_watermark).total_seconds())
            s.gauge(metric("window.lag", stream), lag, tags=tags)
        _partition_gauges(s, store, window, tags)
    elif step == "apply":
        dead = int(details.get("dead_letter_rows") or 0)
        if dead:
            s.incr(metric("window.dead_letters", stream), dead, tags=tags)
    elif step == "gate":
        s.incr(metric("window.completed", stream), tags=tags)
        planned = store.window_steps(stream, [window.start]).get(window.start, {}).get("plan")
        began = planned.started_at if planned else (record.created_at if record else started)
        s.timing(metric("window.duration", stream), max(timedelta(0), finished - began), tags=tags)
        s.gauge(metric("stream.freshness", stream),
                max(0.0, (finished - window.end).total_seconds()), tags=tags)
        _partition_gauges(s, store, window, tags)


def _partition_gauges(s, store, window, tags: dict) -> None:
    live, lagging = store.count_live_partitions(window.stream_id, behind=window.end)
    s.gauge(metric("partitions.live", window.stream_id), live, tags=tags)
    s.gauge(metric("partitions.lagging", window.stream_id), lagging, tags=tags)
