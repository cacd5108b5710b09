"""Datastream in a DAG: plan, extract, commit and gate operators and the pipeline factory.

``DatastreamPipeline(...)`` adds one TaskGroup, plan >> extract >> commit >> apply >> gate,
for one Datastream destination prefix (GCS or, for development, a local folder):

* plan lists the prefix (GCSHook with ``gcp_conn_id``) and records every settled file not
  consumed yet as a partition of the window: late files go to the next window, a re-run
  reads exactly the recorded files; with ``key_columns_conn_id`` it also looks up the
  primary keys of the source tables (kept in the plan file for re-runs);
* extract runs ``spark_jobs/datastream_extract.py`` (JSON lines with exact decimals, Avro
  through fastavro with the schema's column types, ``column_types`` declared per table,
  uuid de-duplication, dead letters);
* commit records the outcome with Datastream's counts, among them ``rowid_keyed_tables``:
  the tables keyed by Oracle ROWID because no key was declared or found;
* apply is the shared apply job;
* the gate opens when an event read after the window end plus the allowed lateness was seen,
  or, with ``idle_timeout``, when an idle source is declared complete (then the window row's
  completeness note and the Asset event extra say ``idle-timeout``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.common.compat.sdk import TaskGroup

from airflow_cdc.hooks.state import DEFAULT_CONN_ID
from airflow_cdc.model import format_ts, validate_identifier
from airflow_cdc.operators.task_context import run_owner, window_summary
from airflow_cdc.operators.window import (
    CdcCommitWindowOperator,
    CdcExtractOperator,
    CdcPlanOperator,
)
from airflow_cdc.pipeline.protocol import StreamConfig
from airflow_cdc.sensors.gate import CdcWindowCompleteSensor
from airflow_cdc.sources.datastream import SOURCE_KIND
from airflow_cdc.sources.datastream.events import object_identifier
from airflow_cdc.sources.datastream.keys import (
    SOURCE_PRIMARY_KEYS_OPTION,
    declared_key_columns,
    tables_to_look_up,
)
from airflow_cdc.sources.datastream.progress import DEFAULT_ALLOWED_LATENESS
from airflow_cdc.sources.datastream.types import declared_column_types

IDLE_NOTE = "idle-timeout"


def datastream_stream_config(
    *,
    stream_id: str,
    prefix: str,
    namespace: str = "cdc",
    work_root: str = "",
    key_columns: Mapping[str, Sequence[str]] | None = None,
    column_types: Mapping[str, Mapping[str, str]] | None = None,
) -> StreamConfig:
    """The stream config of one Datastream destination prefix (validated at parse time).

    ``key_columns`` (validated by :func:`declared_key_columns`) ride in the source spec, keyed
    by table identifier; a stream without them keeps the spec, so the fingerprint, it had.
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
    declared = declared_key_columns(key_columns)
    if declared:
        spec["key_columns"] = declared
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


class DatastreamWindowProbe:
    """Step 0 for Datastream: may the window be planned now? (see ``sources/datastream/readiness``)

    Built from JSON kwargs, in the plan task or in the triggerer; it reads the state store
    (the stream's consumed files and read progress) and lists the prefix, downloading only
    settled files new enough to hold the window's evidence, each once.
    """

    def __init__(
        self,
        *,
        stream_id: str,
        prefix: str,
        window_start: str,
        window_end: str,
        cdc_state_conn_id: str = DEFAULT_CONN_ID,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        settle_seconds: float = 60,
        allowed_lateness_seconds: float = DEFAULT_ALLOWED_LATENESS.total_seconds(),
        idle_timeout_seconds: float | None = None,
    ) -> None:
        from airflow_cdc.hooks.datastream import DatastreamFilesHook
        from airflow_cdc.model import Window, parse_ts
        from airflow_cdc.sources.datastream.readiness import WindowEvidence

        self.window = Window(stream_id, parse_ts(window_start), parse_ts(window_end))
        self.prefix = prefix
        self.cdc_state_conn_id = cdc_state_conn_id
        self.files = DatastreamFilesHook(
            gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain
        )
        self.settle_seconds = float(settle_seconds)
        self.allowed_lateness = timedelta(seconds=float(allowed_lateness_seconds))
        self.idle_timeout = (
            None if idle_timeout_seconds is None else timedelta(seconds=float(idle_timeout_seconds))
        )
        self.evidence = WindowEvidence(lambda f: self.files.read_event_file(f.path))
        self._store = None

    def check(self, now: datetime):
        from airflow_cdc.hooks.state import CdcStateHook
        from airflow_cdc.model import Readiness
        from airflow_cdc.pipeline.protocol import predecessor_readiness
        from airflow_cdc.sources.datastream import PROGRESS_PARTITION

        if self._store is None:
            self._store = CdcStateHook(cdc_state_conn_id=self.cdc_state_conn_id).get_store()
        store, window = self._store, self.window
        if store.get_window(window.stream_id, window.start) is not None:
            return Readiness(True, "the window was planned before: its recorded plan is read")
        waiting = predecessor_readiness(store, window)
        if waiting is not None:
            return waiting
        known = store.list_partitions(window.stream_id)
        progress = next((p.watermark for p in known if p.partition_id == PROGRESS_PARTITION), None)
        return self.evidence.readiness(
            window,
            now,
            lambda: self.files.list_event_files(self.prefix),
            {p.partition_id for p in known},
            progress,
            self.allowed_lateness,
            self.settle_seconds,
            self.idle_timeout,
        )


