"""Bigtable change streams in a DAG: ``BigtableChangeStreamPipeline``, the shortcut for
``CdcPipeline(source="bigtable_change_stream", ...)`` naming Bigtable's arguments.

    with DAG(..., schedule=CronDataIntervalTimetable("*/30 * * * *", timezone="UTC")):
        BigtableChangeStreamPipeline(
            group_id="events_cdc", project_id="my-project", instance_id="prod",
            table_id="events", app_profile_id="cdc-reader",
            targets={"namespace": "bigtable", "decode": {"cf:price": "double"}},
        )

The source is :class:`airflow_cdc.sources.bigtable.source.BigtableChangeStreamSource`; its
targets are the ``<table>_cells`` and ``<table>_latest`` Iceberg tables
(:mod:`airflow_cdc.spark_jobs.sources.bigtable`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_cdc.sources.bigtable import SOURCE_KIND


def bigtable_spec(
    *, project_id: str | None, instance_id: str, table_id: str, app_profile_id: str = "",
    heartbeat_seconds: float | None = None, read_timeout_seconds: float | None = None,
    evidence_delay_seconds: float | None = None, stall_policy: Mapping[str, Any] | None = None,
) -> dict:
    """The stream spec of one Bigtable table's change stream."""
    settings = {
        name: value for name, value in (
            ("heartbeat_seconds", heartbeat_seconds),
            ("read_timeout_seconds", read_timeout_seconds),
            ("evidence_delay_seconds", evidence_delay_seconds),
            ("stall", dict(stall_policy) if stall_policy else None),
        ) if value is not None
    }
    spec = {"project": project_id or "", "instance": instance_id, "table": table_id,
            "app_profile": app_profile_id}
    if settings:
        spec["settings"] = settings
    return spec


def BigtableChangeStreamPipeline(  # noqa: N802 - a factory named like the group it makes
    *,
    group_id: str,
    instance_id: str,
    table_id: str,
    app_profile_id: str = "",
    project_id: str | None = None,
    stream_id: str | None = None,
    heartbeat_seconds: float | None = None,
    read_timeout_seconds: float | None = None,
    evidence_delay_seconds: float | None = None,
    stall_policy: Mapping[str, Any] | None = None,
    gcp_conn_id: str = "google_cloud_default",
    impersonation_chain: str | Sequence[str] | None = None,
    **options: Any,
):
    """One Bigtable table's change stream into Iceberg: plan >> extract >> commit >> apply >> gate.

    ``targets`` (a shared option) takes ``namespace``, ``mapping`` (``{table_id: name}``),
    ``decode`` (``{"family:qualifier": "string" | "int64" | "double" | "bool" | "bytes"}``,
    adds the ``<table>_rows`` table) and ``apply_gc`` (default true).

    :param group_id: the TaskGroup's id.
    :param instance_id: the Bigtable instance.
    :param table_id: the table whose change stream is read.
    :param app_profile_id: an app profile that routes to a single cluster (change streams
        require it; empty: the instance's default).
    :param project_id: the Google Cloud project (None: the connection's).
    :param stream_id: the stream's id (None: the table id in lower case, ``_`` for other
        characters).
    :param heartbeat_seconds: the change stream's heartbeat interval (default 1).
    :param read_timeout_seconds: how long one partition's read waits for its watermark to
        reach the window end (default 300).
    :param evidence_delay_seconds: how long after a window's end the plan first asks
        (default 5).
    :param stall_policy: what a window does while a partition's low watermark stays behind
        its end: ``{"policy": "wait"}`` (the default), ``{"policy": "fail", "after_minutes": N}``
        or ``{"policy": "open", "after_minutes": N}`` (read what arrived, flagged unconfirmed).
    :param gcp_conn_id: the Google Cloud connection.
    :param impersonation_chain: a service account to impersonate, or a chain of them.
    :param options: the shared :class:`~airflow_cdc.operators.pipeline.PipelineOptions`.
    """
    from airflow_cdc.operators.pipeline import CdcPipeline

    return CdcPipeline(
        group_id=group_id,
        source=SOURCE_KIND,
        stream_id=stream_id or "".join(c if c.isalnum() else "_" for c in table_id).lower(),
        spec=bigtable_spec(
            project_id=project_id, instance_id=instance_id, table_id=table_id,
            app_profile_id=app_profile_id, heartbeat_seconds=heartbeat_seconds,
            read_timeout_seconds=read_timeout_seconds,
            evidence_delay_seconds=evidence_delay_seconds, stall_policy=stall_policy,
        ),
        source_conn={"gcp_conn_id": gcp_conn_id, "impersonation_chain": impersonation_chain},
        **options,
    )
