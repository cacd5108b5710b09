"""The gRPC services: ``google.bigtable.v2.Bigtable`` and DropRowRange of the table admin.

There are no generated ``*_pb2_grpc`` servicers for Bigtable in google-cloud-bigtable, so the
handlers are registered with ``grpc.method_handlers_generic_handler`` under the real service
and method names, (de)serializing the protobuf messages behind the client's proto-plus types.

* ReadChangeStream, GenerateInitialChangeStreamPartitions: :mod:`.stream` decides; this
  module turns records into ``DataChange`` messages (values longer than ``chunk_size`` in
  several ``MutationChunk``\\ s, at most ``max_chunks_per_message`` chunks per message, the
  rest in ``CONTINUATION`` messages; ``done``, ``token`` and ``estimated_low_watermark`` on the
  last message of a record only).
* MutateRow, MutateRows, CheckAndMutateRow, ReadModifyWriteRow: each row change is one commit
  on the app profile's cluster at emulator-now. ReadRows, SampleRowKeys, PingAndWarm: enough
  for clients to check their data (reads see every commit up to now; replication lag is
  modelled in the change stream only).
* ``google.bigtable.admin.v2.BigtableTableAdmin/DropRowRange``: one commit per dropped row.

Status codes: unknown table or app profile NOT_FOUND; malformed requests and tokens
INVALID_ARGUMENT; start outside retention or before the stream existed OUT_OF_RANGE;
unsupported mutation or filter kinds UNIMPLEMENTED. Every message names the value and the fix.
"""

from __future__ import annotations

import re
import time
from collections.abc import Hashable, Iterator

import grpc
from google.cloud.bigtable_admin_v2.types import bigtable_table_admin as admin_types
from google.cloud.bigtable_v2.types import bigtable as bt
from google.cloud.bigtable_v2.types import data as bd
from google.protobuf import empty_pb2, timestamp_pb2
from google.rpc import status_pb2

from airflow_cdc_emulators.injected_faults import Faults

from .mutations import (
    GARBAGE_COLLECTION,
    Commit,
    DeleteFromColumn,
    DeleteFromFamily,
    Mutation,
    RowState,
    SetCell,
    apply_mutations,
    row_delete,
)
from .partitions import RowRange, show_key
from .stream import (
    POLL_SECONDS,
    CloseEvent,
    ChangeStore,
    HeartbeatEvent,
    RecordEvent,
    ServiceError,
    frontier,
    open_read,
    start_refused,
)
from .timeline import to_micros

SERVICE = "google.bigtable.v2.Bigtable"
ADMIN_SERVICE = "google.bigtable.admin.v2.BigtableTableAdmin"
DEFAULT_HEARTBEAT_SECONDS = 5.0  # the service's default when heartbeat_duration is unset
MIN_HEARTBEAT_SECONDS = 0.01
# The RPCs ``emulator.faults`` acts on; the first is the default.
CHANGE_STREAM_METHOD = "ReadChangeStream"
INITIAL_PARTITIONS_METHOD = "GenerateInitialChangeStreamPartitions"
_TABLE_NAME = re.compile(r"^projects/([^/]+)/instances/([^/]+)/tables/([^/]+)$")

# Raw protobuf classes behind the proto-plus types (faster to build than proto-plus).
P = bt.ReadChangeStreamResponse.pb()
DataChangePb = bt.ReadChangeStreamResponse.DataChange.pb()
ChunkPb = bt.ReadChangeStreamResponse.MutationChunk.pb()
ChunkInfoPb = bt.ReadChangeStreamResponse.MutationChunk.ChunkInfo.pb()
HeartbeatPb = bt.ReadChangeStreamResponse.Heartbeat.pb()
ClosePb = bt.ReadChangeStreamResponse.CloseStream.pb()
MutationPb = bd.Mutation.pb()
StreamPartitionPb = bd.StreamPartition.pb()
TokenPb = bd.StreamContinuationToken.pb()
RowRangePb = bd.RowRange.pb()


def _timestamp(micros: int) -> timestamp_pb2.Timestamp:
    seconds, rest = divmod(micros, 1_000_000)
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=rest * 1000)


def _micros(ts: timestamp_pb2.Timestamp) -> int:
    return ts.seconds * 1_000_000 + ts.nanos // 1000


