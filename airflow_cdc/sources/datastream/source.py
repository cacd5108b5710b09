"""Datastream (seed 001) behind the seam: a destination prefix of event files as a change source.

Every settled event file not consumed yet becomes a partition of the window that plans it
(:meth:`DatastreamSource.discover`), next to one progress partition that never finishes: its
watermark, the newest read time minus the allowed lateness, is the completeness evidence
(:mod:`.progress`). That evidence exists ``allowed_lateness + settle_seconds`` after a window's
end at the earliest, so planning waits for it (:meth:`DatastreamSource.readiness`,
:mod:`.readiness`). Spark reads a window's files whole (the source's Spark side,
``airflow_cdc.spark_jobs.sources.datastream``, each file's events by :mod:`.records`); events
delivered twice are dropped against the changelog there.

The spec: ``prefix`` (``gs://bucket/path`` or a local folder), optional ``key_columns`` and
``column_types`` per table, and ``settings`` (not part of the stream's fingerprint):
``settle_seconds``, ``allowed_lateness_seconds``, ``idle_timeout_seconds`` and
``look_up_keys`` (``[schema, table]`` pairs whose primary keys the plan looks up through the
Airflow hook, :class:`~airflow_cdc.hooks.datastream.DatastreamSourceHook`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from airflow_cdc.model import PartitionPosition, Readiness, Window
from airflow_cdc.sources.base import ChangeSource, Discovery
from airflow_cdc.sources.datastream import PROGRESS_PARTITION, SOURCE_KIND
from airflow_cdc.sources.datastream.keys import SOURCE_PRIMARY_KEYS_OPTION, declared_key_columns
from airflow_cdc.sources.datastream.progress import DEFAULT_ALLOWED_LATENESS
from airflow_cdc.sources.datastream.types import declared_column_types

# The completeness note of a window declared complete because its source stayed idle.
IDLE_NOTE = "idle-timeout"
DEFAULT_SETTLE_SECONDS = 60.0
_ORDERING = ("source ordering metadata (log position / SCN / LSN)", "source_timestamp", "uuid")


def seconds_setting(name: str, value: timedelta | float | None) -> float | None:
    """A duration setting in seconds (None stays None); a negative one is refused."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise ValueError(f"{name} {value!r} is negative: give a duration of zero or more")
    return seconds


