"""TaskGroup factories: one call adds a stream's whole window protocol to a DAG.

    with DAG(..., schedule=CronDataIntervalTimetable("@hourly", timezone="UTC")):
        cdc = SpannerChangeStreamPipeline(
            group_id="orders_cdc", instance_id="prod", database_id="shop",
            change_stream="OrdersStream", targets={"namespace": "current"},
        )
        cdc >> downstream_report

plan >> extract >> commit >> apply >> gate, each an ordinary, retryable Airflow task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow.providers.common.compat.sdk import TaskGroup

from airflow_cdc.hooks.state import DEFAULT_CONN_ID
from airflow_cdc.operators.spanner import (
    SpannerChangeStreamExtractOperator,
    SpannerChangeStreamPlanOperator,
    spanner_stream_config,
)
from airflow_cdc.operators.window import (
    DEFAULT_LEASE_SECONDS,
    CdcApplyOperator,
    CdcCommitWindowOperator,
)
from airflow_cdc.sensors.gate import CdcWindowCompleteSensor
from airflow_cdc.spark.iceberg import IcebergCatalog


def refuse_zero_width_schedule(dag) -> None:
    """Fail at parse time when the DAG's timetable gives windows of zero width."""
    if dag is None:
        return
    timetable = getattr(dag, "timetable", None)
    name = type(timetable).__name__
    if name in ("CronTriggerTimetable", "MultipleCronTriggerTimetable", "OnceTimetable",
                "ContinuousTimetable"):
        raise ValueError(
            f"DAG {dag.dag_id!r} is scheduled with {name}, whose data intervals have zero "
            f"width, so a CDC window would be empty. Use schedule="
            f"CronDataIntervalTimetable('<cron>', timezone='UTC') or "
            f"DeltaDataIntervalTimetable(timedelta(...)) from airflow.timetables"
        )


@dataclass(frozen=True)
class ProtocolSteps:
    """A source's operator classes for the protocol's steps, and their source arguments.

    ``apply`` is the same for every source: the changelog is source-agnostic.
    """

    plan: type
    extract: type
    commit: type = CdcCommitWindowOperator
    gate: type = CdcWindowCompleteSensor
    plan_args: Mapping[str, Any] = field(default_factory=dict)
    extract_args: Mapping[str, Any] = field(default_factory=dict)


def protocol_group(
    *,
    group_id: str,
    stream,
    steps: ProtocolSteps,
    catalog: IcebergCatalog | None,
    targets: Mapping[str, Any] | None,
    on_dead_letter: str,
    tombstone_horizon_seconds: int,
    cdc_state_conn_id: str,
    spark_conn_id: str | None,
    spark_conf: Mapping[str, str] | None,
    lease_seconds: float,
    gate_poke_interval: float,
    gate_timeout: float,
    gate_soft_fail: bool,
    deferrable: bool | None,
    source_tables: Sequence[str] | None,
    dag=None,
) -> TaskGroup:
    """The TaskGroup ``plan >> extract >> commit >> apply >> gate`` for one stream.

    Every source's factory builds its ``StreamConfig`` and step classes, then calls this,
    so the wiring, the shared arguments and the gate's Assets are the same for all.
    """
    from airflow_cdc.assets import pipeline_assets

    common = dict(
        stream=stream,
        catalog=catalog,
        cdc_state_conn_id=cdc_state_conn_id,
        lease_seconds=lease_seconds,
    )
    spark = dict(spark_conn_id=spark_conn_id, spark_conf=spark_conf)
    group_args = {"dag": dag} if dag is not None else {}
    with TaskGroup(group_id=group_id, **group_args) as group:
        plan = steps.plan(task_id="plan", **steps.plan_args, **common)
        extract = steps.extract(task_id="extract", **steps.extract_args, **common, **spark)
        commit = steps.commit(task_id="commit", **common)
        apply = CdcApplyOperator(
            task_id="apply",
            targets=targets,
            on_dead_letter=on_dead_letter,
            tombstone_horizon_seconds=tombstone_horizon_seconds,
            **common,
            **spark,
        )
        gate = steps.gate(
            task_id="gate",
            stream_id=stream.stream_id,
            cdc_state_conn_id=cdc_state_conn_id,
            poke_interval=gate_poke_interval,
            timeout=gate_timeout,
            soft_fail=gate_soft_fail,
            deferrable=deferrable,
            outlets=pipeline_assets(
                catalog=catalog,
                changelog_table=stream.changelog_table,
                targets=targets,
                source_tables=source_tables,
            ),
        )
        plan >> extract >> commit >> apply >> gate
    return group


def SpannerChangeStreamPipeline(  # noqa: N802 - a factory named like the group it makes
    *,
    group_id: str,
    instance_id: str,
    database_id: str,
    change_stream: str,
    project_id: str | None = None,
    stream_id: str | None = None,
    dialect: str = "GOOGLE_STANDARD_SQL",
    heartbeat_milliseconds: int = 10_000,
    gcp_conn_id: str = "google_cloud_default",
    impersonation_chain: str | Sequence[str] | None = None,
    catalog: IcebergCatalog | None = None,
    namespace: str = "cdc",
    targets: Mapping[str, Any] | None = None,
    on_dead_letter: str = "fail",
    tombstone_horizon_seconds: int = 7 * 24 * 3600,
    cdc_state_conn_id: str = DEFAULT_CONN_ID,
    spark_conn_id: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    work_root: str = "",
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    gate_poke_interval: float = 30,
    gate_timeout: float = 6 * 3600,
    dag=None,
    deferrable: bool | None = None,
    source_tables: Sequence[str] | None = None,
    gate_soft_fail: bool = False,
) -> TaskGroup:
    """One Spanner change stream into Iceberg: plan >> extract >> commit >> apply >> gate.

    ``deferrable`` (default: ``[operators] default_deferrable``) makes the gate wait in the
    triggerer instead of a worker slot. The gate's outlets are Airflow Assets for the
    stream's changelog and for the target of every table in ``source_tables`` and
    ``targets["mapping"]`` (see :func:`airflow_cdc.assets.pipeline_assets`); each window
    that completes emits one event per asset, with the window's bounds, low watermark,
    counts and snapshot ids as extra.
    """
    from airflow.sdk.definitions._internal.contextmanager import DagContext

    refuse_zero_width_schedule(dag or DagContext.get_current())
    stream = spanner_stream_config(
        stream_id=stream_id,
        instance_id=instance_id,
        database_id=database_id,
        change_stream=change_stream,
        project_id=project_id,
        dialect=dialect,
        heartbeat_milliseconds=heartbeat_milliseconds,
        namespace=namespace,
        work_root=work_root,
    )
    steps = ProtocolSteps(
        plan=SpannerChangeStreamPlanOperator,
        extract=SpannerChangeStreamExtractOperator,
        extract_args={"gcp_conn_id": gcp_conn_id, "impersonation_chain": impersonation_chain},
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