def _partition_pb(row_range: RowRange):
    return StreamPartitionPb(
        row_range=RowRangePb(start_key_closed=row_range.start, end_key_open=row_range.end)
    )


def _ms(micros: int) -> int:
    return micros // 1000 * 1000


class BigtableServicer:
    """Answers the Bigtable data API for one table of a :class:`ChangeStore`."""

    def __init__(self, store: ChangeStore, *, chunk_size: int, max_chunks_per_message: int):
        if chunk_size < 1 or max_chunks_per_message < 1:
            raise ValueError(
                f"chunk_size {chunk_size} and max_chunks_per_message {max_chunks_per_message} "
                f"must be at least 1"
            )
        self.faults = Faults((CHANGE_STREAM_METHOD, INITIAL_PARTITIONS_METHOD))
        self.store = store
        self.history = store.history
        self.chunk_size = chunk_size
        self.max_chunks = max_chunks_per_message

    # -- registration -------------------------------------------------------------------------
    def handlers(self) -> list[grpc.GenericRpcHandler]:
        def stream(fn, request_type):
            return grpc.unary_stream_rpc_method_handler(
                self._guard_stream(fn),
                request_deserializer=request_type.pb().FromString,
                response_serializer=lambda m: m.SerializeToString(),
            )

        def unary(fn, request_type):
            return grpc.unary_unary_rpc_method_handler(
                self._guard_unary(fn),
                request_deserializer=request_type.pb().FromString,
                response_serializer=lambda m: m.SerializeToString(),
            )

        data = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "ReadChangeStream": stream(self.read_change_stream, bt.ReadChangeStreamRequest),
                "GenerateInitialChangeStreamPartitions": stream(
                    self.generate_initial_partitions,
                    bt.GenerateInitialChangeStreamPartitionsRequest,
                ),
                "MutateRow": unary(self.mutate_row, bt.MutateRowRequest),
                "MutateRows": stream(self.mutate_rows, bt.MutateRowsRequest),
                "CheckAndMutateRow": unary(self.check_and_mutate_row, bt.CheckAndMutateRowRequest),
                "ReadModifyWriteRow": unary(
                    self.read_modify_write_row, bt.ReadModifyWriteRowRequest
                ),
                "ReadRows": stream(self.read_rows, bt.ReadRowsRequest),
                "SampleRowKeys": stream(self.sample_row_keys, bt.SampleRowKeysRequest),
                "PingAndWarm": unary(self.ping_and_warm, bt.PingAndWarmRequest),
            },
        )
        admin = grpc.method_handlers_generic_handler(
            ADMIN_SERVICE,
            {"DropRowRange": unary(self.drop_row_range, admin_types.DropRowRangeRequest)},
        )
        return [data, admin]

    @staticmethod
    def _guard_unary(fn):
        def handler(request, context):
            try:
                return fn(request, context)
            except ServiceError as error:
                context.abort(grpc.StatusCode[error.code], str(error))

        return handler

    @staticmethod
    def _guard_stream(fn):
        def handler(request, context):
            try:
                yield from fn(request, context)
            except ServiceError as error:
                context.abort(grpc.StatusCode[error.code], str(error))

        return handler

    # -- common checks ------------------------------------------------------------------------
    def _table(self, name: str, field: str = "table_name") -> str:
        match = _TABLE_NAME.match(name)
        if not match:
            raise ServiceError(
                "INVALID_ARGUMENT",
                f"{field} {name!r} is not a table name: use "
                f"'projects/<project>/instances/<instance>/tables/<table>', e.g. "
                f"{self.history.table_name!r}",
            )
        if match.group(3) != self.history.table_id:
            raise ServiceError(
                "NOT_FOUND",
                f"table {match.group(3)!r} not found ({name}): this emulator serves table "
                f"{self.history.table_id!r} (any project and instance), e.g. "
                f"{self.history.table_name!r}",
            )
        return name

    def _cluster(self, app_profile_id: str) -> str:
        try:
            return self.history.reader_cluster(app_profile_id)
        except LookupError as error:
            raise ServiceError("NOT_FOUND", str(error)) from None

    # -- change streams -----------------------------------------------------------------------
    def generate_initial_partitions(self, request, context) -> Iterator:
        self._table(request.table_name)
        self._cluster(request.app_profile_id)
        call = self.faults.begin(INITIAL_PARTITIONS_METHOD, None)
        response = bt.GenerateInitialChangeStreamPartitionsResponse.pb()
        sent = 0
        for partition in self.store.live_partitions():
            call.check(context, sent)
            yield response(partition=_partition_pb(partition.range))
            sent += 1
        if call.next_due() is not None:
            call.abort(context, call.due(1 << 62), sent)

    def read_change_stream(self, request, context) -> Iterator:
        self._table(request.table_name)
        reader = self._cluster(request.app_profile_id)
        row_range = _stream_range(request.partition.row_range, "partition")
        start_us = tokens = None
        source = request.WhichOneof("start_from")
        if source == "continuation_tokens":
            tokens = [
                (_stream_range(t.partition.row_range, "continuation token partition"), t.token)
                for t in request.continuation_tokens.tokens
            ]
            if not tokens:
                raise ServiceError(
                    "INVALID_ARGUMENT",
                    "continuation_tokens is set but holds no token: pass the tokens of the "
                    "partition, or a start_time",
                )
        elif source == "start_time":
            start_us = _micros(request.start_time)
        end_us = _micros(request.end_time) if request.HasField("end_time") else None
        if request.HasField("heartbeat_duration"):
            d = request.heartbeat_duration
            heartbeat = max(MIN_HEARTBEAT_SECONDS, d.seconds + d.nanos / 1e9)
        else:
            heartbeat = DEFAULT_HEARTBEAT_SECONDS
        read = open_read(
            self.store,
            reader=reader,
            row_range=row_range,
            start_us=start_us,
            tokens=tokens,
            end_us=end_us,
            heartbeat_s=heartbeat,
            is_active=context.is_active,
        )
        call = self.faults.begin(CHANGE_STREAM_METHOD, row_range, _same_range)
        if call.rejection is not None:
            call.rejected()
            start = min(frontier(position) for _, position in read.pieces)
            raise start_refused(
                row_range, start, max(self.store.now_us(), start + 1),
                f"older than the retention of {self.history.config.retention} (the service no "
                f"longer accepts this position: fault injected by emulator.faults.reject_token)")
        quiet_after = (None if call.heartbeat_stop is None
                       else to_micros(call.heartbeat_stop.after))
        sent = 0
        for event in read:
            call.check(context, sent)
            if quiet_after is not None and _progress_of(event) > quiet_after:
                call.quiet(sent)  # the partition goes quiet: nothing more until the client leaves
                while context.is_active():
                    time.sleep(POLL_SECONDS)
                return
            sent += 1
            if isinstance(event, RecordEvent):
                yield from self._data_change(event)
            elif isinstance(event, HeartbeatEvent):
                yield P(
                    heartbeat=HeartbeatPb(
                        continuation_token=TokenPb(
                            partition=_partition_pb(row_range), token=event.token
                        ),
                        estimated_low_watermark=_timestamp(event.watermark_us),
                    )
                )
            elif isinstance(event, CloseEvent):
                code = grpc.StatusCode[event.code].value[0]
                yield P(
                    close_stream=ClosePb(
                        status=status_pb2.Status(code=code, message=event.message),
                        continuation_tokens=[
                            TokenPb(partition=_partition_pb(r), token=t) for r, t in event.tokens
                        ],
                        new_partitions=[_partition_pb(r) for r in event.new_partitions],
                    )
                )
                return
        if call.next_due() is not None:  # a stream shorter than the fault's count: at its end
            call.abort(context, call.due(1 << 62), sent)

    def _data_change(self, event: RecordEvent) -> Iterator:
        commit = event.commit
        chunks = list(self._chunks(commit))
        groups = [chunks[i : i + self.max_chunks] for i in range(0, len(chunks), self.max_chunks)]
        kind = (
            DataChangePb.Type.GARBAGE_COLLECTION
            if commit.type == GARBAGE_COLLECTION
            else DataChangePb.Type.USER
        )
        for i, group in enumerate(groups):
            if i == 0:
                change = DataChangePb(
                    type_=kind,
                    source_cluster_id=commit.cluster,
                    row_key=commit.row_key,
                    commit_timestamp=_timestamp(commit.commit_us),
                    tiebreaker=commit.tiebreaker,
                    chunks=group,
                )
            else:
                change = DataChangePb(type_=DataChangePb.Type.CONTINUATION, chunks=group)
            if i == len(groups) - 1:
                change.done = True
                change.token = event.token
                change.estimated_low_watermark.CopyFrom(_timestamp(event.watermark_us))
            yield P(data_change=change)

    def _chunks(self, commit: Commit) -> Iterator:
        size = self.chunk_size
        for mutation in commit.mutations:
            if isinstance(mutation, SetCell) and len(mutation.value) > size:
                total = len(mutation.value)
                for offset in range(0, total, size):
                    piece = mutation.value[offset : offset + size]
                    if offset == 0:
                        cell = MutationPb.SetCell(
                            family_name=mutation.family,
                            column_qualifier=mutation.qualifier,
                            timestamp_micros=mutation.timestamp_us,
                            value=piece,
                        )
                    else:  # continuation chunks carry only the value, as the API documents
                        cell = MutationPb.SetCell(value=piece)
                    yield ChunkPb(
                        chunk_info=ChunkInfoPb(
                            chunked_value_size=total,
                            chunked_value_offset=offset,
                            last_chunk=offset + size >= total,
                        ),
                        mutation=MutationPb(set_cell=cell),
                    )
            else:
                yield ChunkPb(mutation=mutation_to_pb(mutation))

    # -- writes ---------------------------------------------------------------------------------
    def _families(self) -> tuple[str, ...]:
        return tuple(self.history.config.families)

    def _commit(self, row_key: bytes, cluster: str, mutations_pb) -> Commit | None:
        if not row_key:
            raise ServiceError("INVALID_ARGUMENT", "row_key is empty: every row needs a key")
        if not mutations_pb:
            raise ServiceError(
                "INVALID_ARGUMENT",
                f"no mutations for row {show_key(row_key)!r}: pass at least one mutation",
            )

        def build(row: RowState, commit_us: int) -> list[Mutation]:
            return self._convert(row_key, row, commit_us, mutations_pb)

        return self.store.commit_row(row_key, cluster, build)

    def _convert(self, row_key: bytes, row: RowState, commit_us: int, mutations_pb) -> list:
        """Client mutations -> recorded mutations (DeleteFromRow becomes DeleteFromFamily's)."""
        families = self._families()
        working = {f: {q: dict(c) for q, c in cols.items()} for f, cols in row.items()}
        out: list[Mutation] = []

        def family_of(name: str) -> str:
            if name not in families:
                raise ServiceError(
                    "NOT_FOUND",
                    f"column family {name!r} not found in table {self.history.table_id!r} "
                    f"(row {show_key(row_key)!r}): use one of {list(families)}",
                )
            return name

        for m in mutations_pb:
            kind = m.WhichOneof("mutation")
            if kind == "set_cell":
                cell = m.set_cell
                stamp = cell.timestamp_micros
                if stamp == -1:
                    stamp = _ms(commit_us)
                elif m.timestamp_origin == MutationPb.TimestampOrigin.CLIENT_AUTO_GENERATED:
                    stamp = _ms(stamp)
                elif stamp < 0 or stamp % 1000:
                    raise ServiceError(
                        "INVALID_ARGUMENT",
                        f"SetCell timestamp_micros {stamp} for row {show_key(row_key)!r} does "
                        f"not match the table's millisecond granularity: pass a multiple of "
                        f"1000, or -1 for server time",
                    )
                family = family_of(cell.family_name)
                new = [SetCell(family, cell.column_qualifier, stamp, cell.value)]
            elif kind == "delete_from_column":
                d = m.delete_from_column
                new = [
                    DeleteFromColumn(
                        family_of(d.family_name),
                        d.column_qualifier,
                        d.time_range.start_timestamp_micros,
                        d.time_range.end_timestamp_micros,
                    )
                ]
            elif kind == "delete_from_family":
                new = [DeleteFromFamily(family_of(m.delete_from_family.family_name))]
            elif kind == "delete_from_row":
                new = list(row_delete(working))
            elif kind is None:
                raise ServiceError(
                    "INVALID_ARGUMENT",
                    f"a mutation for row {show_key(row_key)!r} sets no kind: use set_cell, "
                    f"delete_from_column, delete_from_family or delete_from_row",
                )
            else:
                raise ServiceError(
                    "UNIMPLEMENTED",
                    f"mutation {kind} (row {show_key(row_key)!r}) is not supported by the "
                    f"emulator: aggregate families are not modelled; use set_cell",
                )
            apply_mutations(working, new)
            out += new
        return out

    def mutate_row(self, request, context):
        self._table(request.table_name)
        self._commit(request.row_key, self._cluster(request.app_profile_id), request.mutations)
        return bt.MutateRowResponse.pb()()

    def mutate_rows(self, request, context) -> Iterator:
        self._table(request.table_name)
        cluster = self._cluster(request.app_profile_id)
        response = bt.MutateRowsResponse.pb()
        entries = []
        for index, entry in enumerate(request.entries):
            try:
                self._commit(entry.row_key, cluster, entry.mutations)
                status = status_pb2.Status(code=0)
            except ServiceError as error:
                status = status_pb2.Status(
                    code=grpc.StatusCode[error.code].value[0], message=str(error)
                )
            entries.append(response.Entry(index=index, status=status))
        yield response(entries=entries)

    def check_and_mutate_row(self, request, context):
        self._table(request.table_name)
        cluster = self._cluster(request.app_profile_id)
        row_key = request.row_key
        outcome = {}

        def build(row: RowState, commit_us: int) -> list[Mutation]:
            cells = _cells(row)
            if request.HasField("predicate_filter"):
                cells = _filter(request.predicate_filter, row_key, cells)
            outcome["matched"] = bool(cells)
            chosen = request.true_mutations if cells else request.false_mutations
            return self._convert(row_key, row, commit_us, chosen)

        if not row_key:
            raise ServiceError("INVALID_ARGUMENT", "row_key is empty: every row needs a key")
        self.store.commit_row(row_key, cluster, build)
        return bt.CheckAndMutateRowResponse.pb()(predicate_matched=outcome["matched"])

    def read_modify_write_row(self, request, context):
        self._table(request.table_name)
        cluster = self._cluster(request.app_profile_id)
        row_key = request.row_key
        if not request.rules:
            raise ServiceError(
                "INVALID_ARGUMENT",
                f"no rules for row {show_key(row_key)!r}: pass append_value or "
                f"increment_amount rules",
            )
        written: dict[tuple[str, bytes], SetCell] = {}

        def build(row: RowState, commit_us: int) -> list[Mutation]:
            working = {f: {q: dict(c) for q, c in cols.items()} for f, cols in row.items()}
            out = []
            for rule in request.rules:
                if rule.family_name not in self._families():
                    raise ServiceError(
                        "NOT_FOUND",
                        f"column family {rule.family_name!r} not found in table "
                        f"{self.history.table_id!r}: use one of {list(self._families())}",
                    )
                cells = working.get(rule.family_name, {}).get(rule.column_qualifier, {})
                latest = cells[max(cells)] if cells else None
                if rule.WhichOneof("rule") == "append_value":
                    value = (latest or b"") + rule.append_value
                else:
                    if latest is not None and len(latest) != 8:
                        raise ServiceError(
                            "INVALID_ARGUMENT",
                            f"cell {rule.family_name}:{show_key(rule.column_qualifier)} of row "
                            f"{show_key(row_key)!r} holds {len(latest)} bytes; "
                            f"increment_amount needs an 8-byte big-endian integer",
                        )
                    number = int.from_bytes(latest or bytes(8), "big", signed=True)
                    number = (number + rule.increment_amount + (1 << 63)) % (1 << 64) - (1 << 63)
                    value = number.to_bytes(8, "big", signed=True)
                stamp = max(_ms(commit_us), max(cells) if cells else 0)
                cell = SetCell(rule.family_name, rule.column_qualifier, stamp, value)
                apply_mutations(working, [cell])
                written[(cell.family, cell.qualifier)] = cell
                out.append(cell)
            return out

        self.store.commit_row(row_key, cluster, build)
        families: dict[str, list] = {}
        for (family, qualifier), cell in sorted(written.items()):
            families.setdefault(family, []).append(
                bd.Column.pb()(
                    qualifier=qualifier,
                    cells=[bd.Cell.pb()(timestamp_micros=cell.timestamp_us, value=cell.value)],
                )
            )
        row = bd.Row.pb()(
            key=row_key,
            families=[bd.Family.pb()(name=f, columns=cols) for f, cols in families.items()],
        )
        return bt.ReadModifyWriteRowResponse.pb()(row=row)

    def drop_row_range(self, request, context):
        self._table(request.name, "name")
        target = request.WhichOneof("target")
        if target == "row_key_prefix" and request.row_key_prefix:
            self.store.drop_row_range(request.row_key_prefix)
        elif target == "delete_all_data_from_table" and request.delete_all_data_from_table:
            self.store.drop_row_range(b"")
        else:
            raise ServiceError(
                "INVALID_ARGUMENT",
                "DropRowRange needs a non-empty row_key_prefix or delete_all_data_from_table="
                "True",
            )
        return empty_pb2.Empty()

    # -- reads ------------------------------------------------------------------------------------
    def read_rows(self, request, context) -> Iterator:
        self._table(request.table_name)
        self._cluster(request.app_profile_id)
        now = self.store.now_us()
        state = self.store.true_state(now + 1)
        keys = _select_rows(state, request.rows)
        if request.reversed:
            keys.reverse()
        limit = request.rows_limit or None
        response = bt.ReadRowsResponse.pb()
        chunk_type = response.CellChunk
        sent = 0
        for key in keys:
            cells = _cells(state[key])
            if request.HasField("filter"):
                cells = _filter(request.filter, key, cells)
            if not cells:
                continue
            chunks = []
            previous = None
            for family, qualifier, stamp, value in cells:
                chunk = chunk_type(timestamp_micros=stamp, value=value)
                if previous is None:
                    chunk.row_key = key
                if previous is None or previous[0] != family:
                    chunk.family_name.value = family
                if previous is None or previous[:2] != (family, qualifier):
                    chunk.qualifier.value = qualifier
                chunks.append(chunk)
                previous = (family, qualifier)
            chunks[-1].commit_row = True
            yield response(chunks=chunks)
            sent += 1
            if limit and sent >= limit:
                return

    def sample_row_keys(self, request, context) -> Iterator:
        self._table(request.table_name)
        response = bt.SampleRowKeysResponse.pb()
        live = self.store.live_partitions()
        for i, partition in enumerate(live):
            yield response(row_key=partition.range.end, offset_bytes=(i + 1) * 1_000_000)

    def ping_and_warm(self, request, context):
        return bt.PingAndWarmResponse.pb()()