class DatastreamSource(ChangeSource):
    kind = SOURCE_KIND
    ordering_key_parts = _ORDERING
    airflow_hook = "airflow_cdc.hooks.datastream:DatastreamSourceHook"
    summary_counts = ("events", "duplicates", "dead_letters", "files", "idle_declared",
                      "rowid_keyed_tables")
    reads_whole_windows = True

    def __init__(self, spec: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> None:
        super().__init__(spec, options)
        settings = self.spec.get("settings") or {}
        self.prefix = self.spec["prefix"]
        self.settle_seconds = float(settings.get("settle_seconds", DEFAULT_SETTLE_SECONDS))
        self.allowed_lateness = timedelta(seconds=float(
            settings.get("allowed_lateness_seconds", DEFAULT_ALLOWED_LATENESS.total_seconds())))
        idle = settings.get("idle_timeout_seconds")
        self.idle_timeout = None if idle is None else timedelta(seconds=float(idle))
        self.look_up_keys = [tuple(t) for t in settings.get("look_up_keys") or ()]
        self._evidence = None

    @classmethod
    def validate_spec(cls, stream_id: str, spec: Mapping[str, Any]) -> dict:
        prefix = spec.get("prefix")
        if not prefix or not isinstance(prefix, str):
            raise ValueError(
                f"Datastream prefix {prefix!r} of stream {stream_id!r} is empty: give the "
                f"gs://bucket/path Datastream writes to (or a local folder for development)"
            )
        recorded: dict = {"prefix": prefix}
        declared = declared_key_columns(spec.get("key_columns"))
        if declared:
            recorded["key_columns"] = declared
        if spec.get("column_types"):
            declared_column_types(spec["column_types"], stream_id)  # refuse a bad mapping at parse time
            recorded["column_types"] = {str(t): dict(c) for t, c in spec["column_types"].items()}
        settings = dict(spec.get("settings") or {})
        for name in ("settle_seconds", "allowed_lateness_seconds", "idle_timeout_seconds"):
            if settings.get(name) is not None:
                settings[name] = seconds_setting(name, settings[name])
        if settings:
            recorded["settings"] = settings
        return recorded

    # --- step 0 -------------------------------------------------------------------------------
    def evidence_delay(self) -> timedelta:
        return self.allowed_lateness + timedelta(seconds=self.settle_seconds)

    def readiness(self, window: Window, now: datetime, known: Sequence, hook: Any) -> Readiness:
        """See :mod:`.readiness`: settled files newer than the evidence instant are read, newest
        first and each once (this source object lives as long as the wait)."""
        from airflow_cdc.sources.datastream.readiness import WindowEvidence

        if self._evidence is None:
            self._evidence = WindowEvidence(lambda f: hook.read_event_file(f.path))
        progress = next((p.watermark for p in known if p.partition_id == PROGRESS_PARTITION), None)
        return self._evidence.readiness(
            window, now, lambda: hook.list_event_files(self.prefix),
            {p.partition_id for p in known}, progress, self.allowed_lateness,
            self.settle_seconds, self.idle_timeout,
        )

    # --- step 1 -------------------------------------------------------------------------------
    def initial_positions(self, window: Window) -> list[PartitionPosition]:
        """Only the progress partition: files come as new partitions of each window."""
        return [PartitionPosition(PROGRESS_PARTITION, window.start)]

    def discover(self, window: Window, now: datetime, hook: Any) -> Discovery:
        """Every settled file becomes a partition (the state store keeps only new ones)."""
        from airflow_cdc.sources.datastream.discovery import file_partitions, settled_files

        listed = hook.list_event_files(self.prefix)
        files = settled_files(listed, now, self.settle_seconds)
        return Discovery(
            tuple(file_partitions(files, window.start)),
            {"listed": len(listed), "unsettled": len(listed) - len(files)},
        )

    def plan_options(self, kept: Mapping | None, planned_at: datetime, hook: Any,
                     positions: Sequence[PartitionPosition] = (),
                     window: Window | None = None) -> dict:
        from airflow_cdc.sources.datastream.plan import plan_options

        return plan_options(
            kept,
            planned_at=planned_at,
            allowed_lateness=self.allowed_lateness,
            idle_timeout=self.idle_timeout,
            source_primary_keys=(lambda: hook.primary_keys(self.look_up_keys)) if self.look_up_keys else None,
        )

    def plan_summary(self, plan) -> dict:
        return {
            "files": sum(1 for p in plan.positions if p.partition_id != PROGRESS_PARTITION),
            SOURCE_PRIMARY_KEYS_OPTION: plan.options.get(SOURCE_PRIMARY_KEYS_OPTION, {}),
        }

    # --- step 2 -------------------------------------------------------------------------------
    def window_counts(self, counts: dict, changes: int) -> dict:
        return {**counts, "changes": changes, "duplicates": counts.get("events", 0) - changes}

    # --- steps 3 and 5 ------------------------------------------------------------------------
    def commit_warnings(self, counts: Mapping[str, Any]) -> list[str]:
        tables = counts.get("rowid_keyed_tables")
        if not tables:
            return []
        return [
            f"tables {tables} were keyed by Oracle ROWID: no key columns were declared or found "
            f"for them, and a row that moves gets a new ROWID (a new target row); declare "
            f"key_columns or give key_columns_conn_id if they have a key"
        ]

    @classmethod
    def completeness_note(cls, counts: Mapping[str, Any]) -> tuple[str, str] | None:
        if counts.get("idle_declared"):
            return IDLE_NOTE, "no events arrived and the idle timeout passed"
        return None

    def canonical_type(self, source_type: Any) -> str:
        """A source database's type name (``VARCHAR(20)``, ``DATETIME2`` ...) -> its canonical name."""
        from airflow_cdc.sources.datastream.types import canonical_type

        return str(canonical_type(source_type))

    def lineage_inputs(self, resolved) -> list[tuple[str, str]]:
        if self.prefix.startswith("gs://"):
            bucket, _, path = self.prefix[len("gs://"):].partition("/")
            return [(f"gs://{bucket}", path or "/")]
        return [("file", self.prefix)]
