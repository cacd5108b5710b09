"""Reads one change stream partition for one window through the real Spanner client.

Procedure for one partition (see the seed's "query workflow"):
1. Query ``[start, window end - 1 µs]``: Spanner's end_timestamp is inclusive, windows are
   half-open, so a change at exactly the window end belongs to the next window.
2. Data change records become change rows; their commit timestamps advance the watermark.
   A record without the documented shape, or whose values cannot become change rows, goes
   whole to the dead-letter table with the reason (it still counts for its transaction).
3. Heartbeat records advance the watermark: everything up to their timestamp was returned.
   A malformed one is dead-lettered and proves nothing.
4. Child partitions records end the partition (I5): it is FINISHED and its children are
   reported to the lineage; the watermark is the children's start.
5. A query that returns normally without child records, with progress evidence within one
   heartbeat interval of its end, read everything up to its end: the partition continues in
   the next window from the window end. With older evidence, it continues from the evidence.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from airflow_cdc.model import (
    ChildPartition,
    PartitionOutcome,
    PartitionPosition,
    Window,
    format_ts,
)
from airflow_cdc.sources.base import ChangelogRows, ChangeSource, PartitionRead, TransactionTally
from airflow_cdc.sources.read_errors import position_expired, read_with_retries
from airflow_cdc.sources.spanner.mapping import ORDERING_KEY_PARTS, rows_or_dead_letter
from airflow_cdc.sources.spanner.query import (
    GOOGLE_SQL,
    INITIAL_PARTITION,
    build_query,
    validate_query_settings,
)
from airflow_cdc.sources.spanner.records import (
    ChildPartitionsRecord,
    ChangeRecordParseError,
    DataChangeRecord,
    HeartbeatRecord,
    MalformedRecord,
    parse_protobuf_row,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SpannerConnection:
    """Where the change stream lives and how to reach it, in a form Spark tasks can carry.

    ``emulator_host`` talks plain gRPC with anonymous credentials (our emulator, or Google's);
    ``access_token`` is a short-lived OAuth token minted on the Airflow side (never logged);
    with neither, the executor's Application Default Credentials are used.
    """

    project: str
    instance: str
    database: str
    emulator_host: str | None = None
    access_token: str | None = None

    def __repr__(self) -> str:  # keeps the token out of logs and tracebacks
        return (
            f"SpannerConnection(project={self.project!r}, instance={self.instance!r}, "
            f"database={self.database!r}, emulator_host={self.emulator_host!r})"
        )

    def open_database(self):
        from google.cloud import spanner

        if self.emulator_host:
            from google.auth.credentials import AnonymousCredentials

            client = spanner.Client(
                project=self.project,
                credentials=AnonymousCredentials(),
                client_options={"api_endpoint": self.emulator_host},
                disable_builtin_metrics=True,
            )
        elif self.access_token:
            from google.oauth2.credentials import Credentials

            client = spanner.Client(
                project=self.project, credentials=Credentials(token=self.access_token)
            )
        else:
            client = spanner.Client(project=self.project)
        return client.instance(self.instance).database(self.database)


class SpannerChangeStreamSource(ChangeSource):
    """Spanner change streams (seed 000) behind the seam (:class:`~airflow_cdc.sources.base.ChangeSource`).

    Partitions split and merge (child partitions records), so extract reads in rounds; the
    evidence for ``[s, e)`` is the bounded query's heartbeats, there at ``e`` already. The
    Airflow side (:class:`~airflow_cdc.hooks.spanner.SpannerChangeStreamHook`) resolves the
    project and mints a short-lived token, merged into the spec's ``connection`` for the job.
    """

    kind = "spanner_change_stream"
    ordering_key_parts = ORDERING_KEY_PARTS
    partitions_split = True
    airflow_hook = "airflow_cdc.hooks.spanner:SpannerChangeStreamHook"
    proves_empty_windows = True  # bounded queries, read anywhere the client runs

    def __init__(
        self,
        connection: SpannerConnection,
        stream_name: str,
        dialect: str = GOOGLE_SQL,
        heartbeat_milliseconds: int = 10_000,
        stream_id: str | None = None,
        progress_every_seconds: float = 30.0,
    ) -> None:
        # Validates the name and heartbeat now, before any task is scheduled.
        validate_query_settings(dialect, stream_name, heartbeat_milliseconds)
        self.connection = connection
        self.stream_name = stream_name
        self.dialect = dialect
        self.heartbeat_milliseconds = heartbeat_milliseconds
        self.stream_id = stream_id or stream_name
        self.progress_every_seconds = progress_every_seconds
        self.spec = {
            "stream_name": stream_name,
            "dialect": dialect,
            "heartbeat_milliseconds": heartbeat_milliseconds,
            "connection": {
                "project": connection.project,
                "instance": connection.instance,
                "database": connection.database,
            },
        }
        self.options = {}
        self._database = None

    @classmethod
    def from_spec(cls, spec, options=None) -> SpannerChangeStreamSource:
        return cls(
            connection=SpannerConnection(**spec["connection"]),
            stream_name=spec["stream_name"],
            dialect=spec.get("dialect", GOOGLE_SQL),
            heartbeat_milliseconds=int(spec.get("heartbeat_milliseconds", 10_000)),
            stream_id=spec.get("stream_id"),
        )

    @classmethod
    def validate_spec(cls, stream_id: str, spec) -> dict:
        """``stream_name``, ``dialect``, ``heartbeat_milliseconds`` and ``connection``
        (``project``, ``instance``, ``database``); checked as queries need them, without the
        client library (``query.validate_query_settings``)."""
        spec = dict(spec)
        connection = dict(spec.get("connection") or {})
        for name in ("instance", "database"):
            if not connection.get(name):
                raise ValueError(
                    f"Spanner change stream {spec.get('stream_name')!r} of stream {stream_id!r} "
                    f"has no {name}: give instance_id and database_id"
                )
        spec["dialect"] = spec.get("dialect", GOOGLE_SQL)
        spec["heartbeat_milliseconds"] = int(spec.get("heartbeat_milliseconds", 10_000))
        spec["connection"] = {"project": connection.get("project") or "",
                              "instance": connection["instance"], "database": connection["database"]}
        validate_query_settings(spec["dialect"], spec.get("stream_name"), spec["heartbeat_milliseconds"])
        return spec

    def extract_overrides(self, hook) -> dict:
        """Where executors reach the database: the resolved project, the emulator or a token."""
        resolved = hook.connection_for(
            self.connection.instance, self.connection.database, self.connection.project or None
        )
        return {
            "connection": {
                "project": resolved.project,
                "emulator_host": resolved.emulator_host,
                "access_token": resolved.access_token,
            }
        }

    def canonical_type(self, source_type) -> str:
        """A Spanner type (type object, ``column_types`` entry or DDL name) -> its canonical name."""
        from airflow_cdc.sources.spanner.types import canonical_type

        return str(canonical_type(source_type))

    def lineage_inputs(self, resolved) -> list[tuple[str, str]]:
        """Named as the google provider names Spanner: ``spanner://<project>/<instance>``,
        ``<database>.<change stream>``."""
        project = (
            self.connection.project
            or (resolved.get("connection") or {}).get("project")
            or "unknown-project"
        )
        return [(f"spanner://{project}/{self.connection.instance}",
                 f"{self.connection.database}.{self.stream_name}")]

    def initial_positions(self, window: Window) -> list[PartitionPosition]:
        return [PartitionPosition(partition_id=INITIAL_PARTITION, start=window.start)]

    def prepare_reads(self) -> None:
        """The client library loaded and the database opened (about 2 s of imports)."""
        import google.api_core.exceptions  # noqa: F401 - loaded now, used by read_partition

        if self._database is None:
            self._database = self.connection.open_database()

    def read_partition(self, window: Window, position: PartitionPosition) -> PartitionRead:
        read, rows = self._read_partition(window, position, list)
        return dataclasses.replace(read, rows=tuple(rows))

    def read_partition_tuples(
        self, window: Window, position: PartitionPosition
    ) -> tuple[PartitionRead, list, list]:
        """:meth:`read_partition` with each record's rows made into changelog tuples as the
        stream delivers it (``ChangelogRows``), not once the stream has ended.

        A performance strategy. Saves: the conversion runs while the server prepares the
        stream's next response, where it ran after the stream, when the task asked nothing of
        the server (two processes reading as read tasks do; figures in docs/performance.md).
        """
        read, rows = self._read_partition(
            window, position, lambda: ChangelogRows(window.stream_id, window.window_id))
        return read, rows.tuples, rows.dead_letters(read.dead_letters)

    def _read_partition(self, window: Window, position: PartitionPosition, collect) -> tuple[PartitionRead, Any]:
        """The partition's read (its rows left out) and its rows, as ``collect()`` made a
        collection of them (anything with ``extend``)."""
        from google.api_core import exceptions

        query = build_query(
            self.dialect,
            self.stream_name,
            position.start,
            window.inclusive_end,
            position.partition_id,
            self.heartbeat_milliseconds,
        )
        if self._database is None:
            self._database = self.connection.open_database()
        try:
            # A read broken off mid-stream runs again whole (read_errors): nothing is kept of it.
            read = read_with_retries(lambda: self._read_records(query, window, position, collect()),
                                     partition=position.partition_id, window=window)
        except exceptions.OutOfRange as error:
            if "too far in the past" not in (error.message or ""):
                raise
            raise position_expired(
                "Spanner", position.partition_id, window, f"start {format_ts(position.start)}",
                error.message) from error
        rows, dead, tallies, children, watermark, records = read
        finished = bool(children)
        if finished:
            # Everything before the children's start was returned (I5: the source said so).
            progress = watermark
        elif watermark >= window.inclusive_end - timedelta(
            milliseconds=self.heartbeat_milliseconds
        ):
            # The bounded query returned normally and the server showed progress within one
            # heartbeat interval of its end: everything up to the window end was returned.
            progress = window.end
        else:
            # It returned normally but its evidence stops short (a server whose clock is
            # behind the window end): only what the evidence proves is read; the partition
            # continues from there and the gate stays closed meanwhile (I4).
            progress = watermark + timedelta(microseconds=1)
        outcome = PartitionOutcome(
            partition_id=position.partition_id,
            finished=finished,
            watermark=progress,
            records=records,
            resume_position=None if finished else position.partition_id,
            children=tuple(children.values()),
        )
        return PartitionRead(
            rows=(),
            outcome=outcome,
            dead_letters=tuple(dead),
            transactions=tuple(
                TransactionTally(txn, expected, frozenset(seen), commit_ts)
                for txn, (expected, seen, commit_ts) in tallies.items()
            ),
        ), rows

    def _read_records(self, query, window: Window, position: PartitionPosition, rows):
        """One run of the partition's query: (rows, dead letters, transaction tallies, children,
        watermark, data change records); the change rows go to ``rows`` (``extend``)."""
        dead = []
        tallies: dict[str, tuple[int, set[str], datetime | None]] = {}
        children: dict[str, ChildPartition] = {}
        watermark = position.start
        records = 0
        last_log = time.monotonic()
        with self._database.snapshot() as snapshot:
            results = snapshot.execute_sql(
                query.sql, params=query.params, param_types=query.param_types, lazy_decode=True
            )
            for result_row in results:
                try:
                    parsed = parse_protobuf_row(result_row, results, self.dialect)
                except ChangeRecordParseError as error:
                    raise ChangeRecordParseError(
                        f"partition {position.partition_id} of change stream "
                        f"{self.stream_name!r}, window {window.window_id}: {error}") from error
                for record in parsed:
                    if isinstance(record, (DataChangeRecord, MalformedRecord)):
                        mapped, dead_letter = rows_or_dead_letter(
                            record, self.stream_id, window.window_id, position.partition_id
                        )
                        rows.extend(mapped)
                        if dead_letter is not None:
                            dead.append(dead_letter)
                        if isinstance(record, MalformedRecord) and record.kind != "data_change_record":
                            continue  # a malformed heartbeat: dead-lettered, no evidence
                        records += 1
                        # A dead-lettered record still counts for its transaction.
                        if record.server_transaction_id and record.record_sequence and (
                                record.number_of_records_in_transaction is not None):
                            expected, seen, _ = tallies.setdefault(
                                record.server_transaction_id,
                                (record.number_of_records_in_transaction, set(),
                                 getattr(record, "commit_timestamp", None)),
                            )
                            seen.add(record.record_sequence)
                        if isinstance(record, DataChangeRecord):
                            watermark = max(watermark, record.commit_timestamp)
                    elif isinstance(record, HeartbeatRecord):
                        watermark = max(watermark, record.timestamp)
                    elif isinstance(record, ChildPartitionsRecord):
                        watermark = max(watermark, record.start_timestamp)
                        for child in record.child_partitions:
                            parents = child.parent_partition_tokens or (position.partition_id,)
                            children[child.token] = ChildPartition(
                                partition_id=child.token,
                                start=record.start_timestamp,
                                parent_ids=tuple(parents),
                            )
                if time.monotonic() - last_log >= self.progress_every_seconds:
                    last_log = time.monotonic()
                    log.info(
                        "partition %s: %d records, watermark %s, lag %s",
                        position.partition_id, records, watermark.isoformat(),
                        window.end - watermark,
                    )
        return rows, dead, tallies, children, watermark, records
