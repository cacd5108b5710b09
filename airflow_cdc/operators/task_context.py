"""What every CDC task, operator or sensor, takes from its Airflow run and gives back to it.

The DAG run's window (from its data interval) and lease owner, what Airflow says of a lease
holder's run and of this task in the previous run, the window's small XCom summary, the
progress mirror in ``task_state_store``, and whether a task defers by default. The protocol's operators and its gate sensor share these, so they
live below both: a sensor is an operator to Airflow (``BaseSensorOperator`` extends
``BaseOperator``), and this module is the part of ``operators/`` that sensors may import.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow.providers.common.compat.sdk import AirflowFailException, conf

from airflow_cdc.model import Window, ZeroWidthWindowError, ensure_utc, format_ts

# Airflow DAG run states after which a run can no longer act on its window.
FINISHED_RUN_STATES = frozenset({"success", "failed"})
# What :func:`holder_run_state` says of a run its DAG no longer has (deleted).
GONE_RUN = "deleted"


def window_from_context(stream_id: str, context: Mapping[str, Any]) -> Window:
    """The DAG run's window; a zero-width data interval is refused with the fix."""
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None:
        raise AirflowFailException(
            f"stream {stream_id!r}: this DAG run has no data interval; CDC pipelines need one: "
            f"schedule the DAG with CronDataIntervalTimetable or DeltaDataIntervalTimetable"
        )
    try:
        return Window(stream_id, start, end)
    except ZeroWidthWindowError as error:
        raise AirflowFailException(str(error)) from error


def run_owner(context: Mapping[str, Any]) -> str:
    """The lease owner: one DAG run."""
    return f"{context['dag'].dag_id}/{context['run_id']}"


def holder_run_state(context: Mapping[str, Any], owner: str | None) -> str | None:
    """What Airflow says of the DAG run ``owner`` (``dag_id/run_id``, see :func:`run_owner`).

    The run's state (``running``, ``success``, ``failed`` ...), :data:`GONE_RUN` when the DAG is
    known but has no such run (``airflow dags test`` deletes the earlier run of its date, a run
    deleted in the UI), or None when Airflow cannot say (no task instance, another Airflow,
    a DAG this Airflow does not know). Asked through the Task SDK: tasks never read Airflow's
    database.
    """
    if not owner or "/" not in owner or context.get("ti") is None:
        return None
    ti = context["ti"]
    dag_id, run_id = owner.split("/", 1)
    try:
        state = ti.get_dagrun_state(dag_id=dag_id, run_id=run_id)
        return str(getattr(state, "value", state)).lower()
    except Exception:  # noqa: BLE001 - no such run, or no answer: asked below
        pass
    try:
        ti.get_dag(dag_id)  # raises for a DAG this Airflow does not know
        if ti.get_dr_count(dag_id=dag_id, run_ids=[run_id]) == 0:
            return GONE_RUN
    except Exception:  # noqa: BLE001 - unknown means "maybe running": keep the lease
        return None
    return None


@dataclass(frozen=True)
class PreviousRunTask:
    """This task in the DAG run before this one: the run's id and data interval, and the
    task's state there (``success``, ``failed``, ``running`` ...; None when it has none)."""

    run_id: str
    start: datetime
    end: datetime
    state: str | None


def previous_run_task(context: Mapping[str, Any]) -> PreviousRunTask | None:
    """This task in the DAG's previous run (by logical date), or None when there is no such
    run, the run has no such task (a task added since) or Airflow cannot say (no task
    instance, a run without a logical date). Asked through the Task SDK: tasks never read
    Airflow's database."""
    ti = context.get("ti")
    if ti is None:
        return None
    try:
        previous = ti.get_previous_dagrun()
        if previous is None or previous.data_interval_end is None:
            return None
        states = ti.get_task_states(dag_id=previous.dag_id, run_ids=[previous.run_id],
                                    task_ids=[ti.task_id])
    except Exception:  # noqa: BLE001 - no answer: the state store's own order rules still hold
        return None
    in_run = (states or {}).get(previous.run_id) or {}
    if ti.task_id not in in_run:
        return None
    state = in_run[ti.task_id]
    return PreviousRunTask(
        run_id=previous.run_id,
        start=previous.data_interval_start,
        end=previous.data_interval_end,
        state=None if state is None else str(getattr(state, "value", state)).lower(),
    )


def mirror_task_progress(context: Mapping[str, Any], step: str, progress: Mapping) -> None:
    """Airflow >= 3.3: the step's window progress in ``task_state_store`` (key ``cdc_<step>``).

    A mirror for the UI and API only: the state store stays authoritative (task state is
    per task instance and may expire), so a failure to write it is logged, not raised.
    """
    store = context.get("task_state_store")
    if store is None:
        return
    value = json.loads(json.dumps(dict(progress), default=str))
    try:
        store.set(f"cdc_{step}", value)
    except Exception as error:  # a mirror: never fail a data step for it
        import logging

        logging.getLogger(__name__).warning(
            "could not mirror %s progress into task_state_store: %s", step, error
        )


def window_summary(record) -> dict:
    """The small XCom summary of a window (never tokens: the state store is authoritative)."""
    counts = dict(record.counts or {})
    return {
        "stream": record.stream_id,
        "window_start": format_ts(record.start),
        "window_end": format_ts(record.end),
        "state": str(getattr(record.state, "value", record.state)),
        "partitions": counts.get("partitions"),
        "children": counts.get("children"),
        "finished": counts.get("finished"),
        "records": counts.get("records"),
        "changes": counts.get("changes"),
        "transactions": counts.get("transactions"),
        "low_watermark": format_ts(record.low_watermark) if record.low_watermark else None,
        "changelog_snapshot_id": record.changelog_snapshot_id,
        "target_snapshot_ids": dict(record.target_snapshot_ids or {}),
    }


def default_deferrable() -> bool:
    """``[operators] default_deferrable`` (False when unset), read when a task is built."""
    return conf.getboolean("operators", "default_deferrable", fallback=False)


def schedule_of(context: Mapping[str, Any]):
    """The DAG's schedule as ``next_interval(start, end) -> (start, end) | None``: the data
    interval the DAG's timetable gives after ``[start, end)`` (None past its ``end_date``, or
    when the timetable gives no interval after it). None when the DAG's timetable cannot
    say (a timetable without data intervals): a window then reads its own interval only."""
    dag = context.get("dag")
    timetable = getattr(dag, "timetable", None)
    if timetable is None or not hasattr(timetable, "next_dagrun_info"):
        return None
    import pendulum
    from airflow.timetables.base import DataInterval, TimeRestriction

    restriction = TimeRestriction(earliest=getattr(dag, "start_date", None),
                                  latest=getattr(dag, "end_date", None), catchup=True)

    def next_interval(start: datetime, end: datetime):
        last = DataInterval(pendulum.instance(start), pendulum.instance(end))
        info = timetable.next_dagrun_info(last_automated_data_interval=last,
                                          restriction=restriction)
        if info is None or info.data_interval is None:
            return None
        return (ensure_utc("interval start", info.data_interval.start),
                ensure_utc("interval end", info.data_interval.end))

    return next_interval

