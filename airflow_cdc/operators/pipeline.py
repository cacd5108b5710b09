"""TaskGroup factories: one call adds a stream's whole window protocol to a DAG.

    with DAG(..., schedule=CronDataIntervalTimetable("@hourly", timezone="UTC")):
        cdc = CdcPipeline(
            group_id="orders_cdc", source="spanner_change_stream", stream_id="orders",
            spec={"stream_name": "OrdersStream",
                  "connection": {"instance": "prod", "database": "shop"}},
            targets={"namespace": "current"},
        )
        cdc >> downstream_report

plan >> extract >> commit >> apply >> gate, each an ordinary, retryable Airflow task, the same
operators for every source. ``SpannerChangeStreamPipeline`` (here), ``DatastreamPipeline``,
``BigtableChangeStreamPipeline``, ``DebeziumPipeline`` and ``SpannerCommitTimestampPipeline``
(in their sources' modules) are shortcuts that name their source's arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from airflow.providers.common.compat.sdk import TaskGroup

from airflow_cdc.hooks.state import DEFAULT_CONN_ID
from airflow_cdc.operators.spanner import spanner_stream_config
from airflow_cdc.operators.apply import CdcApplyOperator
from airflow_cdc.operators.commit import CdcCommitWindowOperator
from airflow_cdc.operators.extract import CdcExtractOperator
from airflow_cdc.operators.plan import DEFAULT_WAIT_TIMEOUT, CdcPlanOperator
from airflow_cdc.pipeline.apply_step import DEFAULT_TOMBSTONE_HORIZON_SECONDS, ApplySettings
from airflow_cdc.pipeline.catchup import DEFAULT_MAX_CATCHUP, CatchupLimit
from airflow_cdc.pipeline.empty_window import DEFAULT_PROBE_LIMIT
from airflow_cdc.pipeline.lease import DEFAULT_LEASE_SECONDS
from airflow_cdc.pipeline.protocol import StreamConfig
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
class PipelineOptions:
    """What every pipeline takes, whatever its source: where its tables go, how its Spark jobs
    run, how long a window is leased, and how its plan and gate wait.

    Every factory (``CdcPipeline`` and each source's shortcut, e.g. ``DatastreamPipeline``)
    takes these as keyword arguments next to its source's own, with these defaults.

    :param catalog: the Iceberg catalog (:class:`~airflow_cdc.spark.iceberg.IcebergCatalog`);
        default: the local Hadoop catalog.
    :param iceberg_conn_id: an ``iceberg_catalog`` connection instead of ``catalog``.
    :param namespace: the Iceberg namespace of the stream's changelog and dead letters.
    :param targets: the apply job's ``targets`` (``namespace``, ``mapping``, ``history``,
        ``write_mode``, ``compact_delete_files``; see
        :class:`~airflow_cdc.operators.apply.CdcApplyOperator`).
    :param on_dead_letter: ``fail`` (the window fails and names the bad rows) or ``continue``.
    :param tombstone_horizon_seconds: how long deletes are remembered (I3).
    :param cdc_state_conn_id: the state store's connection.
    :param spark_conn_id: a Spark connection for the Spark jobs (None: local Spark on the
        worker).
    :param spark_conf: Spark properties for the Spark jobs.
    :param dataproc: run the Spark jobs on Dataproc
        (:class:`~airflow_cdc.spark.dataproc.DataprocCluster` or
        :class:`~airflow_cdc.spark.dataproc.DataprocServerless`).
    :param work_root: where plan and outcome files live, a folder or a ``gs://`` URI (empty:
        :func:`~airflow_cdc.pipeline.work_folder.default_work_root` when the task runs).
    :param lease_seconds: how long a window's lease lasts between renewals.
    :param gate_poke_interval: seconds between two looks of the gate.
    :param gate_timeout: seconds after which the gate fails; it also bounds the plan task's
        wait for a source's evidence.
    :param gate_soft_fail: a gate that times out is skipped instead of failed.
    :param deferrable: plan, gate and Dataproc jobs wait in the triggerer (default
        ``[operators] default_deferrable``).
    :param source_tables: source tables whose targets become the gate's Assets (see
        :func:`airflow_cdc.assets.pipeline_assets`).
    :param dag: the DAG to add the group to (None: the DAG of the ``with`` block).
    :param fuse_apply: the window's apply runs in the extract's Spark application (the apply
        task records it); saves one Spark application per window.
    :param empty_window_probe_limit: probe a window for emptiness in the worker when the
        previous one had at most this many changes (-1: never); see
        :mod:`airflow_cdc.pipeline.empty_window`.
    :param warm_driver_idle_seconds: run the Spark jobs in a warm driver on the worker, kept
        this many seconds after its last job (None: a spark-submit per job); see
        :mod:`airflow_cdc.spark.warm`.
    :param max_catchup: when the stream is behind (an outage, a paused DAG, a backfill), one
        window may read the following intervals of the schedule that are ready too, up to
        this limit: a ``timedelta`` (the longest window), an ``int`` (the most intervals one
        window reads) or None (one interval per window). The runs of the intervals it read
        run no Spark job; their gates open with it. See :mod:`airflow_cdc.pipeline.catchup`.
    :param asset_partitions: the gate's Asset events carry the run's interval as partition
        key, for downstream DAGs scheduled with ``PartitionedAssetTimetable`` (which then run
        once per interval); Airflow queues keyed events for those DAGs only, so off by
        default (see :class:`~airflow_cdc.sensors.gate.CdcWindowCompleteSensor`).
    """

    catalog: IcebergCatalog | None = None
    iceberg_conn_id: str | None = None
    namespace: str = "cdc"
    targets: Mapping[str, Any] | None = None
    on_dead_letter: str = "fail"
    tombstone_horizon_seconds: int = DEFAULT_TOMBSTONE_HORIZON_SECONDS
    cdc_state_conn_id: str = DEFAULT_CONN_ID
    spark_conn_id: str | None = None
    spark_conf: Mapping[str, str] | None = None
    dataproc: Any = None
    work_root: str = ""
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    gate_poke_interval: float = 30
    gate_timeout: float = DEFAULT_WAIT_TIMEOUT
    gate_soft_fail: bool = False
    deferrable: bool | None = None
    source_tables: Sequence[str] | None = None
    dag: Any = None
    fuse_apply: bool = True
    empty_window_probe_limit: int = DEFAULT_PROBE_LIMIT
    warm_driver_idle_seconds: float | None = None
    max_catchup: Any = DEFAULT_MAX_CATCHUP
    asset_partitions: bool = False

    def __post_init__(self) -> None:
        CatchupLimit.parse(self.max_catchup)  # a bad limit fails when the DAG is parsed

    @classmethod
    def named(cls, factory: str, options: Mapping[str, Any]) -> PipelineOptions:
        """The options a factory was given; an unknown name is refused naming the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(
                f"{factory}() got unknown argument(s) {unknown}: besides its source's own "
                f"arguments it takes the shared pipeline options {sorted(known)}"
            )
        return cls(**options)


