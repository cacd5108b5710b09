"""Datastream -> Apache Iceberg, one 10-minute window per DAG run (CDC_WINDOW_MINUTES).

Every run lists the Datastream destination prefix (CDC_DATASTREAM_PREFIX: ``gs://bucket/path``
read through GCSHook with CDC_DATASTREAM_GCP_CONN_ID, or a local folder), consumes each
settled event file not consumed before (JSON lines or Avro) on Spark, drops duplicates by
uuid, appends the changes to the stream's changelog (``cdc.<stream>_changelog``), applies them
to current-state tables in the ``current`` namespace, and opens its gate once an event read
after the window end plus the allowed lateness proves the window complete.
Tables without ``primary_keys`` in their metadata (Oracle) get key columns from
CDC_DATASTREAM_KEY_COLUMNS and JSON payload columns their types from
CDC_DATASTREAM_COLUMN_TYPES (JSON objects; unset, none are declared).

``python -m demo.datastream`` (``make demo-datastream``) writes a local
Datastream output tree and runs this DAG over it.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, task
from airflow.timetables.interval import CronDataIntervalTimetable, DeltaDataIntervalTimetable

from airflow_cdc.operators.datastream import DatastreamPipeline

PREFIX = os.environ.get("CDC_DATASTREAM_PREFIX", "gs://my-datastream-bucket/shop")
GCP_CONN_ID = os.environ.get("CDC_DATASTREAM_GCP_CONN_ID", "google_cloud_default")
STREAM_ID = os.environ.get("CDC_DATASTREAM_STREAM_ID", "shop")
START = datetime.fromisoformat(os.environ.get("CDC_START", "2025-01-06T08:00:00+00:00"))
WINDOW_MINUTES = int(os.environ.get("CDC_WINDOW_MINUTES", "10"))
# Sub-minute windows (the live test's) need a delta timetable; cron counts in minutes.
WINDOW_SECONDS = os.environ.get("CDC_WINDOW_SECONDS")
SETTLE_SECONDS = float(os.environ.get("CDC_DATASTREAM_SETTLE_SECONDS", "60"))
LATENESS = timedelta(seconds=float(os.environ.get("CDC_DATASTREAM_LATENESS_SECONDS", "300")))
CATCHUP = os.environ.get("CDC_CATCHUP", "").lower() == "true"
MAX_ACTIVE_RUNS = int(os.environ.get("CDC_MAX_ACTIVE_RUNS", "1"))
WAIT_POKE_SECONDS = float(os.environ.get("CDC_WAIT_POKE_SECONDS", "15"))
GATE_TIMEOUT_SECONDS = float(os.environ.get("CDC_GATE_TIMEOUT_SECONDS", "1800"))
IDLE_TIMEOUT = os.environ.get("CDC_DATASTREAM_IDLE_TIMEOUT_SECONDS")
TABLES = [t for t in os.environ.get("CDC_DATASTREAM_TABLES", "shop_orders,public_customers").split(",") if t]
DEFERRABLE = {"true": True, "false": False}.get(os.environ.get("CDC_DEFERRABLE", "").lower())
# CDC_MAX_CATCHUP_MINUTES=<m>: a stream that fell behind reads the ready intervals after its
# own in one window of at most m minutes (unset: one interval per window).
MAX_CATCHUP = (timedelta(minutes=float(os.environ["CDC_MAX_CATCHUP_MINUTES"]))
               if os.environ.get("CDC_MAX_CATCHUP_MINUTES") else None)


def _json_mapping(name: str, example: str) -> dict | None:
    """A JSON object setting (None when unset), refused at parse time naming the variable."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ValueError(f"{name}={text!r} is not JSON ({error}): give an object such as {example}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name}={text!r} is a JSON {type(value).__name__}: give an object such as {example}")
    return value


# Key columns per table, e.g. {"HR.EMPLOYEES": ["EMPLOYEE_ID"]}: Oracle events carry no
# primary_keys, so without this an Oracle table is keyed by its ROWID. Unset: none declared.
KEY_COLUMNS = _json_mapping("CDC_DATASTREAM_KEY_COLUMNS", '{"HR.EMPLOYEES": ["EMPLOYEE_ID"]}')
# Payload column types per table, e.g. {"shop_orders": {"amount": "DECIMAL(10,2)"}}: JSON
# payloads have no dates and no declared precision. Unset: typed from Avro schemas and values.
COLUMN_TYPES = _json_mapping("CDC_DATASTREAM_COLUMN_TYPES", '{"shop_orders": {"amount": "DECIMAL(10,2)"}}')

# CDC_WARM_DRIVER_IDLE_SECONDS=<s> runs the Spark jobs in a driver kept warm on the worker for
# that long after its last job (off by default: a spark-submit per job).
WARM_DRIVER_IDLE_SECONDS = float(os.environ.get("CDC_WARM_DRIVER_IDLE_SECONDS") or 0) or None

with DAG(
    dag_id="datastream_to_iceberg",
    # A data-interval timetable: each run owns [data_interval_start, data_interval_end).
    schedule=(
        DeltaDataIntervalTimetable(timedelta(seconds=float(WINDOW_SECONDS)))
        if WINDOW_SECONDS
        else CronDataIntervalTimetable(f"*/{WINDOW_MINUTES} * * * *", timezone="UTC")
    ),
    start_date=START.astimezone(timezone.utc),
    catchup=CATCHUP,
    max_active_runs=MAX_ACTIVE_RUNS,
    tags=["cdc", "datastream", "iceberg"],
    doc_md=__doc__,
):
    changes = DatastreamPipeline(
        group_id="datastream",
        warm_driver_idle_seconds=WARM_DRIVER_IDLE_SECONDS,
        prefix=PREFIX,
        stream_id=STREAM_ID,
        gcp_conn_id=GCP_CONN_ID,
        settle_seconds=SETTLE_SECONDS,
        # The plan waits until an event read LATENESS after the window end has landed in a
        # file unchanged for SETTLE_SECONDS; the gate opens once apply committed that window.
        allowed_lateness=LATENESS,
        idle_timeout=None if not IDLE_TIMEOUT else timedelta(seconds=float(IDLE_TIMEOUT)),
        targets={"namespace": "current"},
        source_tables=TABLES,
        wait_poke_interval=WAIT_POKE_SECONDS,
        gate_poke_interval=5,
        gate_timeout=GATE_TIMEOUT_SECONDS,
        deferrable=DEFERRABLE,
        max_catchup=MAX_CATCHUP,
        key_columns=KEY_COLUMNS,
        column_types=COLUMN_TYPES,
    )

    @task
    def report(**context) -> dict:
        """A downstream consumer: runs only once the window is complete, and says how: proven
        by an event read after it (``evidence``) or declared by the idle timeout."""
        summary = context["ti"].xcom_pull(task_ids="datastream.gate", key="window_summary")
        how = "an event read after it" if summary["completeness"] == "evidence" else "the idle timeout"
        print(f"window [{summary['window_start']}, {summary['window_end']}) complete by {how}: "
              f"{summary['changes']} changes, {summary.get('duplicates')} duplicates dropped")
        return summary

    changes >> report()
