"""What every CDC task, operator or sensor, takes from its Airflow run and gives back to it.

The DAG run's window (from its data interval) and lease owner, whether that run has finished,
the window's small XCom summary, the progress mirror in ``task_state_store``, and whether a
task defers by default. The protocol's operators and its gate sensor share these, so they
live below both: a sensor is an operator to Airflow (``BaseSensorOperator`` extends
``BaseOperator``), and this module is the part of ``operators/`` that sensors may import.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from airflow.providers.common.compat.sdk import AirflowFailException, conf

from airflow_cdc.model import Window, ZeroWidthWindowError, format_ts

# Airflow DAG run states after which a run can no longer act on its window.
FINISHED_RUN_STATES = frozenset({"success", "failed"})


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


def run_is_finished(context: Mapping[str, Any], owner: str | None) -> bool:
    """Whether the DAG run ``owner`` (``dag_id/run_id``, see :func:`run_owner`) has finished.

    Asked through the Task SDK (tasks never read Airflow's database). A run that cannot be
    looked up counts as running: a lease is only ever taken from a run proven finished.
    """
    if not owner or "/" not in owner or context.get("ti") is None:
        return False
    dag_id, run_id = owner.split("/", 1)
    try:
        state = context["ti"].get_dagrun_state(dag_id=dag_id, run_id=run_id)
    except Exception:  # noqa: BLE001 - unknown means "maybe running": keep the lease
        return False
    return str(getattr(state, "value", state)).lower() in FINISHED_RUN_STATES


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
