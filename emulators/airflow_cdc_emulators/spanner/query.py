"""What a change stream query returns, and which queries Spanner refuses.

Pure: no gRPC here. :func:`answer` validates a query's arguments against the history and the
emulator's clock ("now") and returns the records in stream order; a refused query raises
:class:`ChangeStreamQueryError` carrying the gRPC status code name Spanner uses.

The answer of a partition query ``(token, start, end, heartbeat)``:

1. Let ``upper`` be ``end`` (inclusive), or "now" when ``end`` is NULL or later than now.
2. Return the partition's data change records with ``start <= commit_timestamp <= upper``,
   in ``(commit_timestamp, server_transaction_id, record_sequence)`` order.
3. Whenever ``heartbeat_milliseconds`` pass without a record, return a heartbeat record
   (timestamp = the previous record's or heartbeat's + the interval, so idle heartbeats are
   spaced exactly by the interval and always precede the next record's commit time).
4. If the partition ended (split or merge) at or before ``upper``, return its
   child_partitions_record (start = the partition's end) and finish.
5. Otherwise finish with a heartbeat at ``upper`` if the last record is older, so the reader
   sees progress up to the end of what it asked for.

The initial query (``partition_token`` NULL) returns one child_partitions_record per
partition live at ``start`` (record start = the query's start, no parent tokens) and finishes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from airflow_cdc_emulators.common import EmulatorError

from .history import DataChangeRecord, History
from .partition_lineage import Partition
from .timeline import format_micros

MIN_HEARTBEAT_MILLISECONDS = 1_000
MAX_HEARTBEAT_MILLISECONDS = 300_000


class ChangeStreamQueryError(EmulatorError):
    """A query Spanner would refuse: ``code`` is the gRPC status code name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ReadArguments:
    """The read function's arguments once bound: times in microseconds, None for NULL."""

    start_us: int | None
    end_us: int | None = None
    partition_token: str | None = None
    heartbeat_milliseconds: int | None = None
    read_options: object = None


@dataclass(frozen=True)
class HeartbeatRecord:
    timestamp_us: int


@dataclass(frozen=True)
class ChildPartition:
    token: str
    parent_partition_tokens: tuple[str, ...]


@dataclass(frozen=True)
class ChildPartitionsRecord:
    start_us: int
    record_sequence: str
    child_partitions: tuple[ChildPartition, ...]


ChangeRecord = DataChangeRecord | HeartbeatRecord | ChildPartitionsRecord


@dataclass(frozen=True)
class AcceptedRead:
    """A query that passed validation: its partition (None: initial query) and bounds."""

    partition: Partition | None
    start_us: int
    upper_us: int  # inclusive: the query's end, or now when the end is NULL or later
    interval_us: int


def answer(history: History, args: ReadArguments, now_us: int) -> list[ChangeRecord]:
    """The records a query returns, in order; raises ChangeStreamQueryError when refused."""
    read = validate(history, args, now_us)
    if read.partition is None:
        return [
            ChildPartitionsRecord(read.start_us, f"{index:08d}", (ChildPartition(p.token, ()),))
            for index, p in enumerate(history.partitions_live_at(read.start_us))
        ]
    records = list(_partition_records(history, read.partition, read))
    # A query over an instant with nothing in it still reports progress to that instant.
    return records or [HeartbeatRecord(read.upper_us)]


def _partition_records(history: History, partition: Partition, read: AcceptedRead):
    interval, upper, end = read.interval_us, read.upper_us, partition.end_us
    reaches_end = end is not None and end <= upper
    progress = read.start_us
    last_data = end - 1 if end is not None and reaches_end else upper
    for record in history.records_between(partition.token, read.start_us, last_data):
        while record.commit_us - progress > interval:
            progress += interval
            yield HeartbeatRecord(progress)
        yield record
        progress = record.commit_us
    if end is not None and reaches_end:
        while end - progress > interval:
            progress += interval
            yield HeartbeatRecord(progress)
        # Every parent of a merged child returns this same record (same start, token, parents).
        children = tuple(
            ChildPartition(t, history.lineage.partitions[t].parents) for t in partition.children
        )
        yield ChildPartitionsRecord(end, "00000000", children)
        return
    while upper - progress >= interval:
        progress += interval
        yield HeartbeatRecord(progress)
    if progress < upper:
        yield HeartbeatRecord(upper)


