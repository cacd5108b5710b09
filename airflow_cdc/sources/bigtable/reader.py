"""Reads one Bigtable change stream partition over one window ``[s, e)``.

Procedure for one partition (the seed's partitions and watermarks):

1. Read from the partition's continuation tokens (or, for a partition the stream starts
   with, from ``s``); a merge child from all its parents' tokens together.
2. Data changes with a commit timestamp before ``e`` are the window's, one change row per
   mutation; those at or after ``e`` are left for the next window, and the resume token
   stays before the first of them. A record before ``e`` that arrives after such a record
   (another cluster's write, replicated late) is taken too and named in the resume position's
   ``skip`` set, so the next window, reading from the earlier token, does not take it again.
3. Every record and heartbeat carries the partition's estimated low watermark: every record
   still to come has a commit timestamp at or after it. The read ends once it reaches ``e``
   (the evidence that the partition covered ``[s, e)``, I4), or at the read deadline, when
   the partition continues from its watermark and the gate waits (see :mod:`.readiness`).
4. A close with OUT_OF_RANGE ends the partition (I5): its children start from the tokens
   the close hands over. A partition that left records for the next window does not end in
   this one: the next window reads it again from its token, takes them and meets the close.
5. A read the service breaks off (UNAVAILABLE, its own DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED)
   raises as is: the source reads the partition again from step 1 (:mod:`..read_errors`). A
   position refused as OUT_OF_RANGE is gone from the stream: the error names the fix.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from airflow_cdc.model import CdcError, ChildPartition, PartitionOutcome, PartitionPosition, Window
from airflow_cdc.model import parent_handovers
from airflow_cdc.sources.base import DeadLetter, PartitionRead
from airflow_cdc.sources.read_errors import position_expired, transient_errors
from airflow_cdc.sources.bigtable.connection import BigtableConnection
from airflow_cdc.sources.bigtable.mapping import change_rows
from airflow_cdc.sources.bigtable.partitions import (
    PartitionName,
    RowRange,
    TokenPiece,
    read_resume,
    resume_text,
)
from airflow_cdc.sources.bigtable.records import (
    GARBAGE_COLLECTION,
    OUT_OF_RANGE,
    CloseStream,
    DataChange,
    Heartbeat,
    MalformedChange,
    stream_records,
)

log = logging.getLogger(__name__)
INITIAL_PARTITION = "initial"
# A DEADLINE_EXCEEDED this long (a share of the read deadline) before the read deadline is
# the service's own, mid-stream: a transient error, not the end of the read.
DEADLINE_SLACK = 0.05


class ChangeStreamReadError(CdcError):
    """The service refused a read or closed a stream with an error."""


def initial_read(connection: BigtableConnection, window: Window) -> PartitionRead:
    """The stream's first window: the table's partitions now, each read from ``s``."""
    client = connection.data_client()
    request = {"table_name": connection.table_name, "app_profile_id": connection.app_profile}
    children = []
    for response in client.generate_initial_change_stream_partitions(request=request):
        rows = response.partition.row_range
        name = PartitionName(0, RowRange(bytes(rows.start_key_closed), bytes(rows.end_key_open)))
        children.append(ChildPartition(name.partition_id, window.start, (INITIAL_PARTITION,)))
    outcome = PartitionOutcome(INITIAL_PARTITION, True, window.start, children=tuple(children))
    return PartitionRead(rows=(), outcome=outcome)


def _request(connection: BigtableConnection, rows: RowRange, position: PartitionPosition,
             heartbeat: timedelta) -> tuple[dict, list[TokenPiece], frozenset[str]]:
    request = {
        "table_name": connection.table_name,
        "app_profile_id": connection.app_profile,
        "partition": {"row_range": {"start_key_closed": rows.start, "end_key_open": rows.end}},
        "heartbeat_duration": heartbeat,
    }
    handovers = parent_handovers(position.resume_position)
    tokens: list[TokenPiece] = []
    skip: frozenset[str] = frozenset()
    if handovers is not None:
        tokens = [piece for text in handovers.values() for piece in read_resume(text)[0]]
    elif position.resume_position:
        tokens, skip = read_resume(position.resume_position)
    if not tokens:  # a partition the stream starts with, not read past its start yet
        request["start_time"] = position.start
        return request, tokens, skip
    request["continuation_tokens"] = {"tokens": [
        {"partition": {"row_range": {"start_key_closed": t.rows.start,
                                     "end_key_open": t.rows.end}}, "token": t.token}
        for t in sorted(tokens, key=lambda t: t.rows.start)
    ]}
    return request, tokens, skip


def read_partition(
    connection: BigtableConnection,
    window: Window,
    position: PartitionPosition,
    *,
    stream: str,
    heartbeat: timedelta,
    deadline: timedelta,
    progress_every: float = 30.0,
) -> PartitionRead:
    """Steps 1-4 of the module doc for one partition: each record goes to the handler of its
    type (:class:`PartitionReader`) until the read ends."""
    if position.partition_id == INITIAL_PARTITION:
        return initial_read(connection, window)
    name = PartitionName.parse(position.partition_id)
    request, resume, skipped = _request(connection, name.rows, position, heartbeat)
    reader = PartitionReader(connection.table, window, position, name, stream, resume, skipped)
    _read_stream(reader, connection, request, deadline, progress_every)
    return reader.result()


def _read_stream(reader: PartitionReader, connection: BigtableConnection, request: dict,
                 deadline: timedelta, progress_every: float) -> None:
    """Step 5 of the module doc around the records' handlers: the call, its errors, its end."""
    from google.api_core import exceptions

    position, window = reader.position, reader.window
    started = last_log = time.monotonic()
    call = None
    try:
        call = connection.data_client().read_change_stream(request=request, timeout=deadline.total_seconds())
        for record in stream_records(call):
            if reader.on_record(record):
                break
            if time.monotonic() - last_log >= progress_every:
                last_log = time.monotonic()
                log.info("partition %s: %d records, low watermark %s, %s behind the window end",
                         position.partition_id, reader.records, reader.watermark.isoformat(),
                         window.end - reader.watermark)
    except exceptions.DeadlineExceeded:
        if time.monotonic() - started < deadline.total_seconds() * (1 - DEADLINE_SLACK):
            raise  # the service's, mid-stream, not the read deadline: read_errors reads again
        log.info("partition %s: read deadline of %s reached after %.0f s, low watermark %s",
                 position.partition_id, deadline, time.monotonic() - started, reader.watermark)
    except exceptions.GoogleAPICallError as error:
        if isinstance(error, transient_errors()):
            raise  # read again from the planned position (read_errors)
        raise _refused(error, connection, window, position) from error
    finally:
        call_cancel = getattr(call, "cancel", None)
        if call_cancel is not None and reader.closed is None:
            try:
                call_cancel()
            except Exception:  # noqa: BLE001 - cancelling a finished call is harmless
                pass


