"""Bigtable change stream -> Apache Iceberg, one 30-minute window per DAG run (CDC_WINDOW_MINUTES).

Every run reads the table's change stream partitions (row ranges) for its data interval in
parallel on Spark, appends one changelog row per mutation to ``cdc.<stream>_changelog``, and
applies them to ``bigtable.<table>_cells`` (every live cell version) and
``bigtable.<table>_latest`` (the newest cell per column). Planning waits until every
partition's low watermark passed the window end (a lagging cluster holds it back); the gate
opens on that evidence.

Point it at your table with the CDC_BIGTABLE_* variables (or edit the constants); with
``BIGTABLE_EMULATOR_HOST`` set it reads the local emulator (``python -m
airflow_cdc_emulators.bigtable``), which is what ``make demo-bigtable`` does.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_cdc.operators.bigtable import BigtableChangeStreamPipeline

PROJECT = os.environ.get("CDC_BIGTABLE_PROJECT", "demo-project")
INSTANCE = os.environ.get("CDC_BIGTABLE_INSTANCE", "demo-instance")
TABLE = os.environ.get("CDC_BIGTABLE_TABLE", "events")
APP_PROFILE = os.environ.get("CDC_BIGTABLE_APP_PROFILE", "default")
START = datetime.fromisoformat(os.environ.get("CDC_START", "2025-01-06T08:00:00+00:00"))
WINDOW_MINUTES = int(os.environ.get("CDC_WINDOW_MINUTES", "30"))
DEFERRABLE = {"true": True, "false": False}.get(os.environ.get("CDC_DEFERRABLE", "").lower())
# CDC_MAX_CATCHUP_MINUTES=<m>: a stream that fell behind reads the ready intervals after its
# own in one window of at most m minutes (unset: one interval per window).
MAX_CATCHUP = (timedelta(minutes=float(os.environ["CDC_MAX_CATCHUP_MINUTES"]))
               if os.environ.get("CDC_MAX_CATCHUP_MINUTES") else None)
# CDC_ASSET_PARTITIONS=true: the gate's events carry the run's interval as partition key (for
# dags/cdc_partition_consumer.py; dags/cdc_asset_consumer.py then gets no runs).
ASSET_PARTITIONS = os.environ.get("CDC_ASSET_PARTITIONS", "").lower() == "true"
# Catch-up and overlap: a run that ends after the next interval closed would otherwise make
# the scheduler skip that interval (the next window then refuses to start after a gap).
CATCHUP = os.environ.get("CDC_CATCHUP", "").lower() == "true"
MAX_ACTIVE_RUNS = int(os.environ.get("CDC_MAX_ACTIVE_RUNS", "1"))

# CDC_WARM_DRIVER_IDLE_SECONDS=<s> runs the Spark jobs in a driver kept warm on the worker for
# that long after its last job (off by default: a spark-submit per job).
WARM_DRIVER_IDLE_SECONDS = float(os.environ.get("CDC_WARM_DRIVER_IDLE_SECONDS") or 0) or None

with DAG(
    dag_id="bigtable_change_stream_to_iceberg",
    schedule=CronDataIntervalTimetable(f"*/{WINDOW_MINUTES} * * * *", timezone="UTC"),
    start_date=START.astimezone(timezone.utc),
    catchup=CATCHUP,
    max_active_runs=MAX_ACTIVE_RUNS,
    tags=["cdc", "bigtable", "iceberg"],
    doc_md=__doc__,
):
    BigtableChangeStreamPipeline(
        group_id="events",
        warm_driver_idle_seconds=WARM_DRIVER_IDLE_SECONDS,
        project_id=PROJECT,
        instance_id=INSTANCE,
        table_id=TABLE,
        app_profile_id=APP_PROFILE,
        heartbeat_seconds=1,
        evidence_delay_seconds=2,
        targets={"namespace": "bigtable", "decode": {"cf:name": "string"}},
        spark_conf={"spark.default.parallelism": "4", "spark.sql.shuffle.partitions": "4"},
        gate_poke_interval=2,
        wait_poke_interval=2,
        deferrable=DEFERRABLE,
        max_catchup=MAX_CATCHUP,
        asset_partitions=ASSET_PARTITIONS,
    )
