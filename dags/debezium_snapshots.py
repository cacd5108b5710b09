"""Snapshots of a running Debezium stream, triggered by hand: both kinds, side by side.

* ``incremental``: Debezium's own incremental snapshot of CDC_SNAPSHOT_SIGNAL_TABLES, started
  by an ``execute-snapshot`` signal row in the connector's signaling table
  (CDC_SNAPSHOT_SIGNAL_TABLE), optionally narrowed by CDC_SNAPSHOT_CONDITIONS (JSON: table ->
  SQL condition). Debezium reads one chunk at a time while it streams; the stream's windows
  apply its READ events in log order.
* ``parallel``: airflow-cdc's parallel snapshot of CDC_SNAPSHOT_PARALLEL_TABLE, read by a
  Spark job in key-range chunks between watermarks in the log and staged for the stream's
  windows (``CdcSnapshotOperator``). Use it for big tables, where Debezium's one-chunk-at-a-
  time read takes hours.

The stream itself runs in ``dags/debezium_to_iceberg.py`` (the same CDC_DEBEZIUM_* settings):
the snapshots' rows reach the targets through its windows, so the targets are never written
by two jobs at once. Connections: CDC_SNAPSHOT_CONN_ID (the captured database; type postgres).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

from airflow.sdk import DAG

from airflow_cdc.operators.debezium_snapshot import DebeziumIncrementalSnapshotOperator
from airflow_cdc.operators.snapshot import CdcSnapshotOperator
from airflow_cdc.pipeline.protocol import StreamConfig

STREAM_ID = os.environ.get("CDC_DEBEZIUM_STREAM_ID", "shop")
CONN_ID = os.environ.get("CDC_SNAPSHOT_CONN_ID", "shop_db")
SIGNAL_TABLE = os.environ.get("CDC_SNAPSHOT_SIGNAL_TABLE", "public.debezium_signal")
SIGNAL_TABLES = [t for t in os.environ.get("CDC_SNAPSHOT_SIGNAL_TABLES", "public.customers").split(",") if t]
CONDITIONS = json.loads(os.environ.get("CDC_SNAPSHOT_CONDITIONS", "{}"))
PARALLEL_TABLE = os.environ.get("CDC_SNAPSHOT_PARALLEL_TABLE", "public.orders")
CHUNK_SIZE = int(os.environ.get("CDC_SNAPSHOT_CHUNK_SIZE", "100000"))

stream = StreamConfig.for_source("debezium", STREAM_ID, {
    "prefix": os.environ.get("CDC_DEBEZIUM_PREFIX", "/data/kafka-connect-sink"),
    "topic_prefix": os.environ.get("CDC_DEBEZIUM_TOPIC_PREFIX", "shop"),
    "key_columns": json.loads(os.environ.get("CDC_DEBEZIUM_KEY_COLUMNS", '{"public.orders": ["id"]}')),
})

with DAG(
    dag_id="debezium_snapshots",
    schedule=None,  # triggered by hand: when a table joins, or a target needs a rebuild
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["cdc", "debezium", "snapshot"],
    doc_md=__doc__,
):
    DebeziumIncrementalSnapshotOperator(
        task_id="incremental",
        conn_id=CONN_ID,
        signal_table=SIGNAL_TABLE,
        data_collections=SIGNAL_TABLES,
        additional_conditions=CONDITIONS or None,
    )
    CdcSnapshotOperator(
        task_id="parallel",
        stream=stream,
        table=PARALLEL_TABLE,
        conn_id=CONN_ID,
        chunk_size=CHUNK_SIZE,
        chunks_per_batch=4,
    )
