"""Spanner change stream -> Iceberg every 10 minutes, on Astro.

Edit the instance, database and change stream; targets land in the ``current`` namespace of
the Iceberg catalog at $AIRFLOW_CDC_WAREHOUSE. With ``airflow-cdc[cluster]`` instead of the
local Spark, add ``spark_conn_id="spark_default"`` and
``catalog=IcebergCatalog(spark_version="3.5")`` (the cluster's Spark).
"""

from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG
from airflow.timetables.interval import DeltaDataIntervalTimetable

from airflow_cdc.operators.pipeline import SpannerChangeStreamPipeline

with DAG(
    "orders_cdc",
    schedule=DeltaDataIntervalTimetable(timedelta(minutes=10)),
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
):
    SpannerChangeStreamPipeline(
        group_id="orders",
        instance_id="prod-instance",
        database_id="shop",
        change_stream="OrdersStream",
        targets={"namespace": "current"},
        source_tables=["Orders"],
    )
