"""Debezium change events -> Apache Iceberg, one 5-minute window per DAG run (CDC_WINDOW_MINUTES).

Every run reads the files a Kafka Connect object-storage sink (or ``airflow-cdc capture
debezium``) wrote under CDC_DEBEZIUM_PREFIX (``topics/<topic>/partition=<p>/...``), one
topic-partition per partition, from each one's next offset to the files listed at plan time;
drops redelivered events (a connector restart sends changes again with new offsets); appends
the changes to the stream's changelog (``cdc.<stream>_changelog``) and applies them, in
connector log order per key, to current-state tables in the ``current`` namespace
(``public.orders`` -> ``current.public_orders``). The plan waits until a Debezium heartbeat
at or after the window end plus the sink's flush lateness is in the sink's files; the gate
opens once apply committed the window.

Point it at your sink with the CDC_DEBEZIUM_* variables: PREFIX (a folder, or
``gs://bucket/path`` read through GCSHook with CDC_DEBEZIUM_GCP_CONN_ID), TOPIC_PREFIX (the
connector's ``topic.prefix``), KEY_COLUMNS (JSON: ``{"public.orders": ["id"]}``: the sink's
files hold record values only, so every table needs its key named), FLUSH_LATENESS_SECONDS
(the sink's rotation interval), SIGNAL_TABLE and NOTIFICATION_TOPIC (to follow Debezium's
incremental snapshots, which ``dags/debezium_snapshots.py`` starts). ``make demo-debezium`` and ``make live-debezium`` run it
against real PostgreSQL through real Debezium.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG
from airflow.timetables.interval import CronDataIntervalTimetable, DeltaDataIntervalTimetable

from airflow_cdc.operators.debezium import DebeziumPipeline

PREFIX = os.environ.get("CDC_DEBEZIUM_PREFIX", "/data/kafka-connect-sink")
TOPIC_PREFIX = os.environ.get("CDC_DEBEZIUM_TOPIC_PREFIX", "shop")
STREAM_ID = os.environ.get("CDC_DEBEZIUM_STREAM_ID", "shop")
GCP_CONN_ID = os.environ.get("CDC_DEBEZIUM_GCP_CONN_ID", "google_cloud_default")
START = datetime.fromisoformat(os.environ.get("CDC_START", "2025-01-06T08:00:00+00:00"))
WINDOW_MINUTES = int(os.environ.get("CDC_WINDOW_MINUTES", "5"))
# Sub-minute windows (the demo's) need a delta timetable; cron counts in minutes.
WINDOW_SECONDS = os.environ.get("CDC_WINDOW_SECONDS")
FLUSH_LATENESS = float(os.environ.get("CDC_DEBEZIUM_FLUSH_LATENESS_SECONDS", "60"))
# Debezium's incremental snapshots (dags/debezium_snapshots.py): the connector's
# signal.data.collection and notification.sink.topic.name, when it has them.
SIGNAL_TABLE = os.environ.get("CDC_DEBEZIUM_SIGNAL_TABLE") or None
NOTIFICATION_TOPIC = os.environ.get("CDC_DEBEZIUM_NOTIFICATION_TOPIC") or None
CATCHUP = os.environ.get("CDC_CATCHUP", "").lower() == "true"
# CDC_END: the last interval's start (bench/catchup.py drains a backlog that ends there).
END = datetime.fromisoformat(os.environ["CDC_END"]) if os.environ.get("CDC_END") else None
MAX_ACTIVE_RUNS = int(os.environ.get("CDC_MAX_ACTIVE_RUNS", "1"))
WAIT_POKE_SECONDS = float(os.environ.get("CDC_WAIT_POKE_SECONDS", "15"))
GATE_POKE_SECONDS = float(os.environ.get("CDC_GATE_POKE_SECONDS", "5"))
DEFERRABLE = {"true": True, "false": False}.get(os.environ.get("CDC_DEFERRABLE", "").lower())
# CDC_MAX_CATCHUP_MINUTES=<m>: a stream that fell behind reads the ready intervals after its
# own in one window of at most m minutes (unset: one interval per window).
MAX_CATCHUP = (timedelta(minutes=float(os.environ["CDC_MAX_CATCHUP_MINUTES"]))
               if os.environ.get("CDC_MAX_CATCHUP_MINUTES") else None)


def _key_columns() -> dict:
    """CDC_DEBEZIUM_KEY_COLUMNS, refused at parse time naming the variable when it is not a
    JSON object of table -> key column list."""
    example = '{"public.orders": ["id"]}'
    text = os.environ.get("CDC_DEBEZIUM_KEY_COLUMNS", example)
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ValueError(f"CDC_DEBEZIUM_KEY_COLUMNS={text!r} is not JSON ({error}): give an "
                         f"object such as {example}") from None
    if not isinstance(value, dict) or not all(isinstance(c, list) for c in value.values()):
        raise ValueError(f"CDC_DEBEZIUM_KEY_COLUMNS={text!r} is not an object of table -> list "
                         f"of key columns: give one such as {example}")
    return value


# CDC_WARM_DRIVER_IDLE_SECONDS=<s> runs the Spark jobs in a driver kept warm on the worker for
# that long after its last job (off by default: a spark-submit per job).
WARM_DRIVER_IDLE_SECONDS = float(os.environ.get("CDC_WARM_DRIVER_IDLE_SECONDS") or 0) or None

with DAG(
    dag_id="debezium_to_iceberg",
    # A data-interval timetable: each run owns [data_interval_start, data_interval_end).
    schedule=(
        DeltaDataIntervalTimetable(timedelta(seconds=float(WINDOW_SECONDS)))
        if WINDOW_SECONDS
        else CronDataIntervalTimetable(f"*/{WINDOW_MINUTES} * * * *", timezone="UTC")
    ),
    start_date=START.astimezone(timezone.utc),
    end_date=END,
    catchup=CATCHUP,
    max_active_runs=MAX_ACTIVE_RUNS,
    tags=["cdc", "debezium", "iceberg"],
    doc_md=__doc__,
):
    DebeziumPipeline(
        group_id="debezium",
        warm_driver_idle_seconds=WARM_DRIVER_IDLE_SECONDS,
        stream_id=STREAM_ID,
        prefix=PREFIX,
        topic_prefix=TOPIC_PREFIX,
        key_columns=_key_columns(),
        gcp_conn_id=GCP_CONN_ID,
        flush_lateness_seconds=FLUSH_LATENESS,
        signal_table=SIGNAL_TABLE,
        notification_topic=NOTIFICATION_TOPIC,
        targets={"namespace": "current"},
        spark_conf={"spark.default.parallelism": "4", "spark.sql.shuffle.partitions": "4"},
        wait_poke_interval=WAIT_POKE_SECONDS,
        gate_poke_interval=GATE_POKE_SECONDS,
        deferrable=DEFERRABLE,
        max_catchup=MAX_CATCHUP,
    )
