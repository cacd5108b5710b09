"""Reads one change stream partition for one window through the real Spanner client
(:func:`read_partition`, for :class:`~.source.SpannerChangeStreamSource`).

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

import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_cdc.model import (
    ChildPartition,
    PartitionOutcome,
    PartitionPosition,
    Window,
    format_ts,
)
from airflow_cdc.sources.base import PartitionRead, TransactionTally
from airflow_cdc.sources.read_errors import position_expired, read_with_retries
from airflow_cdc.sources.spanner.mapping import rows_or_dead_letter
from airflow_cdc.sources.spanner.query import build_query
from airflow_cdc.sources.spanner.readiness import partition_progress
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


def read_partition(source, window: Window, position: PartitionPosition, collect) -> tuple[PartitionRead, Any]:
    """Steps 1-5 of the module doc for one partition of ``source`` (a
    :class:`~.source.SpannerChangeStreamSource`): the partition's read (its rows left out) and
    its rows, as ``collect()`` made a collection of them (anything with ``extend``)."""
    from google.api_core import exceptions

    query = build_query(
        source.dialect,
        source.stream_name,
        position.start,
        window.inclusive_end,
        position.partition_id,
        source.heartbeat_milliseconds,
    )
    if source._database is None:
        source._database = source.connection.open_database()
    try:
        # A read broken off mid-stream runs again whole (read_errors): nothing is kept of it.
        read = read_with_retries(lambda: _read_records(source, query, window, position, collect()),
                                 partition=position.partition_id, window=window)
    except exceptions.OutOfRange as error:
        if "too far in the past" not in (error.message or ""):
            raise
        raise position_expired(
            "Spanner", position.partition_id, window, f"start {format_ts(position.start)}",
            error.message) from error
    rows, dead, tallies, children, watermark, records = read
    finished = bool(children)
    progress = partition_progress(watermark, finished, window, source.heartbeat_milliseconds)
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


def _read_records(source, query, window: Window, position: PartitionPosition, rows):
    """One run of the partition's query: (rows, dead letters, transaction tallies, children,
    watermark, data change records); the change rows go to ``rows`` (``extend``)."""
    dead = []
    tallies: dict[str, tuple[int, set[str], datetime | None]] = {}
    children: dict[str, ChildPartition] = {}
    watermark = position.start
    records = 0
    last_log = time.monotonic()
    with source._database.snapshot() as snapshot:
        results = snapshot.execute_sql(
            query.sql, params=query.params, param_types=query.param_types, lazy_decode=True
        )
        for result_row in results:
            try:
                parsed = parse_protobuf_row(result_row, results, source.dialect)
            except ChangeRecordParseError as error:
                raise ChangeRecordParseError(
                    f"partition {position.partition_id} of change stream "
                    f"{source.stream_name!r}, window {window.window_id}: {error}") from error
            for record in parsed:
                if isinstance(record, (DataChangeRecord, MalformedRecord)):
                    mapped, dead_letter = rows_or_dead_letter(
                        record, source.stream_id, window.window_id, position.partition_id
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
            if time.monotonic() - last_log >= source.progress_every_seconds:
                last_log = time.monotonic()
                log.info(
                    "partition %s: %d records, watermark %s, lag %s",
                    position.partition_id, records, watermark.isoformat(),
                    window.end - watermark,
                )
    return rows, dead, tallies, children, watermark, records
