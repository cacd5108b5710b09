"""Spanner change stream -> Apache Iceberg, one 30-minute window per DAG run (CDC_WINDOW_MINUTES).

Every run reads the change stream's partitions for its data interval in parallel on Spark,
appends the changes to the stream's Iceberg changelog (``cdc.<stream>_changelog``), applies
them to current-state tables in the ``current`` namespace, and opens its gate only when
heartbeats prove the window complete. ``report`` runs after the gate; the gate also emits an
Asset event per table (``dags/cdc_asset_consumer.py`` is scheduled on them).

``CDC_DEFERRABLE=true`` makes the gate wait in the triggerer (unset: Airflow's
``[operators] default_deferrable``). ``CDC_ICEBERG_CONN_ID`` names an ``iceberg_catalog``
connection (a REST catalog, say) instead of the local Hadoop warehouse.
``CDC_SPANNER_TABLES`` lists the stream's tables, which become the pipeline's Assets (the
emulator's tables by default).

Point it at your database with the CDC_SPANNER_* variables (or edit the constants); with
``SPANNER_EMULATOR_HOST`` set it reads the local emulator (``python -m
airflow_cdc_emulators.spanner``), which is what ``make demo`` does.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, task
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_cdc.operators.pipeline import SpannerChangeStreamPipeline
from airflow_cdc.spark.dataproc import DataprocCluster

PROJECT = os.environ.get("CDC_SPANNER_PROJECT", "demo-project")
INSTANCE = os.environ.get("CDC_SPANNER_INSTANCE", "demo-instance")
DATABASE = os.environ.get("CDC_SPANNER_DATABASE", "shop")
CHANGE_STREAM = os.environ.get("CDC_SPANNER_STREAM", "AllChanges")
START = datetime.fromisoformat(os.environ.get("CDC_START", "2025-01-06T08:00:00+00:00"))
WINDOW_MINUTES = int(os.environ.get("CDC_WINDOW_MINUTES", "30"))
TABLES = [t for t in os.environ.get("CDC_SPANNER_TABLES", "Accounts,Orders,Documents").split(",") if t]
DEFERRABLE = {"true": True, "false": False}.get(os.environ.get("CDC_DEFERRABLE", "").lower())
# The window's cost strategies (on by default; bench/window.py --baseline turns them off):
# CDC_FUSE_APPLY=false runs apply in a Spark application of its own, and
# CDC_EMPTY_WINDOW_PROBE_LIMIT=-1 never reads a window in the extract task to prove it empty.
# CDC_WARM_DRIVER_IDLE_SECONDS=<s> runs the Spark jobs in a driver kept warm on the worker for
# that long after its last job (off by default: a spark-submit per job).
COST = {
    **({"fuse_apply": False} if os.environ.get("CDC_FUSE_APPLY", "").lower() == "false" else {}),
    **({"empty_window_probe_limit": int(os.environ["CDC_EMPTY_WINDOW_PROBE_LIMIT"])}
       if os.environ.get("CDC_EMPTY_WINDOW_PROBE_LIMIT") else {}),
    **({"warm_driver_idle_seconds": float(os.environ["CDC_WARM_DRIVER_IDLE_SECONDS"])}
       if os.environ.get("CDC_WARM_DRIVER_IDLE_SECONDS") else {}),
}
# CDC_MAX_CATCHUP_MINUTES=<m>: a stream that fell behind reads the ready intervals after its
# own in one window of at most m minutes (unset: one interval per window).
MAX_CATCHUP = (timedelta(minutes=float(os.environ["CDC_MAX_CATCHUP_MINUTES"]))
               if os.environ.get("CDC_MAX_CATCHUP_MINUTES") else None)
# CDC_ASSET_PARTITIONS=true: the gate's events carry the run's interval as partition key (for
# dags/cdc_partition_consumer.py; dags/cdc_asset_consumer.py then gets no runs).
ASSET_PARTITIONS = os.environ.get("CDC_ASSET_PARTITIONS", "").lower() == "true"
# Catch-up and overlap (make live-* and bench/catchup.py): CDC_CATCHUP=true gives every interval
# since CDC_START a run, CDC_MAX_ACTIVE_RUNS runs that many at once, CDC_END ends the schedule.
CATCHUP = os.environ.get("CDC_CATCHUP", "").lower() == "true"
MAX_ACTIVE_RUNS = int(os.environ.get("CDC_MAX_ACTIVE_RUNS", "1"))
END = datetime.fromisoformat(os.environ["CDC_END"]) if os.environ.get("CDC_END") else None
# With CDC_DATAPROC_CLUSTER the Spark jobs run on that Dataproc cluster (AIRFLOW_CDC_WORK_ROOT
# must then be a gs:// URI the cluster reads); make demo-cluster sets both.
DATAPROC = DataprocCluster(
    cluster_name=os.environ["CDC_DATAPROC_CLUSTER"],
    region=os.environ.get("CDC_DATAPROC_REGION", "europe-west1"),
    project_id=os.environ.get("CDC_DATAPROC_PROJECT") or None,
) if os.environ.get("CDC_DATAPROC_CLUSTER") else None

with DAG(
    dag_id="spanner_change_stream_to_iceberg",
    # A data-interval timetable: each run owns [data_interval_start, data_interval_end).
    # A plain "@hourly" would give zero-width intervals in Airflow 3 and is refused.
    schedule=CronDataIntervalTimetable(f"*/{WINDOW_MINUTES} * * * *", timezone="UTC"),
    start_date=START.astimezone(timezone.utc),
    end_date=END,
    catchup=CATCHUP,
    max_active_runs=MAX_ACTIVE_RUNS,
    tags=["cdc", "spanner", "iceberg"],
    doc_md=__doc__,
):
    changes = SpannerChangeStreamPipeline(
        group_id="all_changes",
        project_id=PROJECT,
        instance_id=INSTANCE,
        database_id=DATABASE,
        change_stream=CHANGE_STREAM,
        heartbeat_milliseconds=10_000,
        targets={"namespace": "current"},
        source_tables=TABLES,
        gate_poke_interval=5,
        deferrable=DEFERRABLE,
        dataproc=DATAPROC,
        iceberg_conn_id=os.environ.get("CDC_ICEBERG_CONN_ID") or None,
        max_catchup=MAX_CATCHUP,
        asset_partitions=ASSET_PARTITIONS,
        **COST,
    )

    @task
    def report(**context) -> dict:
        """A downstream consumer: runs only once the window is proven complete."""
        summary = context["ti"].xcom_pull(task_ids="all_changes.gate", key="window_summary")
        print(f"window complete: {summary}")
        return summary

    changes >> report()