class DatastreamPlanOperator(CdcPlanOperator):
    """Steps 0 and 1: wait until the window's evidence can be read, then list the prefix;
    settled files not yet consumed become the window's partitions.

    The wait (deferrable) ends once an event read at or after the window end plus
    ``allowed_lateness`` has landed in a settled file (or the stream's progress already
    covers the window, or ``idle_timeout`` passed): the window then reads that evidence and
    its gate opens as soon as apply commits.

    With ``key_columns_conn_id`` (a connection to the source database) the primary keys of
    ``source_tables`` without declared key columns are looked up when the window is first
    planned; a table without a primary key stays keyless (Oracle: keyed by ROWID).
    """

    template_fields = ("gcp_conn_id", "key_columns_conn_id")

    def __init__(
        self,
        *,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        settle_seconds: float = 60,
        allowed_lateness: timedelta | float = DEFAULT_ALLOWED_LATENESS,
        idle_timeout: timedelta | float | None = None,
        key_columns_conn_id: str | None = None,
        source_tables: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.key_columns_conn_id = key_columns_conn_id
        self.key_lookup_tables = (
            tables_to_look_up(source_tables, self.stream.source_spec.get("key_columns") or {})
            if key_columns_conn_id else []
        )
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.settle_seconds = _seconds("settle_seconds", settle_seconds)
        self.allowed_lateness_seconds = _seconds("allowed_lateness", allowed_lateness)
        self.idle_timeout_seconds = _seconds("idle_timeout", idle_timeout)

    def readiness_probe(self, context) -> tuple[str, dict]:
        window = self.window(context)
        return (
            f"{DatastreamWindowProbe.__module__}:{DatastreamWindowProbe.__qualname__}",
            {
                "stream_id": window.stream_id,
                "prefix": self.stream.source_spec["prefix"],
                "window_start": format_ts(window.start),
                "window_end": format_ts(window.end),
                "cdc_state_conn_id": self.cdc_state_conn_id,
                "gcp_conn_id": self.gcp_conn_id,
                "impersonation_chain": self.impersonation_chain,
                "settle_seconds": self.settle_seconds,
                "allowed_lateness_seconds": self.allowed_lateness_seconds,
                "idle_timeout_seconds": self.idle_timeout_seconds,
            },
        )

    def plan(self, context) -> dict:
        from airflow_cdc.hooks.datastream import DatastreamFilesHook
        from airflow_cdc.pipeline.protocol import plan_window
        from airflow_cdc.sources.datastream.discovery import file_partitions, settled_files
        from airflow_cdc.sources.datastream.plan import initial_positions, plan_options

        config = self.stream_config
        window = self.window(context)
        now = datetime.now(timezone.utc)
        listed = DatastreamFilesHook(
            gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain
        ).list_event_files(config.source_spec["prefix"])
        files = settled_files(listed, now, self.settle_seconds)
        store = self.state_store()

        def options(kept):
            return plan_options(
                kept,
                planned_at=now,
                allowed_lateness=timedelta(seconds=self.allowed_lateness_seconds),
                idle_timeout=None if self.idle_timeout_seconds is None
                else timedelta(seconds=self.idle_timeout_seconds),
                dead_letter_table=f"{self.iceberg_catalog.name}.{config.dead_letter_table}",
                source_primary_keys=self.look_up_primary_keys if self.key_lookup_tables else None,
            )

        plan = self.open_window(context, store, window, lambda: plan_window(
            store,
            config,
            window,
            run_owner(context),
            self.lease_seconds,
            initial_positions(window),
            self.iceberg_catalog.name,
            new_partitions=file_partitions(files, window.start),
            plan_options=options,
        ))
        return {
            "window_id": window.window_id,
            "attempt": plan.attempt,
            "files": len(plan.positions) - 1,
            "listed": len(listed),
            "unsettled": len(listed) - len(files),
            SOURCE_PRIMARY_KEYS_OPTION: plan.options.get(SOURCE_PRIMARY_KEYS_OPTION, {}),
        }

    def look_up_primary_keys(self) -> dict[str, list[str]]:
        """{table identifier: primary-key columns} of the source tables that have one."""
        from airflow_cdc.hooks.source_keys import SourcePrimaryKeyHook

        found = SourcePrimaryKeyHook(self.key_columns_conn_id).primary_keys(self.key_lookup_tables)
        keyless = sorted(f"{schema}.{table}" for (schema, table), columns in found.items() if not columns)
        if keyless:
            self.log.warning(
                "source tables without a primary key in %s: %s; their events are keyed by "
                "Oracle ROWID (other sources refuse them): declare key_columns for them if "
                "they have a unique key", self.key_columns_conn_id, keyless,
            )
        return {
            object_identifier(f"{schema}.{table}"): columns
            for (schema, table), columns in found.items()
            if columns
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
            self.state_store(), self.stream_config, window, run_owner(context), self.lease_seconds
        )
        counts = dict(record.counts or {})
        if counts.get("rowid_keyed_tables"):
            self.log.warning(
                "window %s keyed tables %s by Oracle ROWID: no key columns were declared or "
                "found for them, and a row that moves gets a new ROWID (a new target row); "
                "declare key_columns or give key_columns_conn_id if they have a key",
                window.window_id, counts["rowid_keyed_tables"],
            )
        return {**window_summary(record), **{k: counts.get(k) for k in (
            "events", "duplicates", "dead_letters", "files", "idle_declared",
            "rowid_keyed_tables")}}


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
    source_tables: Sequence[str] | None = None,
    wait_poke_interval: float = 15,
    key_columns: Mapping[str, Sequence[str]] | None = None,
    key_columns_conn_id: str | None = None,
    column_types: Mapping[str, Mapping[str, str]] | None = None,
    **options: Any,
) -> TaskGroup:
    """One Datastream prefix into Iceberg: plan >> extract >> commit >> apply >> gate.

    ``options`` are the shared :class:`~airflow_cdc.operators.pipeline.PipelineOptions`
    (targets, catalog, Spark, leases, ``deferrable``, ``gate_timeout`` ...).

    The plan task waits (deferred with ``deferrable``) until the window's evidence can be
    read: an event read at or after the window end plus ``allowed_lateness``, in a file
    unchanged for ``settle_seconds``. It checks every ``wait_poke_interval`` seconds, and
    gives up after ``gate_timeout`` (the window stays unplanned). A window's gate therefore
    opens about ``allowed_lateness + settle_seconds`` plus the Spark jobs' run time after
    the window end.

    ``source_tables`` are the Datastream objects, named as Datastream names them
    (``HR.EMPLOYEES``) or as identifiers (``HR_EMPLOYEES``); their identifier forms become
    the gate's Assets, like the Spanner pipeline's.

    Keys: ``key_columns`` declares the key columns of tables, e.g.
    ``{"HR.EMPLOYEES": ["EMPLOYEE_ID"]}`` (either name form). ``key_columns_conn_id`` is an
    Airflow connection to the source database: each window's plan looks up the primary key
    of every source table without declared keys (those must then be named
    ``SCHEMA.TABLE``). An event's key is, first that applies: declared or looked-up key
    columns, Datastream's ``primary_keys``, SQL Server's ``replication_index``, Oracle's
    ROWID (only for a table with none of these; the commit step names such tables in
    ``rowid_keyed_tables``). Changing ``key_columns`` changes the stream's fingerprint:
    existing targets are keyed by the old columns, so the stream must be reset.

    ``column_types`` types payload columns per source table, by the table's Datastream
    object name or its identifier form:
    ``{"shop.orders": {"amount": "DECIMAL(10,2)", "placed_at": "DATETIME", "birthday": "DATE",
    "paid_at": "TIMESTAMP"}}``. JSON payloads need it for dates, times and exact decimals
    (JSON has none); a declared type also wins over the Avro schema's. Undeclared JSON
    columns are typed from their values (a fractional number as NUMERIC(38,<its scale>)).
    A value that does not fit its column's type is dead-lettered with the reason.
    """
    from airflow.sdk.definitions._internal.contextmanager import DagContext

    from airflow_cdc.operators.pipeline import (
        PipelineOptions,
        ProtocolSteps,
        protocol_group,
        refuse_zero_width_schedule,
    )

    shared = PipelineOptions.named("DatastreamPipeline", options)
    refuse_zero_width_schedule(shared.dag or DagContext.get_current())
    stream = datastream_stream_config(
        stream_id=stream_id, prefix=prefix, namespace=shared.namespace,
        work_root=shared.work_root, key_columns=key_columns, column_types=column_types,
    )
    if key_columns_conn_id is not None:
        if not key_columns_conn_id or not isinstance(key_columns_conn_id, str):
            raise ValueError(
                f"key_columns_conn_id {key_columns_conn_id!r} of stream {stream_id!r} is not a "
                f"connection id: give the id of an Airflow connection to the source database"
            )
        if not source_tables:
            raise ValueError(
                f"key_columns_conn_id {key_columns_conn_id!r} of stream {stream_id!r} looks up "
                f"the primary keys of source_tables, but none are given: list them as "
                f"SCHEMA.TABLE (e.g. source_tables=['HR.EMPLOYEES'])"
            )
        tables_to_look_up(source_tables, stream.source_spec.get("key_columns") or {})
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
            "deferrable": shared.deferrable,
            "wait_poke_interval": wait_poke_interval,
            "wait_timeout": shared.gate_timeout,
            "key_columns_conn_id": key_columns_conn_id,
            "source_tables": source_tables,
        },
    )
    # Assets are named by table identifier, whichever form the DAG used.
    assets = [object_identifier(t) for t in source_tables or ()] or None
    return protocol_group(
        group_id=group_id, stream=stream, steps=steps,
        options=replace(shared, source_tables=assets),
    )