def protocol_group(
    *,
    group_id: str,
    stream: StreamConfig,
    options: PipelineOptions,
    source_conn: Mapping[str, Any] | None = None,
    wait_poke_interval: float = 30,
) -> TaskGroup:
    """The TaskGroup ``plan >> extract >> commit >> apply >> gate`` for one stream.

    The operators are the same for every source; the stream's spec names the source, and
    ``source_conn`` are the arguments of the source's Airflow hook.
    """
    common = dict(
        stream=stream,
        catalog=options.catalog,
        iceberg_conn_id=options.iceberg_conn_id,
        cdc_state_conn_id=options.cdc_state_conn_id,
        lease_seconds=options.lease_seconds,
    )
    spark = dict(spark_conn_id=options.spark_conn_id, spark_conf=options.spark_conf,
                 dataproc=options.dataproc, deferrable=options.deferrable,
                 warm_driver_idle_seconds=options.warm_driver_idle_seconds)
    group_args = {"dag": options.dag} if options.dag is not None else {}
    with TaskGroup(group_id=group_id, **group_args) as group:
        plan = CdcPlanOperator(
            task_id="plan",
            source_conn=source_conn,
            deferrable=options.deferrable,
            wait_poke_interval=wait_poke_interval,
            wait_timeout=options.gate_timeout,
            max_catchup=options.max_catchup,
            **common,
        )
        settings = ApplySettings(
            targets=options.targets,
            on_dead_letter=options.on_dead_letter,
            tombstone_horizon_seconds=options.tombstone_horizon_seconds,
        )
        extract = CdcExtractOperator(
            task_id="extract",
            source_conn=source_conn,
            fused_apply=settings if options.fuse_apply else None,
            empty_window_probe_limit=options.empty_window_probe_limit,
            **common,
            **spark,
        )
        commit = CdcCommitWindowOperator(task_id="commit", **common)
        apply = CdcApplyOperator(
            task_id="apply",
            targets=settings.targets,
            on_dead_letter=settings.on_dead_letter,
            tombstone_horizon_seconds=settings.tombstone_horizon_seconds,
            **common,
            **spark,
        )
        plan.skip_when_covered = (extract.task_id, commit.task_id, apply.task_id)
        plan >> extract >> commit >> apply >> gate_task(stream, options)
    return group


