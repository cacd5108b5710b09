"""Bigtable change streams (seed 004) behind the seam: row-range partitions that split and
merge, continuation tokens, and the low watermark as the evidence of completeness.

The spec: ``project``, ``instance``, ``table``, ``app_profile`` (single-cluster routing, as
change streams require) and ``settings`` (not part of the stream's fingerprint):
``heartbeat_seconds`` (1), ``read_timeout_seconds`` (300: how long one partition's read
waits for its watermark to reach the window end), ``evidence_delay_seconds`` (5: after a
window's end, when the probe first asks), ``probe_seconds`` (5) and ``stall``
(``{"policy": "wait" | "fail" | "open", "after_minutes": N}``, see :mod:`.readiness`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from airflow_cdc.model import ChildPartition, PartitionPosition, Readiness, Window, format_ts
from airflow_cdc.sources.base import ChangeSource, PartitionRead
from airflow_cdc.sources.bigtable import SOURCE_KIND
from airflow_cdc.sources.bigtable.connection import BigtableConnection
from airflow_cdc.sources.bigtable.mapping import ORDERING_KEY_PARTS
from airflow_cdc.sources.bigtable.partitions import (
    PartitionName,
    check_tiling,
    read_resume,
)
from airflow_cdc.sources.bigtable.readiness import (
    UNCONFIRMED_NOTE,
    StallPolicy,
    WatermarkStalledError,
    lagging_partitions,
)
from airflow_cdc.sources.bigtable.reader import INITIAL_PARTITION, read_partition
from airflow_cdc.sources.read_errors import read_with_retries

DEFAULTS = {"heartbeat_seconds": 1.0, "read_timeout_seconds": 300.0,
            "evidence_delay_seconds": 5.0, "probe_seconds": 5.0}
UNCONFIRMED_OPTION = "unconfirmed"


class BigtableChangeStreamSource(ChangeSource):
    kind = SOURCE_KIND
    ordering_key_parts = ORDERING_KEY_PARTS
    partitions_split = True
    airflow_hook = "airflow_cdc.hooks.bigtable:BigtableChangeStreamHook"
    summary_counts = ("mutations", "gc_mutations", "chunked", "held_records", "unconfirmed")
    # Cells, not row images: the window's mutations go to the cells and latest tables
    # (airflow_cdc.spark_jobs.sources.bigtable).
    applies_own_changes = True

    def __init__(self, spec: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> None:
        super().__init__(spec, options)
        settings = {**DEFAULTS, **(self.spec.get("settings") or {})}
        self.settings = settings
        self.stall = StallPolicy.from_setting(settings.get("stall"), self.spec.get("stream_id", "?"))
        connection = self.spec.get("connection") or {}
        self.connection = BigtableConnection(
            project=self.spec.get("project") or connection.get("project") or "",
            instance=self.spec["instance"], table=self.spec["table"],
            app_profile=self.spec.get("app_profile") or "",
            emulator_host=connection.get("emulator_host"),
            access_token=connection.get("access_token"),
        )
        self._since: dict[str, datetime] = {}

    @classmethod
    def validate_spec(cls, stream_id: str, spec: Mapping[str, Any]) -> dict:
        recorded = {}
        for name in ("instance", "table"):
            value = spec.get(name)
            if not value or not isinstance(value, str):
                raise ValueError(
                    f"Bigtable change stream of stream {stream_id!r} has no {name} "
                    f"({value!r}): give instance_id and table_id")
            recorded[name] = value
        recorded["project"] = spec.get("project") or ""
        recorded["app_profile"] = spec.get("app_profile") or ""
        settings = dict(spec.get("settings") or {})
        for name in DEFAULTS:
            if settings.get(name) is not None:
                value = float(settings[name])
                least_allowed = 0.0 if name == "evidence_delay_seconds" else 1e-3
                if value < least_allowed:
                    raise ValueError(
                        f"setting {name}={settings[name]!r} of stream {stream_id!r} must be "
                        f"{'zero or more' if least_allowed == 0 else 'a positive number of'} "
                        f"seconds")
                settings[name] = value
        if "stall" in settings:
            settings["stall"] = StallPolicy.from_setting(settings["stall"], stream_id).to_setting()
        if settings:
            recorded["settings"] = settings
        return recorded

    # --- step 0 -------------------------------------------------------------------------------
    def evidence_delay(self) -> timedelta:
        return timedelta(seconds=float(self.settings["evidence_delay_seconds"]))

    def readiness(self, window: Window, now: datetime, known: Sequence, hook: Any) -> Readiness:
        """The window's end plus the evidence delay, then every partition's low watermark at
        the window end (:mod:`.readiness`); a stall is decided by the stall policy."""
        due = window.end + self.evidence_delay()
        if now < due:
            return Readiness(False, f"the low watermarks cannot pass the window end before "
                                    f"{format_ts(due)}", retry_at=due)
        lagging = self._lagging(window, hook)
        if not lagging:
            return Readiness(True, f"every partition's low watermark reached {format_ts(window.end)}")
        reason = self._stall_reason(window, lagging, known, now)
        stalled = now - due
        if self.stall.policy == "fail" and stalled >= self.stall.after:
            raise WatermarkStalledError(
                f"{reason}; the stall policy fails a window after {self.stall.after}. The "
                f"window stays unread: once the cluster caught up, clear the plan task (or set "
                f"the stall policy to 'wait' or 'open')")
        if self.stall.policy == "open" and stalled >= self.stall.after:
            return Readiness(True, f"{UNCONFIRMED_NOTE}: {reason}; the stall policy opens it "
                                   f"after {self.stall.after}",
                             options={UNCONFIRMED_OPTION: reason})
        retry = now + timedelta(seconds=max(1.0, float(self.settings["heartbeat_seconds"])))
        return Readiness(False, reason, retry_at=retry)

    def _connection_through(self, hook: Any):
        """The table's connection as the Airflow hook resolves it (the spec's without one)."""
        if hook is None:
            return self.connection
        return hook.connection_for(self.connection.instance, self.connection.table,
                                   self.connection.app_profile, self.connection.project or None)

    def _lagging(self, window: Window, hook: Any):
        return lagging_partitions(self._connection_through(hook), window,
                                  float(self.settings["probe_seconds"]))

    def _stall_reason(self, window: Window, lagging, known: Sequence, now: datetime) -> str:
        stored = {}
        for record in known:
            try:
                stored[PartitionName.parse(record.partition_id).rows] = record
            except ValueError:
                continue
        parts = []
        for lag in lagging:
            record = stored.get(lag.rows)
            since = self._since.setdefault(lag.rows.text(), now)
            if record is not None and record.watermark_since:
                since = min(since, record.watermark_since)
            parts.append(lag.describe(window, since))
        return f"{len(lagging)} partition(s) behind {format_ts(window.end)}: " + "; ".join(parts)

    # --- step 1 -------------------------------------------------------------------------------
    def initial_positions(self, window: Window) -> list[PartitionPosition]:
        """One stand-in partition: its read lists the table's partitions, read from ``s``."""
        return [PartitionPosition(INITIAL_PARTITION, window.start)]

    def plan_options(self, kept: Mapping | None, planned_at: datetime, hook: Any,
                     positions: Sequence[PartitionPosition] = (),
                     window: Window | None = None) -> dict:
        """A re-plan keeps the first plan's ``unconfirmed`` flag (set from the readiness
        answer when the ``open`` stall policy opened the window, :mod:`.readiness`)."""
        if kept is not None:
            return {k: v for k, v in kept.items() if k == UNCONFIRMED_OPTION}
        return {}

    def extract_overrides(self, hook: Any) -> dict:
        resolved = self._connection_through(hook)
        return {"project": resolved.project,
                "connection": {"emulator_host": resolved.emulator_host,
                               "access_token": resolved.access_token}}

    # --- step 2 -------------------------------------------------------------------------------
    def prepare_reads(self) -> None:
        """The data API's client library loaded (each read opens its own client)."""
        import google.cloud.bigtable_v2  # noqa: F401 - loaded now, used by read_partition

    def read_partition(self, window: Window, position: PartitionPosition) -> PartitionRead:
        unconfirmed = self.options.get(UNCONFIRMED_OPTION)
        timeout = float(self.settings["read_timeout_seconds"])
        if unconfirmed:  # the policy opened it: read what arrived, do not wait for the rest
            timeout = min(timeout, 3 * float(self.settings["heartbeat_seconds"]) + 5)
        read = read_with_retries(
            lambda: read_partition(
                self.connection, window, position, stream=window.stream_id,
                heartbeat=timedelta(seconds=float(self.settings["heartbeat_seconds"])),
                deadline=timedelta(seconds=timeout),
            ),
            partition=position.partition_id, window=window,
        )
        outcome = read.outcome
        if unconfirmed and not outcome.finished and outcome.watermark < window.end:
            from dataclasses import replace

            # Declared, not proven: the window opens by policy; records still on their way
            # are read by later windows from the partition's tokens.
            outcome = replace(outcome, watermark=window.end)
            read = replace(read, outcome=outcome,
                           counts={**read.counts, "unconfirmed": 1})
        return read

    def resolve_child(self, child: ChildPartition, reporter: str, known: Mapping,
                      pending: Mapping) -> ChildPartition:
        """A close names only the partition that closed. A merge child's parents are the
        partitions over its row range that were live when it was born: those still live, and
        those that ended into it, not those that ended into other children before (a split
        before the merge). Its generation is one more than its parents'."""
        if reporter == INITIAL_PARTITION:
            return child
        rows = PartitionName.parse(child.partition_id).rows
        own = PartitionName.parse(reporter)
        if own.rows.contains(rows):
            # Within the reporter's range: a split, whose one parent is the reporter.
            return ChildPartition(PartitionName(own.generation + 1, rows).partition_id,
                                  child.start, (reporter,), child.handover)
        for waiting in pending.values():
            if PartitionName.parse(waiting.partition_id).rows == rows:
                return ChildPartition(waiting.partition_id, waiting.start,
                                      tuple(waiting.parent_ids), child.handover)

        def into_child(children) -> bool:
            return children is None or any(
                PartitionName.parse(c).rows == rows for c in children)

        parents = sorted({reporter} | {
            pid for pid, children in known.items()
            if pid != INITIAL_PARTITION and PartitionName.parse(pid).rows.overlaps(rows)
            and into_child(children) and PartitionName.parse(pid).rows != rows
        })
        generation = 1 + max(PartitionName.parse(pid).generation for pid in parents)
        return ChildPartition(PartitionName(generation, rows).partition_id, child.start,
                              tuple(parents), child.handover)

    def check_partitions(self, outcomes, pending) -> None:
        """The partitions live after the window, with the pieces merge children already
        hold, tile the key space: a gap or an overlap is an error naming it, never skipped."""
        pieces = []
        for outcome in outcomes:
            if not outcome.finished and outcome.partition_id != INITIAL_PARTITION:
                pieces.append((outcome.partition_id, PartitionName.parse(outcome.partition_id).rows))
        for child in pending:
            for parent, handover in sorted(child.handovers.items()):
                for piece in read_resume(handover)[0] if handover else ():
                    pieces.append((f"{child.partition_id} (from {parent})", piece.rows))
        if pieces:
            check_tiling(pieces, "Bigtable partitions after the window")

    @classmethod
    def completeness_note(cls, counts: Mapping[str, Any]) -> tuple[str, str] | None:
        if counts.get("unconfirmed"):
            return (UNCONFIRMED_NOTE,
                    "the stall policy opened the window while partitions' low watermarks were "
                    "behind its end; records still on their way are applied by later windows")
        return None

    def canonical_type(self, source_type: Any) -> str:
        return str(source_type)

    def lineage_inputs(self, resolved) -> list[tuple[str, str]]:
        project = self.connection.project or resolved.get("project") or "unknown-project"
        return [(f"bigtable://{project}/{self.connection.instance}", self.connection.table)]
