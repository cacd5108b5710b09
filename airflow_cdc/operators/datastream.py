"""Datastream in a DAG: plan, extract, commit and gate operators and the pipeline factory.

``DatastreamPipeline(...)`` adds one TaskGroup, plan >> extract >> commit >> apply >> gate,
for one Datastream destination prefix (GCS or, for development, a local folder):

* plan lists the prefix (GCSHook with ``gcp_conn_id``) and records every settled file not
  consumed yet as a partition of the window: late files go to the next window, a re-run
  reads exactly the recorded files;
* extract runs ``spark_jobs/datastream_extract.py`` (JSON lines with exact decimals, Avro
  through fastavro with the schema's column types, ``column_types`` declared per table,
  uuid de-duplication, dead letters);
* commit records the outcome with Datastream's counts;
* apply is the shared apply job;
* the gate opens when an event read after the window end plus the allowed lateness was seen,
  or, with ``idle_timeout``, when an idle source is declared complete (then the window row's
  completeness note and the Asset event extra say ``idle-timeout``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.common.compat.sdk import TaskGroup

from airflow_cdc.hooks.state import DEFAULT_CONN_ID
from airflow_cdc.model import validate_identifier
from airflow_cdc.operators.window import (
    CdcCommitWindowOperator,
    CdcExtractOperator,
    CdcWindowOperator,
    run_owner,
    window_summary,
)
from airflow_cdc.pipeline.protocol import StreamConfig
from airflow_cdc.sensors.gate import CdcWindowCompleteSensor
from airflow_cdc.sources.datastream import SOURCE_KIND
from airflow_cdc.sources.datastream.progress import DEFAULT_ALLOWED_LATENESS
from airflow_cdc.sources.datastream.types import declared_column_types
from airflow_cdc.spark.iceberg import IcebergCatalog

IDLE_NOTE = "idle-timeout"


def datastream_stream_config(
    *,
    stream_id: str,
    prefix: str,
    namespace: str = "cdc",
    work_root: str = "",
    column_types: Mapping[str, Mapping[str, str]] | None = None,
) -> StreamConfig:
    """The stream config of one Datastream destination prefix (validated at parse time).

    ``column_types`` declares payload column types per source table (see
    :mod:`airflow_cdc.sources.datastream.types`); the extract job reads it from the plan.
    """
    validate_identifier("stream id", stream_id)
    if not prefix or not isinstance(prefix, str):
        raise ValueError(
            f"Datastream prefix {prefix!r} of stream {stream_id!r} is empty: give the "
            f"gs://bucket/path Datastream writes to (or a local folder for development)"
        )
    spec: dict = {"kind": SOURCE_KIND, "stream_id": stream_id, "prefix": prefix}
    if column_types:
        declared_column_types(column_types, stream_id)  # refuse a bad mapping when the DAG is parsed
        spec["column_types"] = {str(t): dict(c) for t, c in column_types.items()}
    return StreamConfig(
        stream_id=stream_id,
        source_kind=SOURCE_KIND,
        source_spec=spec,
        namespace=namespace,
        work_root=work_root,
    )


def _seconds(name: str, value: timedelta | float | None) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise ValueError(f"{name} {value!r} is negative: give a duration of zero or more")
    return seconds


class DatastreamPlanOperator(CdcWindowOperator):
    """Step 1: list the prefix; settled files not yet consumed become the window's partitions."""

    template_fields = ("gcp_conn_id",)

    def __init__(
        self,
        *,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        settle_seconds: float = 60,
        allowed_lateness: timedelta | float = DEFAULT_ALLOWED_LATENESS,
        idle_timeout: timedelta | float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.settle_seconds = _seconds("settle_seconds", settle_seconds)
        self.allowed_lateness_seconds = _seconds("allowed_lateness", allowed_lateness)
        self.idle_timeout_seconds = _seconds("idle_timeout", idle_timeout)

    def execute(self, context) -> dict:
        from airflow_cdc.hooks.datastream import DatastreamFilesHook
        from airflow_cdc.sources.datastream.discovery import settled_files
        from airflow_cdc.sources.datastream.window import plan_datastream_window

        config = self.stream_config
        window = self.window(context)
        now = datetime.now(timezone.utc)
        listed = DatastreamFilesHook(
            gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain
        ).list_event_files(config.source_spec["prefix"])
        files = settled_files(listed, now, self.settle_seconds)
        plan = plan_datastream_window(
            self.state_store(),
            config,
            window,
            run_owner(context),
            self.lease_seconds,
            files,
            now,
            self.iceberg_catalog.name,
            timedelta(seconds=self.allowed_lateness_seconds),
            None if self.idle_timeout_seconds is None else timedelta(seconds=self.idle_timeout_seconds),
        )
        return {
            "window_id": window.window_id,
            "attempt": plan.attempt,
            "files": len(plan.positions) - 1,
            "listed": len(listed),
            "unsettled": len(listed) - len(files),
        }


class DatastreamExtractOperator(CdcExtractOperator):
    """Step 2: the same protocol as every extract, running ``datastream_extract.py``."""

    job_entry_point = "datastream_extract"


class DatastreamCommitOperator(CdcCommitWindowOperator):
    """Step 3: record the outcome, keeping events, duplicates, dead letters and idle counts."""

    def execute(self, context) -> dict:
        from airflow_cdc.pipeline.protocol import commit_window

        window = self.window(context)
        record = commit_window(
            self.state_store(), self.stream_config, window, run_owner(context)
        )
        counts = dict(record.counts or {})
        return {**window_summary(record), **{k: counts.get(k) for k in (
            "events", "duplicates", "dead_letters", "files", "idle_declared")}}


class DatastreamWindowCompleteSensor(CdcWindowCompleteSensor):
    """The shared gate; a window declared complete by the idle timeout is marked as such."""

    def completeness(self, store, window, reason: str) -> tuple[str, dict]:
        record = store.get_window(window.stream_id, window.start)
        idle = bool(record is not None and (record.counts or {}).get("idle_declared"))
        if idle:
            reason = f"{IDLE_NOTE}: no events arrived and the idle timeout passed; {reason}"
        return reason, {"completeness": IDLE_NOTE if idle else "evidence"}


def DatastreamPipeline(  # noqa: N802 - a factory named like the group it makes
    *,
    group_id: str,
    prefix: str,
    stream_id: str,
    gcp_conn_id: str = "google_cloud_default",
    impersonation_chain: str | Sequence[str] | None = None,
    settle_seconds: float = 60,
    allowed_lateness: timedelta | float = DEFAULT_ALLOWED_LATENESS,
    idle_timeout: timedelta | float | None = None,
    catalog: IcebergCatalog | None = None,
    namespace: str = "cdc",
    targets: Mapping[str, Any] | None = None,
    on_dead_letter: str = "fail",
    tombstone_horizon_seconds: int = 7 * 24 * 3600,
    cdc_state_conn_id: str = DEFAULT_CONN_ID,
    spark_conn_id: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    work_root: str = "",
    lease_seconds: float = 2 * 3600,
    gate_poke_interval: float = 30,
    gate_timeout: float = 6 * 3600,
    gate_soft_fail: bool = False,
    deferrable: bool | None = None,
    source_tables: Sequence[str] | None = None,
    column_types: Mapping[str, Mapping[str, str]] | None = None,
    dag=None,
) -> TaskGroup:
    """One Datastream prefix into Iceberg: plan >> extract >> commit >> apply >> gate.

    ``source_tables`` are the Datastream objects as identifiers (``shop.orders`` ->
    ``shop_orders``); they become the gate's Assets, like the Spanner pipeline's.

    ``column_types`` types payload columns per source table, by the table's Datastream
    object name or its identifier form:
    ``{"shop.orders": {"amount": "DECIMAL(10,2)", "placed_at": "DATETIME", "birthday": "DATE",
    "paid_at": "TIMESTAMP"}}``. JSON payloads need it for dates, times and exact decimals
    (JSON has none); a declared type also wins over the Avro schema's. Undeclared JSON
    columns are typed from their values (a fractional number as NUMERIC(38,<its scale>)).
    A value that does not fit its column's type is dead-lettered with the reason.
    """
    from airflow.sdk.definitions._internal.contextmanager import DagContext

    from airflow_cdc.operators.pipeline import ProtocolSteps, protocol_group, refuse_zero_width_schedule

    refuse_zero_width_schedule(dag or DagContext.get_current())
    stream = datastream_stream_config(
        stream_id=stream_id, prefix=prefix, namespace=namespace, work_root=work_root,
        column_types=column_types,
    )
    steps = ProtocolSteps(
        plan=DatastreamPlanOperator,
        extract=DatastreamExtractOperator,
        commit=DatastreamCommitOperator,
        gate=DatastreamWindowCompleteSensor,
        plan_args={
            "gcp_conn_id": gcp_conn_id,
            "impersonation_chain": impersonation_chain,
            "settle_seconds": settle_seconds,
            "allowed_lateness": allowed_lateness,
            "idle_timeout": idle_timeout,
        },
    )
    return protocol_group(
        group_id=group_id,
        stream=stream,
        steps=steps,
        catalog=catalog,
        targets=targets,
        on_dead_letter=on_dead_letter,
        tombstone_horizon_seconds=tombstone_horizon_seconds,
        cdc_state_conn_id=cdc_state_conn_id,
        spark_conn_id=spark_conn_id,
        spark_conf=spark_conf,
        lease_seconds=lease_seconds,
        gate_poke_interval=gate_poke_interval,
        gate_timeout=gate_timeout,
        gate_soft_fail=gate_soft_fail,
        deferrable=deferrable,
        source_tables=source_tables,
        dag=dag,
    )