def _same_range(wanted: Hashable, read: RowRange) -> bool:
    """A fault's partition (a RowRange or a (start, end) pair of row keys) is the read's."""
    return (wanted if isinstance(wanted, RowRange) else RowRange(*wanted)) == read


def _progress_of(event) -> int:
    """How far an event proves the partition's progress (a close: beyond any instant)."""
    if isinstance(event, (RecordEvent, HeartbeatEvent)):
        return event.watermark_us
    return 1 << 62


def mutation_to_pb(mutation: Mutation):
    if isinstance(mutation, SetCell):
        return MutationPb(
            set_cell=MutationPb.SetCell(
                family_name=mutation.family,
                column_qualifier=mutation.qualifier,
                timestamp_micros=mutation.timestamp_us,
                value=mutation.value,
            )
        )
    if isinstance(mutation, DeleteFromColumn):
        return MutationPb(
            delete_from_column=MutationPb.DeleteFromColumn(
                family_name=mutation.family,
                column_qualifier=mutation.qualifier,
                time_range=bd.TimestampRange.pb()(
                    start_timestamp_micros=mutation.start_us, end_timestamp_micros=mutation.end_us
                ),
            )
        )
    return MutationPb(delete_from_family=MutationPb.DeleteFromFamily(family_name=mutation.family))