def _refused(error, connection: BigtableConnection, window: Window, position: PartitionPosition):
    """The error a read the service refused raises: an expired position naming the fix, else
    what was refused and where to look."""
    from google.api_core import exceptions

    if isinstance(error, exceptions.OutOfRange):
        return position_expired(
            "Bigtable", position.partition_id, window, format_position(position),
            f"{error.message} ({connection.table_name})", ChangeStreamReadError)
    return ChangeStreamReadError(
        f"Bigtable refused reading partition {position.partition_id} of "
        f"{connection.table_name} from {format_position(position)} for window "
        f"{window.window_id}: {error.message}. " + _fix_for(error))


class PartitionReader:
    """One partition's read over one window: one handler per record type (data change,
    malformed change, heartbeat, close stream), each doing its steps of the module doc to
    the read's state; :meth:`result` is the read."""

    def __init__(self, table: str, window: Window, position: PartitionPosition, name: PartitionName,
                 stream: str, resume: list[TokenPiece], skipped: frozenset[str]) -> None:
        self.table, self.window, self.position, self.name, self.stream = table, window, position, name, stream
        self.resume = resume  # where the next window reads from (step 2)
        self.skip = set(skipped)  # taken by the previous window after the token read from
        self.rows: list = []
        self.dead: list[DeadLetter] = []
        self.taken_after_hold: set[str] = set()
        self.watermark = position.start
        self.held = False  # a record at or after e was met: the resume token stays before it
        self.closed: CloseStream | None = None
        self.counts = {"mutations": 0, "gc_mutations": 0, "chunked": 0, "held_records": 0}
        self.records = 0

    def on_record(self, record) -> bool:
        """Hand ``record`` to its type's handler, then move the watermark (step 3); True when
        the read ends: the stream closed, or the watermark reached the window end."""
        if isinstance(record, MalformedChange):
            self.on_malformed_change(record)
        elif isinstance(record, DataChange):
            self.on_data_change(record)
        elif isinstance(record, Heartbeat):
            self.on_heartbeat(record)
        else:
            self.on_close_stream(record)
            return True
        mark = record.low_watermark
        if mark is not None and mark > self.watermark:
            self.watermark = mark
        return self.watermark >= self.window.end

    def on_data_change(self, record: DataChange) -> None:
        """Step 2: a change before ``e`` becomes change rows (a mutation this source does not
        apply, a dead letter); one at or after ``e`` is held for the next window."""
        if self._skipped(record.event_id):
            pass
        elif record.commit_timestamp < self.window.end and record.unsupported:
            self._take(record.event_id)
            self.dead.append(DeadLetter(
                self.position.partition_id, record.describe(),
                f"mutation {record.unsupported[0]} of row {record.row_key!r} is not one "
                f"this source applies (SetCell, DeleteFromColumn, DeleteFromFamily): "
                f"the record is kept here whole",
                source_table=self.table, event_id=record.event_id))
        elif record.commit_timestamp < self.window.end:
            self._take(record.event_id)
            mapped = change_rows(record, self.table, self.stream, self.window.window_id,
                                 self.position.partition_id)
            self.rows.extend(mapped)
            self.counts["mutations"] += len(mapped)
            self.counts["chunked"] += record.chunked
            if record.type == GARBAGE_COLLECTION:
                self.counts["gc_mutations"] += len(mapped)
        else:
            self._hold()
        if not self.held:
            self.resume = [TokenPiece(self.name.rows, record.token)]

    def on_malformed_change(self, record: MalformedChange) -> None:
        """Dead-lettered like a change of the window (kept whole, named); one known to commit
        at or after ``e`` is held for the next window like any other."""
        if self._skipped(record.event_id):
            pass
        elif record.commit_timestamp is None or record.commit_timestamp < self.window.end:
            self._take(record.event_id)
            self.dead.append(DeadLetter(
                self.position.partition_id, record.raw, f"{record.reason}: the record is kept here whole",
                source_table=self.table, event_id=record.event_id))
        else:
            self._hold()
        if not self.held and record.token:
            self.resume = [TokenPiece(self.name.rows, record.token)]

    def on_heartbeat(self, record: Heartbeat) -> None:
        """Step 3: progress only; its token is where the next read starts, unless a record
        was held."""
        if not self.held:
            self.resume = [record.token]

    def on_close_stream(self, record: CloseStream) -> None:
        """Step 4: the stream closed (:meth:`result` decides whether the partition ended)."""
        self.closed = record

    def _skipped(self, event_id: str | None) -> bool:
        """Whether the previous window took this record already (its resume position's skip
        set); once the resume token passes it, no later read meets it again."""
        if event_id is None or event_id not in self.skip:
            return False
        if not self.held:
            self.skip.discard(event_id)
        return True

    def _take(self, event_id: str | None) -> None:
        """A record of the window; taken after a held one, it joins the next read's skip set."""
        self.records += 1
        if self.held and event_id is not None:
            self.taken_after_hold.add(event_id)

    def _hold(self) -> None:
        self.held = True
        self.counts["held_records"] += 1

    def result(self) -> PartitionRead:
        """The read: finished when the stream closed OUT_OF_RANGE with nothing held (its
        children start from the close's tokens), else continuing from :attr:`resume`."""
        closed, position, window = self.closed, self.position, self.window
        if closed is not None and closed.code not in (0, OUT_OF_RANGE):
            raise ChangeStreamReadError(
                f"Bigtable closed partition {position.partition_id} with status {closed.code}: "
                f"{closed.message}")
        finished = closed is not None and closed.code == OUT_OF_RANGE and not self.held
        children: tuple[ChildPartition, ...] = ()
        if finished:
            children = tuple(
                ChildPartition(
                    PartitionName(self.name.generation + 1, rows).partition_id,
                    min(self.watermark, window.end),
                    (position.partition_id,),
                    handover=resume_text([t for t in closed.tokens if _within(t.rows, rows)]),
                )
                for rows in closed.new_partitions
            )
        # Held: the next read starts before the held record and must skip what this one took
        # after it. An empty token list resumes from the start time, with the skip set.
        kept_skip = self.skip | self.taken_after_hold
        resume_position = resume_text(self.resume, kept_skip) if self.resume or kept_skip else None
        outcome = PartitionOutcome(
            partition_id=position.partition_id,
            finished=finished,
            watermark=self.watermark,
            records=self.records,
            resume_position=None if finished else resume_position,
            children=children,
        )
        return PartitionRead(rows=tuple(self.rows), outcome=outcome, counts=self.counts,
                             dead_letters=tuple(self.dead))


def _within(piece: RowRange, child: RowRange) -> bool:
    return piece.start >= child.start and (not child.end or (piece.end and piece.end <= child.end))


def format_position(position: PartitionPosition) -> str:
    if position.resume_position:
        return "its continuation token"
    return f"start time {position.start.isoformat()}"


def _fix_for(error) -> str:
    from google.api_core import exceptions

    if isinstance(error, exceptions.NotFound):
        return "Check the table id and the app profile (it must use single-cluster routing)"
    return "Check the table, the app profile and the credentials"
