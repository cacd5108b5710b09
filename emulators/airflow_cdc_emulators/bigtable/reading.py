"""A small change stream reader over the real GAPIC client, for tests and demos only.

Production code reads change streams elsewhere; this helper exists so tests and demos can
check the emulator through ``google.cloud.bigtable_v2.BigtableClient`` exactly as a source
would. :func:`read_partition` runs one ReadChangeStream call and reassembles records (chunked
values, CONTINUATION messages); :func:`read_all` follows CloseStream OUT_OF_RANGE from
partition to children (a merge child once all its parents' tokens arrived) until every stream
reached ``end``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from google.cloud.bigtable_v2 import types as bt
from google.protobuf import duration_pb2

from .mutations import DeleteFromColumn, DeleteFromFamily, Mutation, SetCell
from .partitions import RowRange

FULL_KEY_SPACE = RowRange(b"", b"")


@dataclass
class ChangeRecord:
    """One DataChange as the reader reassembled it (one commit)."""

    partition: RowRange
    type: str  # USER or GARBAGE_COLLECTION
    source_cluster_id: str
    row_key: bytes
    commit_us: int
    tiebreaker: int
    mutations: list[Mutation]
    token: str
    watermark_us: int
    messages: int  # responses the record took (more than 1: CONTINUATION messages)
    chunked: int  # SetCell values that arrived in several chunks


@dataclass
class PartitionRead:
    """What one ReadChangeStream call returned."""

    partition: RowRange
    records: list[ChangeRecord] = field(default_factory=list)
    heartbeats: list[tuple[RowRange, str, int]] = field(default_factory=list)
    close_code: int | None = None
    close_tokens: list[tuple[RowRange, str]] = field(default_factory=list)
    new_partitions: list[RowRange] = field(default_factory=list)


@dataclass
class ReadResult:
    reads: list[PartitionRead]
    end_tokens: list[tuple[RowRange, str]]  # where each stream stopped at ``end`` (resume here)
    waiting: dict[RowRange, list[tuple[RowRange, str]]]  # merge children still missing parents

    @property
    def records(self) -> list[ChangeRecord]:
        return [r for read in self.reads for r in read.records]


def _range(pb_range) -> RowRange:
    return RowRange(pb_range.start_key_closed, pb_range.end_key_open)


def _partition(row_range: RowRange) -> bt.StreamPartition:
    return bt.StreamPartition(
        row_range=bt.RowRange(start_key_closed=row_range.start, end_key_open=row_range.end)
    )


def read_partition(
    client,
    table_name: str,
    partition: RowRange,
    *,
    start: datetime | None = None,
    tokens: list[tuple[RowRange, str]] | None = None,
    end: datetime | None = None,
    app_profile_id: str = "",
    heartbeat: timedelta = timedelta(milliseconds=200),
    max_heartbeats: int | None = None,
) -> PartitionRead:
    """One ReadChangeStream call; without ``end`` it stops after ``max_heartbeats`` heartbeats."""
    request = bt.ReadChangeStreamRequest(
        table_name=table_name,
        app_profile_id=app_profile_id,
        partition=_partition(partition),
        heartbeat_duration=duration_pb2.Duration(
            seconds=int(heartbeat.total_seconds()), nanos=heartbeat.microseconds * 1000
        ),
    )
    if tokens:
        request.continuation_tokens = bt.StreamContinuationTokens(
            tokens=[bt.StreamContinuationToken(partition=_partition(r), token=t) for r, t in tokens]
        )
    elif start is not None:
        request.start_time = start
    if end is not None:
        request.end_time = end
    result = PartitionRead(partition)
    stream = client.read_change_stream(request=request)
    record: dict | None = None
    for response in stream:
        message = type(response).pb(response)
        kind = message.WhichOneof("stream_record")
        if kind == "data_change":
            change = message.data_change
            if change.type_ != bt.ReadChangeStreamResponse.DataChange.Type.CONTINUATION:
                record = {
                    "type": bt.ReadChangeStreamResponse.DataChange.Type(change.type_).name,
                    "cluster": change.source_cluster_id,
                    "row": change.row_key,
                    "commit": change.commit_timestamp.seconds * 1_000_000
                    + change.commit_timestamp.nanos // 1000,
                    "tb": change.tiebreaker,
                    "mutations": [],
                    "pending": None,
                    "messages": 0,
                    "chunked": 0,
                }
            record["messages"] += 1
            for chunk in change.chunks:
                _add_chunk(record, chunk)
            if change.done:
                wm = change.estimated_low_watermark
                result.records.append(
                    ChangeRecord(
                        partition,
                        record["type"],
                        record["cluster"],
                        record["row"],
                        record["commit"],
                        record["tb"],
                        record["mutations"],
                        change.token,
                        wm.seconds * 1_000_000 + wm.nanos // 1000,
                        record["messages"],
                        record["chunked"],
                    )
                )
                record = None
        elif kind == "heartbeat":
            beat = message.heartbeat
            wm = beat.estimated_low_watermark
            result.heartbeats.append(
                (
                    _range(beat.continuation_token.partition.row_range),
                    beat.continuation_token.token,
                    wm.seconds * 1_000_000 + wm.nanos // 1000,
                )
            )
            if max_heartbeats is not None and len(result.heartbeats) >= max_heartbeats:
                stream.cancel()
                break
        elif kind == "close_stream":
            close = message.close_stream
            result.close_code = close.status.code
            result.close_tokens = [
                (_range(t.partition.row_range), t.token) for t in close.continuation_tokens
            ]
            result.new_partitions = [_range(p.row_range) for p in close.new_partitions]
    return result


def _add_chunk(record: dict, chunk) -> None:
    mutation = chunk.mutation
    info = chunk.chunk_info if chunk.HasField("chunk_info") else None
    if info is not None and info.chunked_value_size:
        cell = mutation.set_cell
        if info.chunked_value_offset == 0:
            record["pending"] = [cell.family_name, cell.column_qualifier, cell.timestamp_micros,
                                 bytearray()]
        record["pending"][3] += cell.value
        if info.last_chunk:
            family, qualifier, stamp, value = record["pending"]
            record["mutations"].append(SetCell(family, qualifier, stamp, bytes(value)))
            record["pending"] = None
            record["chunked"] += 1
        return
    kind = mutation.WhichOneof("mutation")
    if kind == "set_cell":
        c = mutation.set_cell
        record["mutations"].append(
            SetCell(c.family_name, c.column_qualifier, c.timestamp_micros, c.value)
        )
    elif kind == "delete_from_column":
        d = mutation.delete_from_column
        record["mutations"].append(
            DeleteFromColumn(
                d.family_name,
                d.column_qualifier,
                d.time_range.start_timestamp_micros,
                d.time_range.end_timestamp_micros,
            )
        )
    elif kind == "delete_from_family":
        record["mutations"].append(DeleteFromFamily(mutation.delete_from_family.family_name))


def read_all(
    client,
    table_name: str,
    *,
    end: datetime,
    start: datetime | None = None,
    resume: list[tuple[RowRange, str]] | None = None,
    app_profile_id: str = "",
    heartbeat: timedelta = timedelta(milliseconds=200),
) -> ReadResult:
    """Read every partition up to ``end`` (inclusive), following splits and merges.

    Start either at ``start`` (the whole key space is requested; the emulator answers with
    the partitions live then and their tokens) or from ``resume``, the ``end_tokens`` of an
    earlier result.
    """
    queue: list[tuple[RowRange, list[tuple[RowRange, str]] | None, datetime | None]] = []
    if resume:
        queue += [(r, [(r, t)], None) for r, t in resume]
    else:
        queue.append((FULL_KEY_SPACE, None, start))
    waiting: dict[RowRange, list[tuple[RowRange, str]]] = {}
    reads, end_tokens = [], []
    while queue:
        partition, tokens, begin = queue.pop(0)
        read = read_partition(
            client,
            table_name,
            partition,
            start=begin,
            tokens=tokens,
            end=end,
            app_profile_id=app_profile_id,
            heartbeat=heartbeat,
        )
        reads.append(read)
        if read.close_code == 0:
            if read.heartbeats:
                end_tokens.append((partition, read.heartbeats[-1][1]))
            continue
        for token_range, token in read.close_tokens:
            for child in read.new_partitions:
                if child.covers(token_range):
                    waiting.setdefault(child, []).append((token_range, token))
        for child in read.new_partitions:
            pieces = waiting.get(child, [])
            if _tiles(child, [r for r, _ in pieces]):
                queue.append((child, waiting.pop(child), None))
    return ReadResult(reads, end_tokens, waiting)


def _tiles(whole: RowRange, parts: list[RowRange]) -> bool:
    expected, unbounded = whole.start, False
    for part in sorted(parts):
        if unbounded or part.start != expected:
            return False
        expected, unbounded = part.end, not part.end
    return unbounded if not whole.end else (not unbounded and expected == whole.end)