def _stream_range(row_range, what: str) -> RowRange:
    start_kind = row_range.WhichOneof("start_key")
    end_kind = row_range.WhichOneof("end_key")
    if start_kind == "start_key_open" or end_kind == "end_key_closed":
        raise ServiceError(
            "INVALID_ARGUMENT",
            f"{what} row range uses {start_kind or end_kind}: change stream partitions are "
            f"start_key_closed / end_key_open ranges as GenerateInitialChangeStreamPartitions "
            f"returns them",
        )
    try:
        return RowRange(row_range.start_key_closed, row_range.end_key_open)
    except ValueError as error:
        raise ServiceError("INVALID_ARGUMENT", f"{what}: {error}") from None


# -- rows and filters ------------------------------------------------------------------------
Cell = tuple  # (family, qualifier, timestamp_us, value)


def _cells(row: RowState) -> list[Cell]:
    """A row's cells as Bigtable returns them: by family, qualifier, newest first."""
    return [
        (family, qualifier, stamp, row[family][qualifier][stamp])
        for family in sorted(row)
        for qualifier in sorted(row[family])
        for stamp in sorted(row[family][qualifier], reverse=True)
    ]


def _select_rows(state, row_set) -> list[bytes]:
    keys = sorted(state)
    if not row_set.row_keys and not row_set.row_ranges:
        return keys
    chosen = set(k for k in row_set.row_keys if k in state)
    for r in row_set.row_ranges:
        for key in keys:
            start_kind, end_kind = r.WhichOneof("start_key"), r.WhichOneof("end_key")
            if start_kind == "start_key_closed" and key < r.start_key_closed:
                continue
            if start_kind == "start_key_open" and key <= r.start_key_open:
                continue
            if end_kind == "end_key_open" and r.end_key_open and key >= r.end_key_open:
                continue
            if end_kind == "end_key_closed" and r.end_key_closed and key > r.end_key_closed:
                continue
            chosen.add(key)
    return sorted(chosen)


