"""Spanner tables with commit-timestamp columns in a DAG.

``SpannerCommitTimestampPipeline`` is the shortcut for
``CdcPipeline(source="spanner_commit_ts", ...)``::

    with DAG(..., schedule=CronDataIntervalTimetable("*/5 * * * *", timezone="UTC")):
        SpannerCommitTimestampPipeline(
            group_id="shop", instance_id="prod", database_id="shop",
            tables={"Orders": "LastUpdateTime",
                    "Customers": {"column": "UpdatedAt", "soft_delete": "Deleted"},
                    "DocumentHistory": {"column": "Ts", "kind": "changelog"}},
            reconcile_every=12,
            targets={"namespace": "shop"},
        )

``SpannerCommitTimestampReseedOperator`` requests a re-seed: the stream's next window (or
the window whose plan failed because its end fell out of the database's version retention,
once its plan task is cleared) reads every table whole at the instant requested and moves
the stream on to it. The source is
:class:`airflow_cdc.sources.spanner_commit_ts.source.SpannerCommitTimestampSource`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.common.compat.sdk import BaseOperator

from airflow_cdc.sources.spanner.query import GOOGLE_SQL
from airflow_cdc.sources.spanner_commit_ts import SOURCE_KIND


def commit_ts_spec(
    *, instance_id: str, database_id: str, tables: Mapping[str, Any], project_id: str | None = None,
    dialect: str = GOOGLE_SQL, trust_application_timestamps: bool = False,
    initial_load: bool = True, safety_margin_seconds: float | None = None,
    reconcile_every: int | None = None, max_partitions: int | None = None,
) -> dict:
    """The stream spec of a database's commit-timestamp tables."""
    settings = {name: value for name, value in (
        ("safety_margin_seconds", safety_margin_seconds), ("reconcile_every", reconcile_every),
        ("max_partitions", max_partitions)) if value is not None}
    spec = {
        "connection": {"project": project_id or "", "instance": instance_id,
                       "database": database_id},
        "dialect": dialect,
        "tables": {str(t): (dict(v) if isinstance(v, Mapping) else v) for t, v in tables.items()},
        "trust_application_timestamps": bool(trust_application_timestamps),
        "initial_load": bool(initial_load),
    }
    if settings:
        spec["settings"] = settings
    return spec


def default_stream_id(database_id: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in database_id).lower()


def SpannerCommitTimestampPipeline(  # noqa: N802 - a factory named like the group it makes
    *,
    group_id: str,
    instance_id: str,
    database_id: str,
    tables: Mapping[str, Any],
    project_id: str | None = None,
    stream_id: str | None = None,
    dialect: str = GOOGLE_SQL,
    trust_application_timestamps: bool = False,
    initial_load: bool = True,
    safety_margin_seconds: float | None = None,
    reconcile_every: int | None = None,
    max_partitions: int | None = None,
    gcp_conn_id: str = "google_cloud_default",
    impersonation_chain: str | Sequence[str] | None = None,
    **options: Any,
):
    """A database's commit-timestamp tables into Iceberg: plan >> extract >> commit >> apply >> gate.

    A table's commit-timestamp column must be NOT NULL: a row whose commit timestamp is NULL
    matches no window, so a nullable column is refused before any window opens, unless
    ``skip_null_rows=True`` says to read it knowing such rows are not captured (every plan
    warns of it). Plain tables are upserted, change-log tables (like the seed's
    ``DocumentHistory``, the commit timestamp in the key) appended; ``auto`` (the default)
    tells them apart by the key. Deletes leave no commit timestamp: name a soft-delete
    column, or set ``reconcile_every``.

    :param group_id: the TaskGroup's id.
    :param instance_id: the Spanner instance.
    :param database_id: the Spanner database.
    :param tables: each table's commit-timestamp column, or ``{"column": ..., "kind":
        "plain" | "changelog" | "auto", "soft_delete": <BOOL or TIMESTAMP column>,
        "skip_null_rows": True | False}``.
    :param project_id: the Google Cloud project (None: the connection's).
    :param stream_id: the stream's id (None: the database id in lower case).
    :param dialect: the database's dialect, ``GOOGLE_STANDARD_SQL`` or ``POSTGRESQL``.
    :param trust_application_timestamps: read a TIMESTAMP column without
        ``allow_commit_timestamp=true`` by its values: unsafe, a value written late is never
        read.
    :param initial_load: the first window reads each table whole at its end (default true).
    :param safety_margin_seconds: how long after a window's end its plan waits (default 10).
    :param reconcile_every: read the tables' keys at a window's end every N windows and
        delete the target keys that are gone (0 or None: never).
    :param max_partitions: partitions per query (default 4).
    :param gcp_conn_id: the Google Cloud connection.
    :param impersonation_chain: a service account to impersonate, or a chain of them.
    :param options: the shared :class:`~airflow_cdc.operators.pipeline.PipelineOptions`.
    """
    from airflow_cdc.operators.pipeline import CdcPipeline

    return CdcPipeline(
        group_id=group_id,
        source=SOURCE_KIND,
        stream_id=stream_id or default_stream_id(database_id),
        spec=commit_ts_spec(
            instance_id=instance_id, database_id=database_id, tables=tables,
            project_id=project_id, dialect=dialect,
            trust_application_timestamps=trust_application_timestamps,
            initial_load=initial_load, safety_margin_seconds=safety_margin_seconds,
            reconcile_every=reconcile_every, max_partitions=max_partitions,
        ),
        source_conn={"gcp_conn_id": gcp_conn_id, "impersonation_chain": impersonation_chain},
        **options,
    )


