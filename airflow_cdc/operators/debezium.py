"""Debezium change events in a DAG: ``DebeziumPipeline``, the shortcut for
``CdcPipeline(source="debezium", ...)`` naming the sink's arguments.

    with DAG(..., schedule=CronDataIntervalTimetable("*/5 * * * *", timezone="UTC")):
        DebeziumPipeline(
            group_id="shop", stream_id="shop", prefix="/data/kafka-sink", topic_prefix="pg",
            key_columns={"public.orders": ["id"], "public.customers": ["id"]},
            targets={"namespace": "current"},
        )

The source is :class:`airflow_cdc.sources.debezium.source.DebeziumSource`: the Kafka Connect
object-storage sink's files under ``prefix`` (``airflow-cdc capture debezium`` writes the
same layout without Kafka).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_cdc.sources.debezium.source import SOURCE_KIND


def DebeziumPipeline(  # noqa: N802 - a factory named like the group it makes
    *,
    group_id: str,
    stream_id: str,
    prefix: str,
    topic_prefix: str,
    key_columns: Mapping[str, Sequence[str]],
    column_types: Mapping[str, Mapping[str, str]] | None = None,
    topics_dir: str = "topics",
    flush_lateness_seconds: float | None = None,
    placeholder: str | None = None,
    signal_table: str | None = None,
    notification_topic: str | None = None,
    gcp_conn_id: str = "google_cloud_default",
    impersonation_chain: str | Sequence[str] | None = None,
    wait_poke_interval: float = 30,
    **options: Any,
):
    """One Debezium connector's topics into Iceberg: plan >> extract >> commit >> apply >> gate.

    ``key_columns`` names each table's key (``{"public.orders": ["id"]}``): a sink file holds
    the record values only, so events of a table without an entry are dead letters.
    ``flush_lateness_seconds`` (default 60) is how long after a heartbeat the sink may still
    be writing the changes before it (its rotation interval). A ``gs://bucket/path`` prefix
    is read through the google provider's GCS hook with ``gcp_conn_id`` and
    ``impersonation_chain``; the extract job reads the same objects with a short-lived token
    the hook mints (never in a plan file). ``signal_table`` (the connector's
    ``signal.data.collection``) and ``notification_topic`` (its
    ``notification.sink.topic.name``) let the stream follow Debezium's incremental snapshots:
    the signaling table's rows are not a target's, and the notifications report each table's
    snapshot progress in the window summaries. ``options`` are the shared
    :class:`~airflow_cdc.operators.pipeline.PipelineOptions`.
    """
    from airflow_cdc.operators.pipeline import CdcPipeline

    settings = {name: value for name, value in (
        ("flush_lateness_seconds", flush_lateness_seconds), ("placeholder", placeholder),
    ) if value is not None}
    spec: dict = {"prefix": prefix, "topic_prefix": topic_prefix, "topics_dir": topics_dir,
                  "key_columns": {t: list(c) for t, c in key_columns.items()}}
    if column_types:
        spec["column_types"] = {t: dict(c) for t, c in column_types.items()}
    if signal_table:
        spec["signal_table"] = signal_table
    if notification_topic:
        spec["notification_topic"] = notification_topic
    if settings:
        spec["settings"] = settings
    source_conn = {"gcp_conn_id": gcp_conn_id, "impersonation_chain": impersonation_chain}
    return CdcPipeline(group_id=group_id, source=SOURCE_KIND, stream_id=stream_id, spec=spec,
                       source_conn=source_conn, wait_poke_interval=wait_poke_interval, **options)
