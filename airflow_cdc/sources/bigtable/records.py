"""``ReadChangeStream`` responses as whole records: data changes, heartbeats, stream closes.

The Python client has no change-stream state machine (Java's ``ChangeStreamStateMachine``),
so the rules it applies are here, as the API reference states them:

1. A data change may span several responses: the first carries its type (USER or
   GARBAGE_COLLECTION), row key, cluster, commit timestamp and tiebreaker, the following ones
   type CONTINUATION; only the last has ``done``, the token and the low watermark.
2. A value larger than one message arrives in consecutive chunks of one SetCell: the first
   chunk's ``chunk_info`` gives the whole size, each chunk its offset, the last
   ``last_chunk``; the value is their concatenation, checked against the size.
3. A heartbeat carries a continuation token and the partition's low watermark.
4. A close carries a status (OUT_OF_RANGE when the partition split or merged, with tokens
   and the new partitions; OK when the request's end time was passed).

A data change that breaks these rules (a chunk out of order, a continuation of nothing, a
commit timestamp that is missing or no instant of the years 1 to 9999) is handed over as a
:class:`MalformedChange` naming the row and the fault: the reader dead-letters it whole and
reads on, so one broken record never fails the window.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from airflow_cdc.model import CdcError, ensure_utc
from airflow_cdc.sources.bigtable.partitions import RowRange, TokenPiece

USER, GARBAGE_COLLECTION, CONTINUATION = "USER", "GARBAGE_COLLECTION", "CONTINUATION"
SET_CELL, DELETE_FROM_COLUMN, DELETE_FROM_FAMILY = (
    "SET_CELL", "DELETE_FROM_COLUMN", "DELETE_FROM_FAMILY")
OUT_OF_RANGE = 11
UNSUPPORTED = "UNSUPPORTED:"


class MalformedStreamError(CdcError):
    """The stream broke the API's rules (a chunk out of order, a continuation of nothing)."""


@dataclass(frozen=True)
class Mutation:
    """One mutation of a data change; times in microseconds (0 = open bound of a range)."""

    kind: str
    family: str
    qualifier: bytes | None = None
    timestamp_micros: int | None = None  # SetCell
    start_micros: int | None = None  # DeleteFromColumn
    end_micros: int | None = None
    value: bytes | None = None


@dataclass(frozen=True)
class DataChange:
    row_key: bytes
    type: str
    cluster: str
    commit_timestamp: datetime
    tiebreaker: int
    mutations: tuple[Mutation, ...]
    token: str
    low_watermark: datetime | None
    chunked: int = 0  # values that arrived in more than one chunk

    @property
    def unsupported(self) -> list[str]:
        """The kinds of mutations this reader cannot apply (the record is dead-lettered)."""
        return [m.kind[len(UNSUPPORTED):] for m in self.mutations if m.kind.startswith(UNSUPPORTED)]

    def describe(self) -> str:
        """The whole record as text, for the dead-letter table."""
        return repr(self)

    @property
    def event_id(self) -> str:
        """Stable across reads: row, commit time, tiebreaker and cluster name one record."""
        micros = int(self.commit_timestamp.timestamp() * 1_000_000)
        return f"{self.row_key.hex()}/{micros}/{self.tiebreaker}/{self.cluster or '-'}"


@dataclass(frozen=True)
class MalformedChange:
    """A data change that broke the API's rules, kept whole for the dead-letter table.

    ``commit_timestamp`` and ``token`` are None when the record did not carry them (a
    continuation of nothing, a change cut off by the next one).
    """

    row_key: bytes
    reason: str
    raw: str
    commit_timestamp: datetime | None = None
    tiebreaker: int = 0
    cluster: str = ""
    token: str | None = None
    low_watermark: datetime | None = None

    @property
    def event_id(self) -> str | None:
        """As :attr:`DataChange.event_id` when the commit timestamp is known, else None."""
        if self.commit_timestamp is None:
            return None
        micros = int(self.commit_timestamp.timestamp() * 1_000_000)
        return f"{self.row_key.hex()}/{micros}/{self.tiebreaker}/{self.cluster or '-'}"


