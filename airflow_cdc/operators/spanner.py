"""Spanner change streams in a DAG: the stream config the pipeline and custom DAGs use.

``SpannerChangeStreamPipeline`` (in :mod:`airflow_cdc.operators.pipeline`) is the shortcut
for ``CdcPipeline(source="spanner_change_stream", ...)``; the source itself is
:class:`airflow_cdc.sources.spanner.source.SpannerChangeStreamSource`.
"""

from __future__ import annotations

from airflow_cdc.pipeline.protocol import StreamConfig
from airflow_cdc.sources.spanner.query import GOOGLE_SQL

SOURCE_KIND = "spanner_change_stream"


def spanner_stream_config(
    *,
    stream_id: str | None = None,
    instance_id: str,
    database_id: str,
    change_stream: str,
    project_id: str | None = None,
    dialect: str = GOOGLE_SQL,
    heartbeat_milliseconds: int = 10_000,
    namespace: str = "cdc",
    work_root: str = "",
) -> StreamConfig:
    """The stream config of one Spanner change stream (validated before any task runs)."""
    return StreamConfig.for_source(
        SOURCE_KIND,
        stream_id or change_stream.lower(),
        {
            "stream_name": change_stream,
            "dialect": dialect,
            "heartbeat_milliseconds": heartbeat_milliseconds,
            "connection": {"project": project_id or "", "instance": instance_id,
                           "database": database_id},
        },
        namespace=namespace,
        work_root=work_root,
    )
