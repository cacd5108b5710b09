"""Debezium change events (issue 22) behind the seam: the Kafka Connect object-storage sink's
files (``topics/<topic>/partition=<p>/<topic>+<p>+<startOffset>.json[.gz]``) as a source.

* **Partitions** are topic-partitions (:func:`.layout.partition_id`); a partition's resume
  position is its next offset. Every topic-partition the sink has written becomes a
  partition of the window that first sees it (:meth:`DebeziumSource.discover`).
* **The files a window reads** are fixed at plan time: the plan records, per topic-partition,
  the last file the listing held (``bounds``); the extract reads from the resume offset to
  the end of that file, so a re-run reads the same records (files are written whole, once).
* **Evidence** is Debezium's heartbeat topic (``heartbeat.interval.ms``): a heartbeat at
  ``H`` means the connector had sent everything before ``H``; the sink flushes within its
  rotation interval, so everything before ``H - flush_lateness`` is in files. A window
  ``[s, e)`` is planned once a heartbeat at or after ``e + flush_lateness`` is in a file.
* **Delivery is at least once**: a connector restart sends changes again with new offsets;
  their event ids (:func:`.envelope.event_id`) do not depend on offsets, so the changelog
  drops them (:meth:`DebeziumSource.drop_repeats`).
* Tombstones and logical messages are counted, not applied; malformed lines, unknown ops,
  events of tables without key columns and truncates (not applied yet) are dead letters.

The spec: ``prefix`` (the sink's root: a local folder; ``gs://`` comes with the GCS hook),
``topics_dir`` (``topics``), ``topic_prefix`` (the connector's ``topic.prefix``),
``key_columns`` (``{"public.orders": ["id"]}``), optional ``column_types`` for lines without
schemas, and ``settings``: ``flush_lateness_seconds`` (60), ``placeholder``
(``unavailable.value.placeholder``, default ``__debezium_unavailable_value``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from airflow_cdc.model import PartitionOutcome, PartitionPosition, Readiness, Window, format_ts
from airflow_cdc.sources.base import ChangeSource, DeadLetter, Discovery, PartitionRead
from airflow_cdc.sources.debezium.envelope import (
    DEFAULT_PLACEHOLDER,
    ChangeEvent,
    Heartbeat,
    LogicalMessage,
    Tombstone,
    TransactionEvent,
    Truncate,
    change_of,
    parse_line,
)
from airflow_cdc.sources.debezium.errors import MalformedEventError
from airflow_cdc.sources.debezium.layout import (
    files_from,
    list_sink_files,
    local_lister,
    local_reader,
    parse_partition_id,
    partition_id,
    read_sink_file,
)

SOURCE_KIND = "debezium"
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")


def table_identifier(source_table: str) -> str:
    """``public.orders`` -> ``public_orders``: the name the changelog rows carry, which apply
    takes as the target's name (``key_columns`` keep the source's own spelling)."""
    return _NOT_IDENTIFIER.sub("_", source_table)

BOUNDS_OPTION = "bounds"
EVIDENCE_OPTION = "evidence"
DEFAULT_FLUSH_LATENESS = 60.0


class DebeziumSource(ChangeSource):
    kind = SOURCE_KIND
    ordering_key_parts = ("connector log position (PostgreSQL commit LSN, event LSN; MySQL "
                          "binlog file, position, row)",)
    summary_counts = ("events", "tombstones", "messages", "transaction_events", "heartbeats",
                      "dead_letters")

    def __init__(self, spec: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> None:
        super().__init__(spec, options)
        settings = self.spec.get("settings") or {}
        self.prefix = self.spec["prefix"]
        self.topics_dir = self.spec.get("topics_dir") or "topics"
        self.topic_prefix = self.spec["topic_prefix"]
        self.key_columns = {t: list(c) for t, c in (self.spec.get("key_columns") or {}).items()}
        self.column_types = self.spec.get("column_types")
        self.flush_lateness = timedelta(
            seconds=float(settings.get("flush_lateness_seconds", DEFAULT_FLUSH_LATENESS)))
        self.placeholder = settings.get("placeholder") or DEFAULT_PLACEHOLDER

    @property
    def heartbeat_partition(self) -> str:
        return partition_id(f"__debezium-heartbeat.{self.topic_prefix}", 0)

    @classmethod
    def validate_spec(cls, stream_id: str, spec: Mapping[str, Any]) -> dict:
        from airflow_cdc.model import validate_identifier

        prefix = spec.get("prefix")
        if not prefix or not isinstance(prefix, str):
            raise ValueError(
                f"Debezium sink prefix {prefix!r} of stream {stream_id!r} is empty: give the "
                f"folder (or gs://bucket/path) the Kafka Connect sink writes topics/ under")
        if prefix.startswith("gs://"):
            raise ValueError(
                f"Debezium sink prefix {prefix!r} of stream {stream_id!r}: gs:// is not read "
                f"yet by this version; copy the sink to a local folder or mount it")
        topic_prefix = spec.get("topic_prefix")
        if not topic_prefix or not isinstance(topic_prefix, str):
            raise ValueError(
                f"Debezium topic_prefix {topic_prefix!r} of stream {stream_id!r} is empty: give "
                f"the connector's topic.prefix (its heartbeats are __debezium-heartbeat.<prefix>)")
        keys = spec.get("key_columns") or {}
        for table, columns in keys.items():
            for column in columns:
                validate_identifier(f"key column of {table!r}", column)
        recorded = {"prefix": prefix, "topic_prefix": topic_prefix,
                    "topics_dir": spec.get("topics_dir") or "topics",
                    "key_columns": {str(t): list(c) for t, c in keys.items()}}
        if spec.get("column_types"):
            from airflow_cdc.sources.debezium.types import declared_column_types

            declared_column_types(spec["column_types"], stream_id)
            recorded["column_types"] = {str(t): dict(c) for t, c in spec["column_types"].items()}
        if spec.get("settings"):
            recorded["settings"] = dict(spec["settings"])
        return recorded

    # --- the sink ---------------------------------------------------------------------------
    def _listing(self):
        return list_sink_files(local_lister, self.prefix, self.topics_dir)

    # --- step 0 -------------------------------------------------------------------------------
    def evidence_delay(self) -> timedelta:
        return self.flush_lateness

    def readiness(self, window: Window, now: datetime, known: Sequence, hook: Any) -> Readiness:
        """A heartbeat at or after ``e + flush_lateness`` is in the sink's files."""
        due = window.end + self.flush_lateness
        if now < due:
            return Readiness(False, f"no heartbeat can prove {format_ts(window.end)} before "
                                    f"{format_ts(due)}", retry_at=due)
        newest = self._newest_heartbeat()
        if newest is not None and newest >= due:
            return Readiness(True, f"heartbeat at {format_ts(newest)} in the sink")
        seen = format_ts(newest) if newest else "none yet"
        return Readiness(False, f"topic-partition {self.heartbeat_partition} holds the evidence "
                                f"back: newest heartbeat {seen}, needed {format_ts(due)} (check "
                                f"heartbeat.interval.ms and the sink's rotation)")

    def _newest_heartbeat(self) -> datetime | None:
        topic, part = parse_partition_id(self.heartbeat_partition)
        files = self._listing().of(topic, part)
        for sink_file in reversed(files):
            beats = [parse_line(line) for _, line in read_sink_file(local_reader, sink_file)]
            times = [b.at for b in beats if isinstance(b, Heartbeat)]
            if times:
                return max(times)
        return None

    # --- step 1 -------------------------------------------------------------------------------
    def initial_positions(self, window: Window) -> list[PartitionPosition]:
        return [PartitionPosition(self.heartbeat_partition, window.start, "0")]

    def discover(self, window: Window, now: datetime, hook: Any) -> Discovery:
        listing = self._listing()
        found = tuple(PartitionPosition(partition_id(t, p), window.start, "0")
                      for t, p in listing.topic_partitions())
        return Discovery(found, {"files": len(listing.files), "unmatched": len(listing.unmatched)})

    def plan_options(self, kept: Mapping | None, planned_at: datetime, hook: Any) -> dict:
        """The last file of each topic-partition now: the window reads up to its end."""
        if kept is not None:
            return {k: kept[k] for k in (BOUNDS_OPTION, EVIDENCE_OPTION) if k in kept}
        bounds = {}
        for sink_file in self._listing().files:
            bounds[sink_file.partition_id] = max(bounds.get(sink_file.partition_id, -1),
                                                 sink_file.start_offset)
        newest = self._newest_heartbeat()
        return {BOUNDS_OPTION: bounds,
                EVIDENCE_OPTION: format_ts(newest - self.flush_lateness) if newest else None}

    # --- step 2 -------------------------------------------------------------------------------
    def read_partition(self, window: Window, position: PartitionPosition) -> PartitionRead:
        from airflow_cdc.model import parse_ts

        topic, part = parse_partition_id(position.partition_id)
        bound = (self.options.get(BOUNDS_OPTION) or {}).get(position.partition_id, -1)
        evidence = self.options.get(EVIDENCE_OPTION)
        resume = int(position.resume_position or 0)
        listing = self._listing()
        chosen = [f for f in files_from(listing, topic, part, resume).files
                  if f.start_offset <= bound]
        rows, dead = [], []
        counts = dict.fromkeys(("events", "tombstones", "messages", "transaction_events",
                                "heartbeats"), 0)
        next_offset = resume
        for sink_file in chosen:
            for offset, line in read_sink_file(local_reader, sink_file, resume):
                next_offset = offset + 1
                try:
                    event = parse_line(line, topic)
                    if isinstance(event, Tombstone):
                        counts["tombstones"] += 1
                    elif isinstance(event, LogicalMessage):
                        counts["messages"] += 1
                    elif isinstance(event, TransactionEvent):
                        counts["transaction_events"] += 1
                    elif isinstance(event, Heartbeat):
                        counts["heartbeats"] += 1
                    elif isinstance(event, ChangeEvent):
                        change = change_of(
                            event, stream=window.stream_id, window_id=window.window_id,
                            key_columns=self.key_columns, partition_id=position.partition_id,
                            column_types=self.column_types, placeholder=self.placeholder)
                        if isinstance(change, Truncate):
                            raise MalformedEventError(
                                f"truncate of {change.source_table} at offset {offset}: this "
                                f"version does not empty targets yet; apply it by hand and "
                                f"re-run, or add 't' to the connector's skipped.operations")
                        rows.append(replace(change, source_table=table_identifier(
                            change.source_table)))
                        counts["events"] += 1
                except MalformedEventError as error:
                    dead.append(DeadLetter(position.partition_id, line, str(error),
                                           event_id=f"{position.partition_id}@{offset}"))
        watermark = window.end
        if evidence is not None:
            watermark = max(position.start, min(parse_ts(evidence), window.end))
        outcome = PartitionOutcome(position.partition_id, False, watermark,
                                   records=sum(counts.values()) + len(dead),
                                   resume_position=str(next_offset))
        return PartitionRead(rows=tuple(rows), outcome=outcome, dead_letters=tuple(dead),
                             counts=counts)

    def drop_repeats(self, spark, plan, frame):
        from airflow_cdc.sources.base import drop_seen_event_ids

        return drop_seen_event_ids(spark, plan.changelog_table, plan.window.stream_id, frame)

    def window_counts(self, counts: dict, changes: int) -> dict:
        return {**counts, "changes": changes, "duplicates": counts.get("events", 0) - changes}

    def lineage_inputs(self, resolved) -> list[tuple[str, str]]:
        return [("file", self.prefix)]