def too_far_in_the_past(start_us: int, earliest_us: int, reason: str) -> ChangeStreamQueryError:
    """Spanner's refusal of a start it no longer serves (older than the retention period)."""
    return ChangeStreamQueryError(
        "OUT_OF_RANGE",
        f"Specified start_timestamp is too far in the past. Please specify a "
        f"start_timestamp within the earliest read timestamp: {format_micros(earliest_us)}. "
        f"Received start_timestamp: {format_micros(start_us)}. ({reason})",
    )


def validate(history: History, args: ReadArguments, now_us: int) -> AcceptedRead:
    """Check a query as Spanner does (same order, status codes and wording)."""
    if args.start_us is None:
        raise ChangeStreamQueryError("INVALID_ARGUMENT", "start_timestamp must not be null.")
    earliest = max(now_us - history.retention_us, history.created_us)
    if args.start_us < earliest:
        reason = (
            f"the change stream {history.stream_name} was created at "
            f"{format_micros(history.created_us)}"
            if earliest == history.created_us
            else f"its retention period {timedelta(microseconds=history.retention_us)} "
            f"reaches back from now ({format_micros(now_us)})"
        )
        raise too_far_in_the_past(args.start_us, earliest, reason)
    if args.start_us > now_us:
        raise ChangeStreamQueryError(
            "OUT_OF_RANGE",
            f"Specified start_timestamp is too far in the future. Please specify a "
            f"start_timestamp within the earliest read timestamp: {format_micros(earliest)}, "
            f"and the current maximum start timestamp: {format_micros(now_us)}. "
            f"Received start_timestamp: {format_micros(args.start_us)}.",
        )
    if args.end_us is not None and args.start_us > args.end_us:
        raise ChangeStreamQueryError(
            "INVALID_ARGUMENT",
            f"If end_timestamp is specified, start_timestamp must be <= end_timestamp. "
            f"Received start_timestamp: {format_micros(args.start_us)}, "
            f"end_timestamp: {format_micros(args.end_us)}.",
        )
    if args.heartbeat_milliseconds is None:
        raise ChangeStreamQueryError("INVALID_ARGUMENT", "heartbeat_milliseconds must not be null.")
    if not MIN_HEARTBEAT_MILLISECONDS <= args.heartbeat_milliseconds <= MAX_HEARTBEAT_MILLISECONDS:
        raise ChangeStreamQueryError(
            "OUT_OF_RANGE",
            f"heartbeat_milliseconds must be within min {MIN_HEARTBEAT_MILLISECONDS} and max "
            f"{MAX_HEARTBEAT_MILLISECONDS}. Received heartbeat_milliseconds: "
            f"{args.heartbeat_milliseconds}.",
        )
    if args.read_options is not None:
        raise ChangeStreamQueryError("UNIMPLEMENTED", "read_options must be null.")
    upper = now_us if args.end_us is None else min(args.end_us, now_us)
    interval = args.heartbeat_milliseconds * 1000
    if args.partition_token is None:
        return AcceptedRead(None, args.start_us, upper, interval)
    partition = history.partition(args.partition_token)
    if partition is None or partition.start_us > now_us:  # a future partition is unknown yet
        raise ChangeStreamQueryError(
            "INVALID_ARGUMENT",
            f"Specified partition_token is invalid, as it does not belong to the Change Stream "
            f"associated with the TVF. Received partition_token: {args.partition_token}.",
        )
    latest = (
        partition.end_us if partition.end_us is not None and partition.end_us <= now_us else now_us
    )
    if not partition.start_us <= args.start_us <= latest:
        raise ChangeStreamQueryError(
            "OUT_OF_RANGE",
            f"Specified start_timestamp is invalid for the partition. Please specify a "
            f"start_timestamp within {format_micros(partition.start_us)} and "
            f"{format_micros(latest)}. Received start_timestamp: {format_micros(args.start_us)}.",
        )
    return AcceptedRead(partition, args.start_us, upper, interval)