class SpannerCommitTimestampReseedOperator(BaseOperator):
    """Request a re-seed of a commit-timestamp stream from a read at the current time.

    The fix for a window older than the database's ``version_retention_period`` (its plan
    fails naming it): run this task, then clear the failed window's plan task. That window
    (or, when none failed, the stream's next one) reads every table whole at the instant
    chosen here (``at``, default now minus ``safety_margin_seconds``), deletes the target keys that are gone,
    and the stream continues from that instant. The request is an Airflow Variable
    (``airflow_cdc_reseed__<stream_id>``); each instant is taken once.

    :param stream_id: the commit-timestamp stream. Templated.
    :param instance_id: the Spanner instance.
    :param database_id: the Spanner database.
    :param project_id: the Google Cloud project (None: the connection's).
    :param safety_margin_seconds: how far before now the default instant lies.
    :param at: the instant to re-seed at (a datetime or ISO text; None: now minus
        ``safety_margin_seconds``). Templated.
    :param gcp_conn_id: the Google Cloud connection.
    :param impersonation_chain: a service account to impersonate, or a chain of them.
    """

    template_fields = ("stream_id", "at")
    ui_color = "#e8d7f1"

    def __init__(
        self, *, stream_id: str, instance_id: str, database_id: str,
        project_id: str | None = None, safety_margin_seconds: float = 10.0,
        at: datetime | str | None = None,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None, **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stream_id = stream_id
        self.instance_id = instance_id
        self.database_id = database_id
        self.project_id = project_id
        self.safety_margin_seconds = float(safety_margin_seconds)
        self.at = at
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain

    def execute(self, context) -> dict:
        from airflow_cdc.hooks.spanner import SpannerDatabaseHook
        from airflow_cdc.model import format_ts, parse_ts, validate_identifier

        validate_identifier("stream id", self.stream_id)
        hook = SpannerDatabaseHook(gcp_conn_id=self.gcp_conn_id,
                                   impersonation_chain=self.impersonation_chain)
        if self.at:
            at = self.at if isinstance(self.at, datetime) else parse_ts(str(self.at))
        else:
            at = datetime.now(timezone.utc) - timedelta(seconds=self.safety_margin_seconds)
        database = hook.get_database(self.instance_id, self.database_id, self.project_id)
        database.reload()  # fails here, naming the database, when it cannot be reached
        requested = hook.request_reseed(self.stream_id, at)
        self.log.info("re-seed of stream %s requested at %s (requests: %s); the next window "
                      "plan takes it", self.stream_id, format_ts(at), requested)
        return {"stream_id": self.stream_id, "reseed_at": format_ts(at), "requested": requested}
