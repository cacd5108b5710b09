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
  their event ids (:func:`.records.event_id`) do not depend on offsets, so the changelog
  drops them (the source's Spark side, ``airflow_cdc.spark_jobs.sources.debezium``).
* **A parallel snapshot** (``spark_jobs/snapshot.py``) stages batches of READ rows under
  ``<prefix>/snapshots/``; each snapshot is one more partition, ``snapshot:<id>``, whose
  whole batches a window plans by folder and reads natively (:mod:`.staged`).
* Tombstones, logical messages and MySQL/MariaDB schema changes are counted, not applied; malformed lines, unknown ops,
  events of tables without key columns and truncates (not applied yet) are dead letters.
* **Debezium's incremental snapshots** (an ``execute-snapshot`` signal) are followed per
  table (:mod:`.progress`): their READ events are changes like any other and are counted
  per table; the signaling table's events (the signals and Debezium's watermark rows) are
  counted (``signal_events``), never applied nor dead-lettered; the notification topic's
  lines are notifications (counted; a malformed one is a dead letter), never changes. The
  window's counts carry each table's progress and state (``incremental_snapshots``).

The spec: ``prefix`` (the sink's root: a local folder; ``gs://`` comes with the GCS hook),
``topics_dir`` (``topics``), ``topic_prefix`` (the connector's ``topic.prefix``),
``key_columns`` (``{"public.orders": ["id"]}``), optional ``column_types`` for lines without
schemas, optional ``signal_table`` (the connector's ``signal.data.collection``,
``public.debezium_signal``) and ``notification_topic`` (its ``notification.sink.topic.name``,
with ``notification.enabled.channels=sink``), and ``settings``: ``flush_lateness_seconds``
(60), ``placeholder`` (``unavailable.value.placeholder``, default ``__debezium_unavailable_value``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from airflow_cdc.model import PartitionOutcome, PartitionPosition, Readiness, Window, format_ts
from airflow_cdc.sources.base import ChangeSource, DeadLetter, Discovery, PartitionRead
from airflow_cdc.sources.read_errors import planned_files_missing
from airflow_cdc.sources.debezium.records import (
    DEFAULT_PLACEHOLDER,
    HEARTBEAT_TOPIC_PREFIX,
    TRANSACTION_TOPIC_SUFFIX,
    ChangeEvent,
    Heartbeat,
    LogicalMessage,
    SchemaChange,
    Tombstone,
    TransactionEvent,
    Truncate,
    change_of,
    parse_line,
)
from airflow_cdc.sources.debezium.errors import InvalidSignalError, MalformedEventError
from airflow_cdc.sources.debezium.layout import (
    SinkLayoutError,
    SinkListing,
    files_from,
    list_sink_files,
    parse_partition_id,
    parse_sink_path,
    partition_id,
    read_sink_file,
)
from airflow_cdc.sources.debezium.progress import (
    ROWS_COUNT,
    Notification,
    WindowSnapshotProgress,
    join_window_counts,
    parse_notification,
    table_rows_count,
)
from airflow_cdc.sources.debezium.readiness import heartbeat_readiness, newest_heartbeat
from airflow_cdc.sources.debezium.signals import parse_table_name
from airflow_cdc.sources.debezium.staged import (
    BATCH_MARKER,
    SNAPSHOTS_DIR,
    partition_of,
    snapshot_of,
    staged_snapshots,
)

SOURCE_KIND = "debezium"
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")


def table_identifier(source_table: str) -> str:
    """``public.orders`` -> ``public_orders``: the name the changelog rows carry, which apply
    takes as the target's name (``key_columns`` keep the source's own spelling)."""
    return _NOT_IDENTIFIER.sub("_", source_table)


_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# The counts of what a line is: summed, they are the lines a partition read.
LINE_COUNTS = ("events", "truncates", "tombstones", "messages", "transaction_events",
               "heartbeats", "signal_events", "notifications", "schema_changes")

FILES_OPTION = "files"
EVIDENCE_OPTION = "evidence"
# Snapshot partitions whose last batch the window takes after the snapshot completed.
SNAPSHOTS_DONE_OPTION = "snapshots_done"
DEFAULT_FLUSH_LATENESS = 60.0


class DebeziumSource(ChangeSource):
    kind = SOURCE_KIND
    ordering_key_parts = ("connector log position (PostgreSQL commit LSN, event LSN; MySQL "
                          "binlog file, position, row)",)
    summary_counts = ("events", "truncates", "tombstones", "messages", "transaction_events",
                      "heartbeats", "transactions_checked", "dead_letters", "snapshot_batches",
                      "snapshot_rows", "signal_events", "notifications", ROWS_COUNT,
                      "incremental_snapshots", "incremental_snapshot_signals")
    airflow_hook = "airflow_cdc.hooks.debezium:DebeziumSinkHook"

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
        self.snapshots_root = f"{self.prefix.rstrip('/')}/{SNAPSHOTS_DIR}"
        self.notification_topic = self.spec.get("notification_topic")
        self.signal_table = None  # as change events name it: <schema>.<table>, unquoted
        if self.spec.get("signal_table"):
            name = parse_table_name("signal_table", self.spec["signal_table"])
            self.signal_table = f"{name.container}.{name.table}"

    @property
    def heartbeat_partition(self) -> str:
        return partition_id(f"{HEARTBEAT_TOPIC_PREFIX}.{self.topic_prefix}", 0)

    @property
    def transaction_topic(self) -> str:
        return f"{self.topic_prefix}{TRANSACTION_TOPIC_SUFFIX}"

    @property
    def signal_topic(self) -> str | None:
        """``<topic.prefix>.<schema>.<table>`` of the signaling table, None without one."""
        return f"{self.topic_prefix}.{self.signal_table}" if self.signal_table else None

    @classmethod
    def validate_spec(cls, stream_id: str, spec: Mapping[str, Any]) -> dict:
        from airflow_cdc.model import validate_identifier
        from airflow_cdc.sources.debezium.storage import is_gs_uri, split_gs_uri

        prefix = spec.get("prefix")
        if not prefix or not isinstance(prefix, str):
            raise ValueError(
                f"Debezium sink prefix {prefix!r} of stream {stream_id!r} is empty: give the "
                f"folder (or gs://bucket/path) the Kafka Connect sink writes topics/ under")
        if is_gs_uri(prefix):
            split_gs_uri(prefix)
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
        recorded.update(_snapshot_following(stream_id, spec, topic_prefix))
        if spec.get("settings"):
            recorded["settings"] = dict(spec["settings"])
        return recorded  # never the extract's connection (a token): it is not in any file

    # --- the sink ---------------------------------------------------------------------------
    def _access(self, hook: Any = None):
        """(lister, reader) of the sink: through the Airflow hook on the Airflow side, through
        the connection :meth:`extract_overrides` handed over on Spark (no Airflow there)."""
        if hook is not None:
            return hook.access(self.prefix)
        from airflow_cdc.sources.debezium.storage import sink_access

        return sink_access(self.prefix, self.spec.get("connection"))

    def _listing(self, lister) -> SinkListing:
        return list_sink_files(lister, self.prefix, self.topics_dir)

    def _relative(self, sink_file) -> str:
        return sink_file.path[len(self.prefix.rstrip("/")) + 1:]

    def _planned_file(self, relative: str):
        path = f"{self.prefix.rstrip('/')}/{relative}"
        parsed = parse_sink_path(path)
        if parsed is None:
            raise SinkLayoutError(f"planned file {relative!r} does not follow the sink layout")
        return parsed

    # --- step 0 -------------------------------------------------------------------------------
    def evidence_delay(self) -> timedelta:
        return self.flush_lateness

    def readiness(self, window: Window, now: datetime, known: Sequence, hook: Any) -> Readiness:
        """A heartbeat at or after ``e + flush_lateness`` is in the sink's files (:mod:`.readiness`)."""
        def newest() -> datetime | None:
            lister, reader = self._access(hook)
            return newest_heartbeat(self._listing(lister), reader, self.heartbeat_partition)

        return heartbeat_readiness(window, now, self.flush_lateness, self.heartbeat_partition, newest)

    # --- step 1 -------------------------------------------------------------------------------
    def initial_positions(self, window: Window) -> list[PartitionPosition]:
        return [PartitionPosition(self.heartbeat_partition, window.start, "0")]

    def discover(self, window: Window, now: datetime, hook: Any) -> Discovery:
        lister, _ = self._access(hook)
        listing = self._listing(lister)
        found = [PartitionPosition(partition_id(t, p), window.start, "0")
                 for t, p in listing.topic_partitions()]
        staged = self._staged(lister)
        found += [PartitionPosition(partition_of(sid), window.start, "1")
                  for sid, snapshot in sorted(staged.items()) if snapshot.batches]
        return Discovery(tuple(found), {"files": len(listing.files),
                                        "unmatched": len(listing.unmatched),
                                        "snapshots": len(staged)})

    def _staged(self, lister):
        return staged_snapshots(lister(self.snapshots_root + "/"), self.snapshots_root)

    def plan_options(self, kept: Mapping | None, planned_at: datetime, hook: Any,
                     positions: Sequence[PartitionPosition] = (),
                     window: Window | None = None) -> dict:
        """The exact files each topic-partition's read takes (from its resume offset to the
        last file listed now, by path under the prefix), and the heartbeat evidence."""
        if kept is not None:
            return {k: kept[k] for k in (FILES_OPTION, EVIDENCE_OPTION, SNAPSHOTS_DONE_OPTION)
                    if k in kept}
        lister, reader = self._access(hook)
        listing = self._listing(lister)
        files, done = {}, []
        staged = None
        for position in positions:
            snapshot_id = snapshot_of(position.partition_id)
            if snapshot_id is not None:
                staged = self._staged(lister) if staged is None else staged
                snapshot = staged.get(snapshot_id)
                first = int(position.resume_position or 1)
                folders = snapshot.batches_from(first) if snapshot else []
                files[position.partition_id] = [f"{SNAPSHOTS_DIR}/{f}" for f in folders]
                if snapshot and snapshot.complete and first + len(folders) > max(snapshot.batches):
                    done.append(position.partition_id)
                continue
            topic, part = parse_partition_id(position.partition_id)
            chosen = files_from(listing, topic, part, int(position.resume_position or 0)).files
            files[position.partition_id] = [self._relative(f) for f in chosen]
        newest = newest_heartbeat(listing, reader, self.heartbeat_partition)
        return {FILES_OPTION: files,
                EVIDENCE_OPTION: format_ts(newest - self.flush_lateness) if newest else None,
                **({SNAPSHOTS_DONE_OPTION: done} if done else {})}

    def plan_summary(self, plan) -> dict:
        files = plan.options.get(FILES_OPTION) or {}
        return {"files_planned": sum(len(names) for names in files.values())}

    # --- step 2 -------------------------------------------------------------------------------
    def extract_overrides(self, hook: Any) -> dict:
        """The executors' way to the sink: for ``gs://``, a token the hook mints now."""
        connection = hook.extract_connection(self.prefix) if hook is not None else {}
        return {"connection": connection} if connection else {}

    def _planned_lines(self, reader, window: Window, position: PartitionPosition):
        """(offset, line) of the planned files of ``position`` from its resume offset on. The
        transaction topic's lines stop at the first BEGIN or END at or after the window end:
        the next window reads (and checks) those transactions, once their events are proven
        in the sink (:mod:`.transactions`). The notification topic's lines stop likewise at
        the first notification sent at or after the window end (:mod:`.progress`)."""
        topic, _ = parse_partition_id(position.partition_id)
        planned = (self.options.get(FILES_OPTION) or {}).get(position.partition_id, [])
        resume = int(position.resume_position or 0)
        end_ms = (window.end - datetime(1970, 1, 1, tzinfo=window.end.tzinfo)) // timedelta(milliseconds=1)
        for relative in planned:
            for offset, line in self._planned_file_lines(reader, window, relative, resume):
                if topic == self.transaction_topic and _transaction_at_or_after(line, end_ms):
                    return
                if topic == self.notification_topic and _notification_at_or_after(line, end_ms):
                    return
                yield offset, line

    def _planned_file_lines(self, reader, window: Window, relative: str, resume: int):
        """(offset, line) of one planned file; a file gone since the plan fails the window,
        naming it and the fix (:func:`~airflow_cdc.sources.read_errors.planned_files_missing`)."""
        sink_file = self._planned_file(relative)
        try:
            yield from read_sink_file(reader, sink_file, resume)
        except FileNotFoundError as error:  # a local file, or SinkFileMissingError (gs://)
            raise planned_files_missing([sink_file.path], window) from error

    def read_partition(self, window: Window, position: PartitionPosition) -> PartitionRead:
        from airflow_cdc.model import parse_ts

        if snapshot_of(position.partition_id) is not None:
            return self._read_staged(window, position)
        topic, _ = parse_partition_id(position.partition_id)
        evidence = self.options.get(EVIDENCE_OPTION)
        resume = int(position.resume_position or 0)
        _, reader = self._access()
        rows, dead = [], []
        counts = dict.fromkeys(LINE_COUNTS, 0)
        next_offset = resume
        for offset, line in self._planned_lines(reader, window, position):
            next_offset = offset + 1
            try:
                self._read_line(window, position, topic, line, counts, rows)
            except MalformedEventError as error:
                dead.append(DeadLetter(position.partition_id, line, str(error),
                                       event_id=f"{position.partition_id}@{offset}"))
            except Exception as error:  # noqa: BLE001 - whatever a line holds, it never fails the window
                dead.append(DeadLetter(
                    position.partition_id, line,
                    f"line at offset {offset} of {position.partition_id} cannot be mapped "
                    f"({type(error).__name__}: {error})",
                    event_id=f"{position.partition_id}@{offset}"))
        watermark = window.end
        if evidence is not None:
            watermark = max(position.start, min(parse_ts(evidence), window.end))
        outcome = PartitionOutcome(position.partition_id, False, watermark,
                                   records=sum(counts[n] for n in LINE_COUNTS if n != "truncates") + len(dead),
                                   resume_position=str(next_offset))
        return PartitionRead(rows=tuple(rows), outcome=outcome, dead_letters=tuple(dead),
                             counts=counts)

    def _read_line(self, window: Window, position: PartitionPosition, topic: str, line: str,
                   counts: dict, rows: list) -> None:
        """What one line is, counted; a change appended to ``rows``. Raises
        :class:`MalformedEventError` for a line that is a dead letter."""
        if topic == self.signal_topic:
            counts["signal_events"] += 1  # signals and watermarks: whatever the line holds
            return
        if topic == self.notification_topic:
            parse_notification(line)  # never a change; its progress is read on the driver
            counts["notifications"] += 1
            return
        event = parse_line(line, topic)
        if isinstance(event, Tombstone):
            counts["tombstones"] += 1
        elif isinstance(event, LogicalMessage):
            counts["messages"] += 1
        elif isinstance(event, TransactionEvent):
            counts["transaction_events"] += 1
        elif isinstance(event, Heartbeat):
            counts["heartbeats"] += 1
        elif isinstance(event, SchemaChange):
            counts["schema_changes"] += 1
        elif isinstance(event, ChangeEvent):
            if event.source_table == self.signal_table:  # routed to another topic
                counts["signal_events"] += 1
                return
            change = change_of(
                event, stream=window.stream_id, window_id=window.window_id,
                key_columns=self.key_columns, partition_id=position.partition_id,
                column_types=self.column_types, placeholder=self.placeholder)
            if isinstance(change, Truncate):
                change = change.change_row()
                counts["truncates"] += 1
            rows.append(replace(change, source_table=table_identifier(change.source_table)))
            counts["events"] += 1
            if event.op == "r" and event.snapshot == "incremental":
                counts[ROWS_COUNT] = counts.get(ROWS_COUNT, 0) + 1
                per_table = table_rows_count(event.source_table)
                counts[per_table] = counts.get(per_table, 0) + 1

    def _planned_batches(self, position: PartitionPosition) -> list[str]:
        return list((self.options.get(FILES_OPTION) or {}).get(position.partition_id, []))

    def _read_staged(self, window: Window, position: PartitionPosition) -> PartitionRead:
        """A snapshot partition's outcome: the batches the plan took (their rows are read
        natively, :meth:`staged_batch_folders`); it never holds the window back, and it finishes with
        the window that takes the last batch of a complete snapshot."""
        import json

        _, reader = self._access()
        batches = self._planned_batches(position)
        rows = sum(json.loads(reader(f"{self.prefix.rstrip('/')}/{b}/{BATCH_MARKER}"))["rows"]
                   for b in batches)
        finished = position.partition_id in (self.options.get(SNAPSHOTS_DONE_OPTION) or [])
        resume = int(position.resume_position or 1) + len(batches)
        outcome = PartitionOutcome(position.partition_id, finished, window.end,
                                   records=rows, resume_position=str(resume))
        return PartitionRead(rows=(), outcome=outcome, dead_letters=(),
                             counts={"snapshot_batches": len(batches), "snapshot_rows": rows})

    def staged_batch_folders(self, plan) -> list[str]:
        """The folders of the staged snapshot batches the plan took (their rows are read
        natively by the source's Spark side, ``airflow_cdc.spark_jobs.sources.debezium``)."""
        folders = [f"{self.prefix.rstrip('/')}/{b}" for p in plan.positions
                   if snapshot_of(p.partition_id) is not None for b in self._planned_batches(p)]
        if folders and "://" in self.prefix:
            raise NotImplementedError(
                f"staged snapshot batches under {self.prefix!r}: the parallel snapshot stages "
                f"on a local or shared file system path only so far; give the sink a path")
        return folders

    def window_counts(self, counts: dict, changes: int) -> dict:
        """The counts, with each table's incremental-snapshot rows joined to its progress
        (:func:`.progress.join_window_counts`)."""
        read = counts.get("events", 0) + counts.get("snapshot_rows", 0)
        return {**join_window_counts(counts), "changes": changes, "duplicates": read - changes}

    def window_progress_counts(self, plan) -> dict:
        """The incremental snapshots' progress the window's notifications tell, as counts for
        the window's summary (:class:`.progress.WindowSnapshotProgress`)."""
        return WindowSnapshotProgress.of_notifications(self.window_notifications(plan)).to_counts()

    def window_notifications(self, plan) -> list[Notification]:
        """The notifications the window reads (the plan's files of the notification topic, up
        to the first one sent at or after the window end), in the order Debezium sent them.
        Malformed lines are left out: the partition's read dead-letters them."""
        if not self.notification_topic:
            return []
        _, reader = self._access()
        found, partitions = [], 0
        for position in plan.positions:
            if snapshot_of(position.partition_id) is not None:
                continue
            topic, _ = parse_partition_id(position.partition_id)
            if topic != self.notification_topic:
                continue
            partitions += 1
            for _, line in self._planned_lines(reader, plan.window, position):
                try:
                    found.append(parse_notification(line))
                except MalformedEventError:
                    continue
        # One partition's lines are in order; several partitions interleave by send time.
        return sorted(found, key=lambda n: n.timestamp_ms or 0) if partitions > 1 else found

    def lineage_inputs(self, resolved) -> list[tuple[str, str]]:
        if self.prefix.startswith("gs://"):
            bucket, _, path = self.prefix[len("gs://"):].partition("/")
            return [(f"gs://{bucket}", path or "/")]
        return [("file", self.prefix)]


def _notification_at_or_after(line: str, end_ms: int) -> bool:
    try:
        note = parse_notification(line)
    except MalformedEventError:
        return False  # read, and dead-lettered with its reason
    return note.timestamp_ms is not None and note.timestamp_ms >= end_ms


def _snapshot_following(stream_id: str, spec: Mapping[str, Any], topic_prefix: str) -> dict:
    """The spec's ``signal_table`` and ``notification_topic``, checked, as the stream records them."""
    recorded = {}
    if spec.get("signal_table") is not None:
        try:
            parse_table_name("signal_table", spec["signal_table"])
        except InvalidSignalError as error:
            raise ValueError(f"stream {stream_id!r}: {error} (the connector's "
                             f"signal.data.collection)") from None
        recorded["signal_table"] = spec["signal_table"]
    topic = spec.get("notification_topic")
    if topic is not None:
        reserved = {f"{topic_prefix}{TRANSACTION_TOPIC_SUFFIX}": "the transaction topic",
                    f"{HEARTBEAT_TOPIC_PREFIX}.{topic_prefix}": "the heartbeat topic"}
        if not isinstance(topic, str) or not _TOPIC.match(topic) or topic in reserved:
            why = reserved.get(topic) if isinstance(topic, str) else None
            raise ValueError(
                f"notification_topic {topic!r} of stream {stream_id!r} is "
                + (f"{why}" if why else "not a Kafka topic name (letters, digits, '.', '_', '-')")
                + f": give the connector's notification.sink.topic.name (with "
                  f"notification.enabled.channels=sink), e.g. {topic_prefix}.notifications")
        recorded["notification_topic"] = topic
    return recorded


def _transaction_at_or_after(line: str, end_ms: int) -> bool:
    try:
        event = parse_line(line)
    except MalformedEventError:
        return False  # read, and dead-lettered with its reason
    return isinstance(event, TransactionEvent) and event.ts_ms is not None and event.ts_ms >= end_ms
