"""A downstream consumer run once per CDC interval: scheduled on a pipeline's partitioned Asset.

Every gate of a CDC pipeline emits its Asset events with the partition key of its DAG run's
interval (its start in UTC, ``YYYY-MM-DDTHH:MM:SS``), including the runs of intervals a
catch-up window read. Scheduled with ``PartitionedAssetTimetable``, this DAG gets one run per
interval, its ``partition_key`` naming the interval; ``StartOfHourMapper()`` as the
``default_partition_mapper`` would instead give one run per hour once every interval of
the hour arrived.

``CDC_CONSUMER_TABLE`` names the table (``ns.name``, default ``current.Accounts``).
"""

from __future__ import annotations

import os
from datetime import datetime, timezone

from airflow.sdk import DAG, PartitionedAssetTimetable, task

from airflow_cdc.assets import iceberg_asset

TABLE = iceberg_asset(os.environ.get("CDC_CONSUMER_TABLE", "current.Accounts"))

with DAG(
    dag_id="cdc_partition_consumer",
    schedule=PartitionedAssetTimetable(assets=TABLE),
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["cdc", "asset", "partitions", "example"],
    doc_md=__doc__,
):

    @task(inlets=[TABLE])
    def read_interval(dag_run=None, **context) -> dict:
        """The interval this run stands for, and the window that read it."""
        events = context["triggering_asset_events"][TABLE]
        extra = events[-1].extra
        print(f"interval {dag_run.partition_key} of {extra['stream']}: read by window "
              f"[{extra['window_start']}, {extra['window_end']})"
              + (", a catch-up window of an earlier run" if extra.get("covered_by") else ""))
        return {"partition_key": dag_run.partition_key, "events": len(events),
                "window_end": extra["window_end"], "covered_by": extra.get("covered_by")}

    read_interval()
