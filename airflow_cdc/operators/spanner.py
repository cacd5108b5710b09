"""Spanner change streams in a DAG: the plan and extract operators and the pipeline factory.

``SpannerChangeStreamPipeline(...)`` adds one TaskGroup, plan >> extract >> commit >> apply
>> gate, for one change stream. The individual operators are here for custom DAGs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_cdc.operators.task_context import run_owner
from airflow_cdc.operators.window import CdcExtractOperator, CdcWindowOperator
from airflow_cdc.pipeline.protocol import StreamConfig, plan_window
from airflow_cdc.sources.spanner.query import GOOGLE_SQL, INITIAL_PARTITION, build_query
from airflow_cdc.model import PartitionPosition, validate_identifier

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
    from datetime import datetime, timezone

    build_query(dialect, change_stream, datetime.now(timezone.utc), None, None,
                heartbeat_milliseconds)
    stream_id = stream_id or change_stream.lower()
    validate_identifier("stream id", stream_id)
    return StreamConfig(
        stream_id=stream_id,
        source_kind=SOURCE_KIND,
        source_spec={
            "kind": SOURCE_KIND,
            "stream_id": stream_id,
            "stream_name": change_stream,
            "dialect": dialect,
            "heartbeat_milliseconds": int(heartbeat_milliseconds),
            "connection": {
                "project": project_id or "",
                "instance": instance_id,
                "database": database_id,
            },
        },
        namespace=namespace,
        work_root=work_root,
    )


class SpannerChangeStreamPlanOperator(CdcWindowOperator):
    """Step 1: open the window; the first window starts from the NULL partition token."""

    def execute(self, context) -> dict:
        config = self.stream_config
        window = self.window(context)
        store = self.state_store()
        plan = self.open_window(context, store, window, lambda: plan_window(
            store,
            config,
            window,
            run_owner(context),
            self.lease_seconds,
            [PartitionPosition(partition_id=INITIAL_PARTITION, start=window.start)],
            self.iceberg_catalog.name,
        ))
        return {
            "window_id": window.window_id,
            "attempt": plan.attempt,
            "partitions": len(plan.positions),
            "pending_children": len(plan.pending_children),
        }


class SpannerChangeStreamExtractOperator(CdcExtractOperator):
    """Step 2 for Spanner: connection details (and a short-lived token) reach the job here."""

    def __init__(
        self,
        *,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        pass_credentials: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.pass_credentials = pass_credentials
        self._resolved_project: str | None = None

    def source_datasets(self) -> list:
        from airflow_cdc.assets import spanner_change_stream_dataset

        return [spanner_change_stream_dataset(self.stream.source_spec, self._resolved_project)]

    def source_overrides(self, context) -> dict:
        from airflow_cdc.hooks.spanner import SpannerChangeStreamHook

        connection = self.stream.source_spec["connection"]
        hook = SpannerChangeStreamHook(
            gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain
        )
        resolved = hook.connection_for(
            connection["instance"],
            connection["database"],
            connection.get("project") or None,
            pass_credentials=self.pass_credentials,
        )
        self._resolved_project = resolved.project
        return {
            "connection": {
                "project": resolved.project,
                "emulator_host": resolved.emulator_host,
                "access_token": resolved.access_token,
            }
        }