def gate_task(stream: StreamConfig, options: PipelineOptions) -> CdcWindowCompleteSensor:
    """The group's gate: its outlets are the stream's Assets (changelog and targets)."""
    from airflow_cdc.assets import pipeline_assets

    return CdcWindowCompleteSensor(
        task_id="gate",
        # The plan of an interval a catch-up window covers skips extract, commit and apply;
        # the gate still runs (it waits for that window and emits the interval's events).
        trigger_rule="none_failed",
        stream_id=stream.stream_id,
        source=stream.source_name,
        cdc_state_conn_id=options.cdc_state_conn_id,
        poke_interval=options.gate_poke_interval,
        timeout=options.gate_timeout,
        soft_fail=options.gate_soft_fail,
        deferrable=options.deferrable,
        asset_partitions=options.asset_partitions,
        outlets=pipeline_assets(
            catalog=options.catalog,
            changelog_table=stream.changelog_table,
            targets=options.targets,
            source_tables=options.source_tables,
        ),
    )


def pipeline_group(
    factory: str,
    group_id: str,
    stream: Callable[[PipelineOptions], StreamConfig],
    options: Mapping[str, Any],
    source_conn: Mapping[str, Any] | None = None,
    wait_poke_interval: float = 30,
    **overrides: Any,
) -> TaskGroup:
    """What every factory does once it has its source's arguments: check the shared options
    (an unknown name is refused), refuse a zero-width schedule, build the stream
    (``stream(options)``: the namespace and work folder are shared options) and the group."""
    from dataclasses import replace

    from airflow.sdk.definitions._internal.contextmanager import DagContext

    shared = PipelineOptions.named(factory, options)
    refuse_zero_width_schedule(shared.dag or DagContext.get_current())
    return protocol_group(
        group_id=group_id, stream=stream(shared), options=replace(shared, **overrides),
        source_conn=source_conn, wait_poke_interval=wait_poke_interval,
    )


def CdcPipeline(  # noqa: N802 - a factory named like the group it makes
    *,
    group_id: str,
    source: str,
    stream_id: str,
    spec: Mapping[str, Any],
    source_conn: Mapping[str, Any] | None = None,
    wait_poke_interval: float = 30,
    **options: Any,
) -> TaskGroup:
    """One stream of any source into Iceberg: plan >> extract >> commit >> apply >> gate.

    :param group_id: the TaskGroup's id.
    :param source: the source: a registered kind (``"spanner_change_stream"``,
        ``"datastream"``, or one an installed package registers) or an import path
        (``"my_package.source:MySource"``).
    :param stream_id: the stream's id (names its changelog, state rows and work folder).
    :param spec: the source's JSON configuration, validated by the source when the DAG is
        parsed.
    :param source_conn: the arguments of the source's Airflow hook (connection ids).
    :param wait_poke_interval: how often the plan task asks a source whose evidence comes
        after the window end.
    :param options: the shared :class:`PipelineOptions`.
    """
    def stream(shared: PipelineOptions) -> StreamConfig:
        return StreamConfig.for_source(
            source, stream_id, spec, namespace=shared.namespace, work_root=shared.work_root
        )

    return pipeline_group("CdcPipeline", group_id, stream, options, source_conn, wait_poke_interval)


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
    **options: Any,
) -> TaskGroup:
    """One Spanner change stream into Iceberg: the shortcut for
    ``CdcPipeline(source="spanner_change_stream", ...)`` naming Spanner's arguments.

    The gate's outlets are Airflow Assets for the stream's changelog and for the target of
    every table in ``source_tables`` and ``targets["mapping"]`` (see
    :func:`airflow_cdc.assets.pipeline_assets`); each window that completes emits one event
    per asset, with the window's bounds, low watermark, counts and snapshot ids as extra.

    :param group_id: the TaskGroup's id.
    :param instance_id: the Spanner instance.
    :param database_id: the Spanner database.
    :param change_stream: the change stream's name.
    :param project_id: the Google Cloud project (None: the connection's).
    :param stream_id: the stream's id (None: the change stream's name in lower case).
    :param dialect: the database's dialect, ``GOOGLE_STANDARD_SQL`` or ``POSTGRESQL``.
    :param heartbeat_milliseconds: the change stream query's heartbeat interval.
    :param gcp_conn_id: the Google Cloud connection.
    :param impersonation_chain: a service account to impersonate, or a chain of them.
    :param options: the shared :class:`PipelineOptions` (targets, catalog, Spark, leases,
        ``deferrable``, the gate's timeout ...).
    """
    def stream(shared: PipelineOptions) -> StreamConfig:
        return spanner_stream_config(
            stream_id=stream_id, instance_id=instance_id, database_id=database_id,
            change_stream=change_stream, project_id=project_id, dialect=dialect,
            heartbeat_milliseconds=heartbeat_milliseconds, namespace=shared.namespace,
            work_root=shared.work_root,
        )

    return pipeline_group(
        "SpannerChangeStreamPipeline", group_id, stream, options,
        {"gcp_conn_id": gcp_conn_id, "impersonation_chain": impersonation_chain},
    )
