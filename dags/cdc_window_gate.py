"""Gate a DAG on a CDC window of a stream that another DAG or deployment runs.

A reporting DAG on the same cadence as a CDC pipeline waits, without holding a worker slot,
until the pipeline's window for its own data interval is proven complete (every partition
read up to the window end and apply committed), then reads the window summary. The gate
defers to the triggerer; a window that stays closed past the timeout fails the gate with the
partitions that hold it back (or skips it, with ``CDC_GATE_SOFT_FAIL=true``).

Configured by environment: ``CDC_GATE_STREAM`` (the stream id), ``CDC_GATE_WINDOW_MINUTES``
(the pipeline's window), ``CDC_GATE_START``, ``CDC_GATE_END``, ``CDC_GATE_TIMEOUT_SECONDS``,
``CDC_GATE_POLL_SECONDS``, ``CDC_GATE_SOFT_FAIL``, ``CDC_GATE_DEFERRABLE`` (default true),
``CDC_GATE_CATCHUP`` (``true``: a run for every interval since the start),
``CDC_GATE_ASSET_PARTITIONS`` (``true``: events keyed by the run's interval) and
``CDC_GATE_TABLES`` (the target tables the gate announces as Assets, ``ns.name``).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task
from airflow.timetables.interval import DeltaDataIntervalTimetable

from airflow_cdc.assets import iceberg_asset
from airflow_cdc.sensors.gate import CdcWindowCompleteSensor

STREAM = os.environ.get("CDC_GATE_STREAM", "allchanges")
WINDOW = timedelta(minutes=float(os.environ.get("CDC_GATE_WINDOW_MINUTES", "60")))
START = datetime.fromisoformat(os.environ.get("CDC_GATE_START", "2025-01-06T08:00:00+00:00"))
END = os.environ.get("CDC_GATE_END")
TABLES = [t for t in os.environ.get("CDC_GATE_TABLES", "").split(",") if t]

with DAG(
    dag_id="cdc_window_gate",
    schedule=DeltaDataIntervalTimetable(WINDOW),
    start_date=START,
    end_date=datetime.fromisoformat(END) if END else None,
    catchup=os.environ.get("CDC_GATE_CATCHUP", "").lower() == "true",
    max_active_runs=1,
    tags=["cdc", "gate", "example"],
    doc_md=__doc__,
):
    gate = CdcWindowCompleteSensor(
        task_id="window_complete",
        stream_id=STREAM,
        poke_interval=float(os.environ.get("CDC_GATE_POLL_SECONDS", "30")),
        timeout=float(os.environ.get("CDC_GATE_TIMEOUT_SECONDS", str(6 * 3600))),
        soft_fail=os.environ.get("CDC_GATE_SOFT_FAIL", "").lower() == "true",
        deferrable=os.environ.get("CDC_GATE_DEFERRABLE", "true").lower() != "false",
        asset_partitions=os.environ.get("CDC_GATE_ASSET_PARTITIONS", "").lower() == "true",
        outlets=[iceberg_asset(table) for table in TABLES],
    )

    @task
    def report(**context) -> dict:
        """Runs only once the window is complete: what it holds, from the gate's XCom."""
        return context["ti"].xcom_pull(task_ids="window_complete", key="window_summary")

    gate >> report()