def _filter(f, row_key: bytes, cells: list[Cell]) -> list[Cell]:
    """The RowFilter kinds the emulator understands, applied to one row's cells."""
    kind = f.WhichOneof("filter")
    if kind is None or kind == "pass_all_filter":
        return cells
    if kind == "block_all_filter":
        return []
    if kind == "chain":
        for sub in f.chain.filters:
            cells = _filter(sub, row_key, cells)
        return cells
    if kind == "interleave":
        union = set()
        for sub in f.interleave.filters:
            union.update(_filter(sub, row_key, cells))
        return [c for c in cells if c in union]
    if kind == "condition":
        matched = _filter(f.condition.predicate_filter, row_key, cells)
        branch = f.condition.true_filter if matched else f.condition.false_filter
        return _filter(branch, row_key, cells) if branch.WhichOneof("filter") else []
    if kind == "row_key_regex_filter":
        return cells if re.fullmatch(f.row_key_regex_filter, row_key, re.S) else []
    if kind == "family_name_regex_filter":
        return [c for c in cells if re.fullmatch(f.family_name_regex_filter, c[0], re.S)]
    if kind == "column_qualifier_regex_filter":
        return [c for c in cells if re.fullmatch(f.column_qualifier_regex_filter, c[1], re.S)]
    if kind == "value_regex_filter":
        return [c for c in cells if re.fullmatch(f.value_regex_filter, c[3], re.S)]
    if kind == "cells_per_column_limit_filter":
        out, seen = [], {}
        for c in cells:
            seen[c[:2]] = seen.get(c[:2], 0) + 1
            if seen[c[:2]] <= f.cells_per_column_limit_filter:
                out.append(c)
        return out
    if kind == "cells_per_row_limit_filter":
        return cells[: f.cells_per_row_limit_filter]
    if kind == "cells_per_row_offset_filter":
        return cells[f.cells_per_row_offset_filter :]
    if kind == "timestamp_range_filter":
        r = f.timestamp_range_filter
        return [
            c
            for c in cells
            if c[2] >= r.start_timestamp_micros
            and (not r.end_timestamp_micros or c[2] < r.end_timestamp_micros)
        ]
    if kind == "strip_value_transformer":
        return [(c[0], c[1], c[2], b"") for c in cells] if f.strip_value_transformer else cells
    raise ServiceError(
        "UNIMPLEMENTED",
        f"row filter {kind} is not supported by the emulator: use chain, interleave, "
        f"condition, regex, limit, timestamp range or strip-value filters",
    )
