"""Spanner tables with commit-timestamp columns -> Apache Iceberg, one window per DAG run.

For databases without a change stream. Every run reads, for its data interval ``[s, e)``,
the rows of each table whose commit-timestamp column lies in ``[s, e)``, as one consistent
read at exactly ``e`` split by Spanner's partitioned query into Spark tasks; plain tables
are upserted into the ``commit_ts`` namespace, the change-log table ``DocumentHistory`` is
appended, ``Customers`` rows flagged ``Deleted`` are deleted, and every
``CDC_RECONCILE_EVERY`` windows the tables' keys are read at ``e`` to delete the target rows
whose source rows were deleted (deletes leave no commit timestamp). The plan waits until
``e`` is past by the safety margin.

The second DAG, ``spanner_commit_ts_reseed`` (no schedule), is the fix for a window older
than the database's version retention: trigger it (optionally with ``{"at": "<instant>"}``,
default now minus the safety margin), then clear the failed window's plan task.

Point it at your database with the CDC_SPANNER_* variables; with ``SPANNER_EMULATOR_HOST``
set it reads the local emulator (``python -m airflow_cdc_emulators.spanner
--commit-ts-tables``), which is what ``make demo-commit-ts`` does.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, Param
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_cdc.operators.spanner_commit_ts import (
    SpannerCommitTimestampPipeline,
    SpannerCommitTimestampReseedOperator,
)

PROJECT = os.environ.get("CDC_SPANNER_PROJECT", "demo-project")
INSTANCE = os.environ.get("CDC_SPANNER_INSTANCE", "demo-instance")
DATABASE = os.environ.get("CDC_SPANNER_DATABASE", "shop")
DIALECT = os.environ.get("CDC_SPANNER_DIALECT", "GOOGLE_STANDARD_SQL")
STREAM_ID = os.environ.get("CDC_STREAM_ID", "shop_commit_ts")
START = datetime.fromisoformat(os.environ.get("CDC_START", "2025-01-06T08:00:00+00:00"))
WINDOW_MINUTES = int(os.environ.get("CDC_WINDOW_MINUTES", "20"))
RECONCILE_EVERY = int(os.environ.get("CDC_RECONCILE_EVERY", "3"))
SAFETY_MARGIN_SECONDS = float(os.environ.get("CDC_SAFETY_MARGIN_SECONDS", "10"))
DEFERRABLE = {"true": True, "false": False}.get(os.environ.get("CDC_DEFERRABLE", "").lower())
# CDC_MAX_CATCHUP_MINUTES=<m>: a stream that fell behind reads the ready intervals after its
# own in one window of at most m minutes (unset: one interval per window).
MAX_CATCHUP = (timedelta(minutes=float(os.environ["CDC_MAX_CATCHUP_MINUTES"]))
               if os.environ.get("CDC_MAX_CATCHUP_MINUTES") else None)
CATCHUP = os.environ.get("CDC_CATCHUP", "").lower() == "true"
MAX_ACTIVE_RUNS = int(os.environ.get("CDC_MAX_ACTIVE_RUNS", "1"))
TABLES = {
    "Orders": "LastUpdateTime",
    "Documents": "LastUpdateTime",
    "DocumentHistory": {"column": "Ts", "kind": "changelog"},
    "Customers": {"column": "UpdatedAt", "soft_delete": "Deleted"},
    "Events": "EventTime",
}

# CDC_WARM_DRIVER_IDLE_SECONDS=<s> runs the Spark jobs in a driver kept warm on the worker for
# that long after its last job (off by default: a spark-submit per job).
WARM_DRIVER_IDLE_SECONDS = float(os.environ.get("CDC_WARM_DRIVER_IDLE_SECONDS") or 0) or None

with DAG(
    dag_id="spanner_commit_ts_to_iceberg",
    schedule=CronDataIntervalTimetable(f"*/{WINDOW_MINUTES} * * * *", timezone="UTC"),
    start_date=START.astimezone(timezone.utc),
    catchup=CATCHUP,
    max_active_runs=MAX_ACTIVE_RUNS,
    tags=["cdc", "spanner", "commit-timestamp", "iceberg"],
    doc_md=__doc__,
):
    SpannerCommitTimestampPipeline(
        group_id="shop",
        warm_driver_idle_seconds=WARM_DRIVER_IDLE_SECONDS,
        stream_id=STREAM_ID,
        project_id=PROJECT,
        instance_id=INSTANCE,
        database_id=DATABASE,
        dialect=DIALECT,
        tables=TABLES,
        reconcile_every=RECONCILE_EVERY,
        safety_margin_seconds=SAFETY_MARGIN_SECONDS,
        targets={"namespace": "commit_ts"},
        source_tables=list(TABLES),
        spark_conf={"spark.default.parallelism": "4", "spark.sql.shuffle.partitions": "4"},
        gate_poke_interval=2,
        wait_poke_interval=2,
        deferrable=DEFERRABLE,
        max_catchup=MAX_CATCHUP,
    )

with DAG(
    dag_id="spanner_commit_ts_reseed",
    schedule=None,
    start_date=START.astimezone(timezone.utc),
    catchup=False,
    tags=["cdc", "spanner", "commit-timestamp"],
    doc_md="Request a re-seed of the commit-timestamp stream from a read at the current time.",
    params={"at": Param("", type="string", description="the instant to re-seed at (ISO-8601); "
                        "empty: now minus the safety margin")},
):
    SpannerCommitTimestampReseedOperator(
        task_id="reseed",
        stream_id=STREAM_ID,
        project_id=PROJECT,
        instance_id=INSTANCE,
        database_id=DATABASE,
        safety_margin_seconds=SAFETY_MARGIN_SECONDS,
        at="{{ params.at }}",
    )
