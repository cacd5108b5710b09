"""Spanner commit-timestamp tables (seed 003) behind the seam.

One partition per configured table (its id is the table's name as configured); its
watermark is the end of the last window read, and its ``resume_position`` counts the windows
since its last key reconciliation. A window ``[s, e)`` reads each table's rows with
``s <= <col> < e`` at exactly ``e`` (:mod:`.reads`): complete as soon as it is read, so the
gate's evidence is the read itself. ``e`` must be in the past by the safety margin before
the window is planned (:meth:`evidence_delay`), and a plan for a window ending in the future
is refused.

Before every window is planned (:meth:`plan_options`): the schema is checked
(:mod:`.schema`), and the instants the window will read at are checked against the
database's version retention. A re-seed (``SpannerCommitTimestampReseedOperator``) is a
request the plan finds through the hook (:meth:`discover`): a ``reseed:<instant>``
partition whose window reads every table whole at that instant, reconciles the keys, and
moves the tables' partitions on to it.

The spec: ``connection`` (``project``, ``instance``, ``database``), ``dialect``, ``tables``
(``{table: column}`` or ``{table: {"column", "kind", "soft_delete"}}``),
``trust_application_timestamps`` (default false; unsafe), ``initial_load`` (default true: the
first window reads each table whole at its end), and ``settings`` (not fingerprinted):
``safety_margin_seconds`` (10), ``reconcile_every`` (windows between key reconciliations;
0 = never) and ``max_partitions`` (per query, 4).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from airflow_cdc.model import PartitionPosition, Readiness, Window, format_ts, validate_identifier
from airflow_cdc.sources.base import ChangeSource, Discovery
from airflow_cdc.sources.spanner.query import DIALECTS, GOOGLE_SQL
from airflow_cdc.sources.spanner.reader import SpannerConnection
from airflow_cdc.sources.spanner_commit_ts import RESEED_PREFIX, SOURCE_KIND
from airflow_cdc.sources.spanner_commit_ts.errors import FutureWindowError
from airflow_cdc.sources.spanner_commit_ts.records import ORDERING_KEY_PARTS
from airflow_cdc.sources.spanner_commit_ts.readiness import window_readiness
from airflow_cdc.sources.spanner_commit_ts.schema import TableConfig

log = logging.getLogger(__name__)
DEFAULT_SAFETY_MARGIN_SECONDS = 10.0
DEFAULT_MAX_PARTITIONS = 4
TABLES_OPTION = "tables"
WARNINGS_OPTION = "schema_warnings"


class SpannerCommitTimestampSource(ChangeSource):
    kind = SOURCE_KIND
    ordering_key_parts = ORDERING_KEY_PARTS
    airflow_hook = "airflow_cdc.hooks.spanner:SpannerDatabaseHook"
    summary_counts = ("rows", "soft_deletes", "reconciled_deletes", "partitions_read", "reseeds",
                      "dead_letters")
    reads_whole_windows = True

    def __init__(self, spec: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> None:
        super().__init__(spec, options)
        self.connection = SpannerConnection(**self.spec["connection"])
        self.dialect = self.spec.get("dialect", GOOGLE_SQL)
        self.tables = {name: TableConfig.parse(name, value)
                       for name, value in self.spec["tables"].items()}
        self.trust_application_timestamps = bool(self.spec.get("trust_application_timestamps"))
        self.initial_load = bool(self.spec.get("initial_load", True))
        settings = self.spec.get("settings") or {}
        self.safety_margin = timedelta(seconds=float(
            settings.get("safety_margin_seconds", DEFAULT_SAFETY_MARGIN_SECONDS)))
        self.reconcile_every = int(settings.get("reconcile_every", 0) or 0)
        self.max_partitions = int(settings.get("max_partitions", DEFAULT_MAX_PARTITIONS))
        self.stream_id = self.spec.get("stream_id") or self.connection.database

    @classmethod
    def validate_spec(cls, stream_id: str, spec: Mapping[str, Any]) -> dict:
        spec = dict(spec)
        connection = dict(spec.get("connection") or {})
        for name in ("instance", "database"):
            if not connection.get(name):
                raise ValueError(
                    f"Spanner commit-timestamp stream {stream_id!r} has no {name}: give "
                    f"instance_id and database_id"
                )
        dialect = spec.get("dialect", GOOGLE_SQL)
        if dialect not in DIALECTS:
            raise ValueError(f"stream {stream_id!r}: dialect {dialect!r} is not one of {DIALECTS}")
        tables = spec.get("tables")
        if not isinstance(tables, Mapping) or not tables:
            raise ValueError(
                f"stream {stream_id!r} has no tables: give tables={{'<table>': "
                f"'<commit-timestamp column>', ...}}"
            )
        recorded_tables = {}
        for table, value in tables.items():
            validate_identifier("table name", table)
            config = TableConfig.parse(table, value)
            validate_identifier(f"commit-timestamp column of {table}", config.column)
            if config.soft_delete:
                validate_identifier(f"soft-delete column of {table}", config.soft_delete)
            recorded_tables[table] = config.to_json()
        settings = dict(spec.get("settings") or {})
        margin = float(settings.get("safety_margin_seconds", DEFAULT_SAFETY_MARGIN_SECONDS))
        if margin < 0:
            raise ValueError(f"stream {stream_id!r}: safety_margin_seconds {margin} is negative")
        every = int(settings.get("reconcile_every", 0) or 0)
        if every < 0:
            raise ValueError(f"stream {stream_id!r}: reconcile_every {every} is negative: give "
                             f"the number of windows between key reconciliations, 0 for none")
        partitions = int(settings.get("max_partitions", DEFAULT_MAX_PARTITIONS))
        if partitions < 1:
            raise ValueError(f"stream {stream_id!r}: max_partitions {partitions} must be >= 1")
        recorded = {
            "connection": {"project": connection.get("project") or "",
                           "instance": connection["instance"], "database": connection["database"]},
            "dialect": dialect,
            "tables": recorded_tables,
            "trust_application_timestamps": bool(spec.get("trust_application_timestamps")),
            "initial_load": bool(spec.get("initial_load", True)),
            "stream_id": stream_id,
        }
        if settings:
            recorded["settings"] = {"safety_margin_seconds": margin, "reconcile_every": every,
                                    "max_partitions": partitions}
        return recorded

    # --- step 0 -------------------------------------------------------------------------------
    def evidence_delay(self) -> timedelta:
        """A read at ``e`` is complete once ``e`` is past; the margin covers clock skew
        between the Airflow workers and Spanner's TrueTime."""
        return self.safety_margin

    def readiness(self, window: Window, now: datetime, known: Sequence, hook: Any) -> Readiness:
        """Ready once ``e`` is past by the safety margin and the schema and retention checks
        pass (:mod:`.readiness`)."""
        from airflow_cdc.sources.spanner_commit_ts.reads import check_retention

        checked: dict = {}

        def check_tables():
            checked["database"] = self._database(hook)
            self._table_plans(checked["database"])

        def check_end():
            if not self._pending_reseeds(hook, now):  # a re-seed reads at its own instant
                check_retention(checked["database"], window, [window.end])

        return window_readiness(window, now, self.safety_margin, check_tables, check_end)

    # --- step 1 -------------------------------------------------------------------------------
    def initial_positions(self, window: Window) -> list[PartitionPosition]:
        return [PartitionPosition(table, window.start) for table in self.tables]

    def discover(self, window: Window, now: datetime, hook: Any) -> Discovery:
        """Re-seed requests (the re-seed operator's) become ``reseed:<instant>`` partitions."""
        found = tuple(
            PartitionPosition(f"{RESEED_PREFIX}{format_ts(at)}", window.start, format_ts(at))
            for at in self._pending_reseeds(hook, now)
        )
        return Discovery(found, {"reseed_requests": len(found)} if found else {})

    def plan_options(self, kept: Mapping | None, planned_at: datetime, hook: Any,
                     positions: Sequence[PartitionPosition] = (), window: Window | None = None
                     ) -> dict:
        """The tables' read plans, after the checks: the window's end is past, the schema
        allows reading by commit timestamp, the read instants (the re-seed's too) are within
        retention. :meth:`readiness` made the same checks before the window opened; they are
        made again here, where the partitions are known (one INFORMATION_SCHEMA read)."""
        if kept is not None and TABLES_OPTION in kept:
            return {k: kept[k] for k in (TABLES_OPTION, WARNINGS_OPTION) if k in kept}
        from airflow_cdc.sources.spanner_commit_ts.reads import check_retention, plan_steps

        if window is not None and window.end > planned_at:
            raise FutureWindowError(
                f"window {window.window_id} of stream {window.stream_id} ends at "
                f"{format_ts(window.end)}, after now ({format_ts(planned_at)}): a read at a "
                f"future instant could miss commits made before it. Plan it once its end has "
                f"passed by the safety margin ({self.safety_margin.total_seconds():g} s); the "
                f"pipeline's plan task waits for that by itself"
            )
        database = self._database(hook)
        plans, warnings = self._table_plans(database)
        for warning in warnings:
            log.warning("%s", warning)
        if window is not None:
            steps = plan_steps(window, positions, plans, reconcile_every=self.reconcile_every,
                               initial_load=self.initial_load)
            check_retention(database, window, [r.read_at for s in steps for r in s.reads])
        return {TABLES_OPTION: {name: plan.to_json() for name, plan in plans.items()},
                WARNINGS_OPTION: warnings}

    def _database(self, hook: Any):
        return hook.get_database(self.connection.instance, self.connection.database,
                                 self.connection.project or None)

    def _table_plans(self, database):
        """Every configured table's read plan and the schema's warnings (or the refusal)."""
        from airflow_cdc.sources.spanner_commit_ts.schema import plan_tables, read_schema

        return plan_tables(
            read_schema(database, self.dialect), self.tables, database=self.connection.database,
            dialect=self.dialect, trust_application_timestamps=self.trust_application_timestamps,
        )

    def _pending_reseeds(self, hook: Any, now: datetime) -> list[datetime]:
        requests = hook.reseed_requests(self.stream_id) if hook is not None else []
        return [at for at in requests if at <= now]

    def plan_summary(self, plan) -> dict:
        return {
            "tables": len(plan.options.get(TABLES_OPTION) or {}),
            "schema_warnings": list(plan.options.get(WARNINGS_OPTION) or []),
            "reseeds": [p.resume_position for p in plan.positions
                        if p.partition_id.startswith(RESEED_PREFIX)],
        }

    # --- step 2 -------------------------------------------------------------------------------
    def extract_overrides(self, hook) -> dict:
        """Where executors reach the database: the resolved project, the emulator or a token."""
        resolved = hook.connection_for(
            self.connection.instance, self.connection.database, self.connection.project or None
        )
        return {"connection": {"project": resolved.project,
                               "emulator_host": resolved.emulator_host,
                               "access_token": resolved.access_token}}

    def connection_json(self) -> dict:
        """The connection as Spark tasks rebuild it (the token included: the job file is 0600)."""
        c = self.connection
        return {"project": c.project, "instance": c.instance, "database": c.database,
                "emulator_host": c.emulator_host, "access_token": c.access_token}

    def canonical_type(self, source_type) -> str:
        from airflow_cdc.sources.spanner_commit_ts.types import canonical_column_type

        return canonical_column_type(str(source_type))

    def lineage_inputs(self, resolved) -> list[tuple[str, str]]:
        project = (self.connection.project or (resolved.get("connection") or {}).get("project")
                   or "unknown-project")
        return [(f"spanner://{project}/{self.connection.instance}",
                 f"{self.connection.database}.{table}") for table in self.tables]
