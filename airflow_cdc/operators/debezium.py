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

    A ``gs://bucket/path`` prefix is read through the google provider's GCS hook; the extract
    job reads the same objects with a short-lived token the hook mints (never in a plan file).
    ``signal_table`` and ``notification_topic`` let the stream follow Debezium's incremental
    snapshots: the signaling table's rows are not a target's, and the notifications report
    each table's snapshot progress in the window summaries.

    :param group_id: the TaskGroup's id.
    :param stream_id: the stream's id.
    :param prefix: the sink's folder or ``gs://bucket/path``.
    :param topic_prefix: the connector's ``topic.prefix``.
    :param key_columns: each table's key (``{"public.orders": ["id"]}``): a sink file holds
        the record values only, so events of a table without an entry are dead letters.
    :param column_types: column types per table, for values the events do not type.
    :param topics_dir: the sink's ``topics.dir``.
    :param flush_lateness_seconds: how long after a heartbeat the sink may still be writing
        the changes before it (its rotation interval; default 60).
    :param placeholder: the connector's ``unavailable.value.placeholder`` (default
        ``__debezium_unavailable_value``).
    :param signal_table: the connector's ``signal.data.collection``.
    :param notification_topic: the connector's ``notification.sink.topic.name``.
    :param gcp_conn_id: the Google Cloud connection.
    :param impersonation_chain: a service account to impersonate, or a chain of them.
    :param wait_poke_interval: seconds between two checks of the plan task's wait.
    :param options: the shared :class:`~airflow_cdc.operators.pipeline.PipelineOptions`.
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