@dataclass(frozen=True)
class Heartbeat:
    token: TokenPiece
    low_watermark: datetime | None


@dataclass(frozen=True)
class CloseStream:
    code: int
    message: str
    tokens: tuple[TokenPiece, ...]
    new_partitions: tuple[RowRange, ...]


def _time_field(message, name: str) -> datetime | None:
    """The Timestamp field ``name`` of a proto-plus ``message``, None when unset or when it is
    no instant of the years 1 to 9999 (proto-plus cannot even hand it over)."""
    try:
        return _time(getattr(message, name))
    except (OverflowError, ValueError, OSError):
        return None


def _time(value) -> datetime | None:
    """A proto Timestamp as proto-plus hands it over (DatetimeWithNanoseconds), or None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.timestamp() == 0:
            return None
        value = ensure_utc("timestamp", value)
        # A plain datetime: proto-plus hands over DatetimeWithNanoseconds, a subclass Spark's
        # schema check refuses.
        return datetime(value.year, value.month, value.day, value.hour, value.minute,
                        value.second, value.microsecond, tzinfo=value.tzinfo)
    seconds, nanos = getattr(value, "seconds", 0), getattr(value, "nanos", 0)
    if not seconds and not nanos:
        return None
    from datetime import timedelta, timezone

    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(
        seconds=seconds, microseconds=nanos // 1000)


def _range(partition) -> RowRange:
    rows = partition.row_range
    return RowRange(bytes(rows.start_key_closed or b""), bytes(rows.end_key_open or b""))


def _type_name(value) -> str:
    return getattr(value, "name", str(value))


class _Pending:
    """A data change being assembled across responses and chunks."""

    def __init__(self, change) -> None:
        self.row_key = bytes(change.row_key)
        self.type = _type_name(change.type_)
        self.cluster = change.source_cluster_id
        self.commit_timestamp = _time_field(change, "commit_timestamp")
        self.tiebreaker = int(change.tiebreaker)
        self.mutations: list[Mutation] = []
        self.value: bytearray | None = None
        self.value_size = 0
        self.value_cell: Mutation | None = None
        self.chunked = 0
        self.responses = [change]
        # Set: the record broke a rule; its further chunks are kept but not assembled.
        self.problem: str | None = None if self.commit_timestamp is not None else (
            f"row {self.row_key!r}: the data change has no commit_timestamp of the years 1 to 9999")

    def malformed(self, problem: str | None = None, change=None) -> MalformedChange:
        """The record as it arrived so far, named with ``problem`` (or its own)."""
        return MalformedChange(
            row_key=self.row_key, reason=problem or self.problem or "", raw=_responses_text(self.responses),
            commit_timestamp=self.commit_timestamp, tiebreaker=self.tiebreaker,
            cluster=self.cluster, token=change.token if change is not None else None,
            low_watermark=_time_field(change, "estimated_low_watermark") if change is not None else None)

    def add_chunks(self, chunks) -> None:
        if self.problem is not None:
            return
        try:
            self._add_chunks(chunks)
        except MalformedStreamError as error:
            self.problem = str(error)

    def _add_chunks(self, chunks) -> None:
        for chunk in chunks:
            info = chunk.chunk_info if "chunk_info" in chunk else None
            mutation = chunk.mutation
            if info is None or (not info.chunked_value_size and not self.value):
                if self.value is not None:
                    raise MalformedStreamError(
                        f"row {self.row_key!r}: a chunked value ended without last_chunk")
                self.mutations.append(_mutation(mutation))
                continue
            if self.value is None:
                if info.chunked_value_offset:
                    raise MalformedStreamError(
                        f"row {self.row_key!r}: a chunked value starts at offset "
                        f"{info.chunked_value_offset}, not 0")
                self.value, self.value_size = bytearray(), int(info.chunked_value_size)
                self.value_cell = _mutation(mutation)
            if info.chunked_value_offset != len(self.value):
                raise MalformedStreamError(
                    f"row {self.row_key!r}: chunk at offset {info.chunked_value_offset} after "
                    f"{len(self.value)} bytes")
            self.value += bytes(mutation.set_cell.value)
            if info.last_chunk:
                if len(self.value) != self.value_size:
                    raise MalformedStreamError(
                        f"row {self.row_key!r}: chunked value of {len(self.value)} bytes, "
                        f"announced {self.value_size}")
                cell = self.value_cell
                self.mutations.append(Mutation(
                    SET_CELL, cell.family, cell.qualifier, cell.timestamp_micros,
                    value=bytes(self.value)))
                self.value, self.value_cell = None, None
                self.chunked += 1

    def finish(self, change) -> DataChange | MalformedChange:
        if self.problem is None and self.value is not None:
            self.problem = f"row {self.row_key!r}: done inside a chunked value"
        if self.problem is not None:
            return self.malformed(change=change)
        return DataChange(
            row_key=self.row_key, type=self.type, cluster=self.cluster,
            commit_timestamp=self.commit_timestamp, tiebreaker=self.tiebreaker,
            mutations=tuple(self.mutations), token=change.token,
            low_watermark=_time_field(change, "estimated_low_watermark"), chunked=self.chunked,
        )


def _mutation(mutation) -> Mutation:
    if "set_cell" in mutation:
        cell = mutation.set_cell
        return Mutation(SET_CELL, cell.family_name, bytes(cell.column_qualifier),
                        int(cell.timestamp_micros), value=bytes(cell.value))
    if "delete_from_column" in mutation:
        column = mutation.delete_from_column
        span = column.time_range
        return Mutation(DELETE_FROM_COLUMN, column.family_name, bytes(column.column_qualifier),
                        start_micros=int(span.start_timestamp_micros),
                        end_micros=int(span.end_timestamp_micros))
    if "delete_from_family" in mutation:
        return Mutation(DELETE_FROM_FAMILY, mutation.delete_from_family.family_name)
    # A mutation this reader does not know (AddToCell, MergeToCell of aggregate families):
    # the record is kept whole and goes to the dead-letter table, never dropped.
    kind = next((name for name in type(mutation).meta.fields if name in mutation), "unknown")
    return Mutation(f"{UNSUPPORTED}{kind}", "")


def _responses_text(responses) -> str:
    """The responses of one record as text for the dead-letter table (their proto text)."""
    try:
        return "\n".join(type(r).to_json(r) for r in responses)[:100_000]
    except Exception:  # noqa: BLE001 - the record is kept whatever it holds
        return repr(responses)[:100_000]


def stream_records(
    responses: Iterable,
) -> Iterator[DataChange | MalformedChange | Heartbeat | CloseStream]:
    """The whole records of one ``read_change_stream`` call, in stream order."""
    pending: _Pending | None = None
    for response in responses:
        if "data_change" in response:
            change = response.data_change
            if _type_name(change.type_) == CONTINUATION:
                if pending is None:
                    orphan = _Pending(change)
                    yield orphan.malformed(
                        f"row {orphan.row_key!r}: a CONTINUATION data change continues nothing",
                        change if change.done else None)
                    continue
                pending.responses.append(change)
            else:
                if pending is not None:
                    yield pending.malformed(
                        f"row {pending.row_key!r}: a new data change began before done")
                pending = _Pending(change)
            pending.add_chunks(change.chunks)
            if change.done:
                yield pending.finish(change)
                pending = None
        elif "heartbeat" in response:
            beat = response.heartbeat
            token = beat.continuation_token
            yield Heartbeat(TokenPiece(_range(token.partition), token.token),
                            _time_field(beat, "estimated_low_watermark"))
        elif "close_stream" in response:
            close = response.close_stream
            yield CloseStream(
                int(close.status.code), close.status.message,
                tuple(TokenPiece(_range(t.partition), t.token) for t in close.continuation_tokens),
                tuple(_range(p) for p in close.new_partitions),
            )
