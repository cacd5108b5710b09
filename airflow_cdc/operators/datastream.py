"""Datastream in a DAG: the stream config and the pipeline shortcut.

``DatastreamPipeline(...)`` is ``CdcPipeline(source="datastream", ...)`` with Datastream's
arguments named: one TaskGroup, plan >> extract >> commit >> apply >> gate, for one Datastream
destination prefix (GCS or, for development, a local folder). What is Datastream's own lives
in :mod:`airflow_cdc.sources.datastream` (the source) and
:class:`airflow_cdc.hooks.datastream.DatastreamSourceHook` (listing GCS, looking up keys):

* plan waits until the window's evidence can be read, lists the prefix and records every
  settled file not consumed yet as a partition of the window (late files go to the next
  window, a re-run reads exactly the recorded files); with ``key_columns_conn_id`` it also
  looks up the primary keys of the source tables (kept in the plan file for re-runs);
* extract reads JSON lines with exact decimals and Avro through fastavro with the schema's
  column types, ``column_types`` declared per table, drops duplicates by uuid and
  dead-letters what it cannot read. JSON payloads need ``column_types`` for dates, times and
  exact decimals (JSON has none: ``DATE``, ``DATETIME``, ``TIMESTAMP``, ``DECIMAL(p,s)``); a
  declared type also wins over the Avro schema's. Undeclared JSON columns are typed from
  their values (a fractional number as NUMERIC(38,<its scale>)); a value that does not fit
  its column's type is dead-lettered with the reason;
* an event's key is, first that applies: declared or looked-up key columns, Datastream's
  ``primary_keys``, SQL Server's ``replication_index``, Oracle's ROWID (only for a table
  with none of these);
* commit records Datastream's counts, among them ``rowid_keyed_tables``: the tables keyed by
  Oracle ROWID because no key was declared or found;
* the gate opens when an event read after the window end plus the allowed lateness was seen,
  or, with ``idle_timeout``, when an idle source is declared complete (then the window row's
  completeness note and the Asset event extra say ``idle-timeout``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.providers.common.compat.sdk import TaskGroup

from airflow_cdc.pipeline.protocol import StreamConfig
from airflow_cdc.sources.datastream import SOURCE_KIND
from airflow_cdc.sources.datastream.events import object_identifier
from airflow_cdc.sources.datastream.keys import declared_key_columns, tables_to_look_up
from airflow_cdc.sources.datastream.progress import DEFAULT_ALLOWED_LATENESS
from airflow_cdc.sources.datastream.source import DEFAULT_SETTLE_SECONDS, seconds_setting


def datastream_stream_config(
    *,
    stream_id: str,
    prefix: str,
    namespace: str = "cdc",
    work_root: str = "",
    key_columns: Mapping[str, Sequence[str]] | None = None,
    column_types: Mapping[str, Mapping[str, str]] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> StreamConfig:
    """The stream config of one Datastream destination prefix (validated at parse time).

    ``key_columns`` and ``column_types`` ride in the source spec, keyed by table identifier
    (see :class:`~airflow_cdc.sources.datastream.source.DatastreamSource`); ``settings``
    (lateness, settle time, idle timeout, tables whose keys are looked up) do not change
    the stream's fingerprint.
    """
    spec: dict = {"prefix": prefix}
    if key_columns is not None:
        spec["key_columns"] = key_columns
    if column_types:
        spec["column_types"] = column_types
    if settings:
        spec["settings"] = dict(settings)
    return StreamConfig.for_source(SOURCE_KIND, stream_id, spec, namespace=namespace,
                                   work_root=work_root)


def keys_to_look_up(stream_id: str, key_columns_conn_id: str | None,
                    source_tables: Sequence[str] | None,
                    key_columns: Mapping[str, Sequence[str]] | None) -> list:
    """The ``[schema, table]`` pairs whose primary keys each plan looks up through
    ``key_columns_conn_id`` (the source tables without declared keys); refused at parse time
    without a connection id or without source tables."""
    if key_columns_conn_id is None:
        return []
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
    return [list(t) for t in tables_to_look_up(source_tables, declared_key_columns(key_columns))]


def datastream_settings(settle_seconds, allowed_lateness, idle_timeout, look_up: list) -> dict:
    """The source spec's ``settings`` (seconds; they do not change the stream's fingerprint)."""
    settings = {
        "settle_seconds": seconds_setting("settle_seconds", settle_seconds),
        "allowed_lateness_seconds": seconds_setting("allowed_lateness", allowed_lateness),
        "idle_timeout_seconds": seconds_setting("idle_timeout", idle_timeout),
    }
    if look_up:
        settings["look_up_keys"] = look_up
    return settings


def DatastreamPipeline(  # noqa: N802 - a factory named like the group it makes
    *,
    group_id: str,
    prefix: str,
    stream_id: str,
    gcp_conn_id: str = "google_cloud_default",
    impersonation_chain: str | Sequence[str] | None = None,
    settle_seconds: float = DEFAULT_SETTLE_SECONDS,
    allowed_lateness: timedelta | float = DEFAULT_ALLOWED_LATENESS,
    idle_timeout: timedelta | float | None = None,
    source_tables: Sequence[str] | None = None,
    wait_poke_interval: float = 15,
    key_columns: Mapping[str, Sequence[str]] | None = None,
    key_columns_conn_id: str | None = None,
    column_types: Mapping[str, Mapping[str, str]] | None = None,
    **options: Any,
) -> TaskGroup:
    """One Datastream prefix into Iceberg: the shortcut for ``CdcPipeline(source="datastream", ...)``
    naming Datastream's arguments (:class:`~airflow_cdc.sources.datastream.source.DatastreamSource`).

    The plan task waits (deferred with ``deferrable``) until the window's evidence can be
    read: an event read at or after the window end plus ``allowed_lateness``, in a file
    unchanged for ``settle_seconds``. It checks every ``wait_poke_interval`` seconds, and
    gives up after ``gate_timeout`` (the window stays unplanned). A window's gate therefore
    opens about ``allowed_lateness + settle_seconds`` plus the Spark jobs' run time after
    the window end.

    :param group_id: the TaskGroup's id.
    :param prefix: the Datastream destination prefix (``gs://...``, or a local folder for
        development).
    :param stream_id: the stream's id.
    :param gcp_conn_id: the Google Cloud connection.
    :param impersonation_chain: a service account to impersonate, or a chain of them.
    :param settle_seconds: a file is read once unchanged this long.
    :param allowed_lateness: how late an event may arrive after its window's end.
    :param idle_timeout: declare an idle source's window complete after this long (the window
        row's completeness note and the Asset event extra then say ``idle-timeout``; None:
        never).
    :param source_tables: the Datastream objects, named as Datastream names them
        (``HR.EMPLOYEES``) or as identifiers (``HR_EMPLOYEES``); their identifier forms
        become the gate's Assets.
    :param wait_poke_interval: seconds between two checks of the plan task's wait.
    :param key_columns: the key columns of tables, e.g. ``{"HR.EMPLOYEES": ["EMPLOYEE_ID"]}``
        (either name form). Changing them changes the stream's fingerprint: existing targets
        are keyed by the old columns, so the stream must be reset.
    :param key_columns_conn_id: an Airflow connection to the source database: each window's
        plan looks up the primary key of every source table without declared keys (those
        must then be named ``SCHEMA.TABLE``).
    :param column_types: payload column types per source table, by the table's Datastream
        object name or its identifier form: ``{"shop.orders": {"amount": "DECIMAL(10,2)",
        "placed_at": "DATETIME"}}`` (the typing rules are in this module's docstring).
    :param options: the shared :class:`~airflow_cdc.operators.pipeline.PipelineOptions`
        (targets, catalog, Spark, leases, ``deferrable``, ``gate_timeout`` ...).
    """
    from airflow_cdc.operators.pipeline import pipeline_group

    settings = datastream_settings(
        settle_seconds, allowed_lateness, idle_timeout,
        keys_to_look_up(stream_id, key_columns_conn_id, source_tables, key_columns))

    def stream(shared) -> StreamConfig:
        return datastream_stream_config(
            stream_id=stream_id, prefix=prefix, namespace=shared.namespace,
            work_root=shared.work_root, key_columns=key_columns, column_types=column_types,
            settings=settings,
        )

    # Assets are named by table identifier, whichever form the DAG used.
    assets = [object_identifier(t) for t in source_tables or ()] or None
    return pipeline_group(
        "DatastreamPipeline", group_id, stream, options,
        {"gcp_conn_id": gcp_conn_id, "impersonation_chain": impersonation_chain,
         "key_columns_conn_id": key_columns_conn_id},
        wait_poke_interval,
        source_tables=assets,
    )
