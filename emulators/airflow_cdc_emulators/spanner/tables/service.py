"""The Spanner API over a :class:`VersionedDatabase`: transactions, queries, partitions, commits.

Requests and answers are raw protobuf messages; refusals raise :class:`SpannerStatusError`
(the servicer turns them into gRPC statuses). What the real client sends, and what happens:

* ``ExecuteStreamingSql`` / ``ExecuteSql`` with a single-use read-only transaction (strong,
  ``read_timestamp``, ``exact_staleness``, ``min_read_timestamp``, ``max_staleness``), an
  inline ``begin`` (the new transaction's id comes back in the result metadata) or a
  transaction ``id``; a DML statement needs a read-write (or partitioned DML) transaction.
* ``BeginTransaction``: read-only ids carry their read timestamp (``ro/<micros>/<n>``), so
  they are valid from any session, client or process; read-write transactions live here,
  with the DML writes they made, until Commit or Rollback.
* ``PartitionQuery``: the query's rows at the transaction's read timestamp, cut into at most
  ``max_partitions`` (default 4) contiguous primary key ranges; a partition token carries its
  transaction, a digest of the SQL and parameters, and its key range, so any client can run it.
* ``Commit``: the mutations (after the transaction's DML writes) committed at one timestamp.
* A read at a timestamp before the earliest version time fails with FAILED_PRECONDITION; one
  after "now" waits (wall clock, at most 60 s) or fails (settable clock).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import threading
from dataclasses import dataclass, field

import grpc
from google.cloud.spanner_v1.types import (
    commit_response,
    result_set,
)
from google.cloud.spanner_v1.types import (
    keys as keys_types,
)
from google.cloud.spanner_v1.types import (
    spanner as spanner_types,
)
from google.cloud.spanner_v1.types import (
    transaction as transaction_types,
)
from google.cloud.spanner_v1.types import (
    type as spanner_type,
)
from google.protobuf import json_format, timestamp_pb2
from google.rpc import status_pb2

from ..clock import MAX_FUTURE_WAIT_US
from ..schema import GOOGLESQL, POSTGRESQL
from ..timeline import format_micros
from . import execution
from . import sql as table_sql
from .definition import TableSpec
from .mutations import WRITE_OPERATIONS, Delete, KeyRange, KeySet, Mutation, Write
from .status import SpannerStatusError, failed_precondition, invalid
from .store import RowView, VersionedDatabase
from .values import from_wire, to_wire, wire_type

ROWS_PER_BATCH = 200
DEFAULT_MAX_PARTITIONS = 4
_READ_ONLY_PREFIX = b"ro/"
_TOKEN_PREFIX = b"cdc-partition:"
_PartialResultSet = result_set.PartialResultSet.pb()
_ResultSet = result_set.ResultSet.pb()
_ResultSetMetadata = result_set.ResultSetMetadata.pb()
_ResultSetStats = result_set.ResultSetStats.pb()
_Transaction = transaction_types.Transaction.pb()
_CommitResponse = commit_response.CommitResponse.pb()
_PartitionResponse = spanner_types.PartitionResponse.pb()
_BatchDmlResponse = spanner_types.ExecuteBatchDmlResponse.pb()
_StructType = spanner_type.StructType.pb()
_KeySet = keys_types.KeySet.pb()


@dataclass
class ReadWriteTransaction:
    """A read-write (or partitioned DML) transaction: its DML writes wait for Commit."""

    id: bytes
    begin_sequence: int
    view: RowView
    partitioned: bool = False
    mutations: list[Mutation] = field(default_factory=list)


@dataclass(frozen=True)
class _ReadOnly:
    read_us: int


class TableService:
    """The table half of the Spanner service; one instance per served VersionedDatabase."""

    def __init__(self, database: VersionedDatabase, postgresql_databases=()) -> None:
        self.database = database
        self.postgresql_databases = frozenset(postgresql_databases)
        self._lock = threading.Lock()
        self._counter = itertools.count(1)
        self._read_write: dict[bytes, ReadWriteTransaction] = {}

    def dialect(self, database_id: str) -> str:
        return POSTGRESQL if database_id in self.postgresql_databases else GOOGLESQL

    # --- transactions -------------------------------------------------------------------
    def begin_transaction(self, options, database_id: str):
        """``TransactionOptions`` -> a Transaction message (id, and read timestamp if read-only)."""
        context = self._start(options, database_id)
        return self._transaction_message(context)

    def _start(self, options, database_id: str):
        mode = options.WhichOneof("mode")
        if mode == "read_only":
            read_us = self._read_timestamp(options.read_only, database_id)
            return _ReadOnly(read_us), self._read_only_id(read_us)
        with self._lock:
            transaction_id = f"rw/{next(self._counter)}".encode()
            transaction = ReadWriteTransaction(
                transaction_id,
                self.database.commit_sequence,
                RowView(self.database),
                partitioned=mode == "partitioned_dml",
            )
            self._read_write[transaction_id] = transaction
        return transaction, transaction_id

    def _read_only_id(self, read_us: int) -> bytes:
        with self._lock:
            number = next(self._counter)
        return _READ_ONLY_PREFIX + f"{read_us}/{number}".encode()

    def _transaction_message(self, started):
        context, transaction_id = started
        message = _Transaction(id=transaction_id)
        if isinstance(context, _ReadOnly):
            message.read_timestamp.CopyFrom(_timestamp_pb(context.read_us))
        return message

    def _context(self, selector, database_id: str):
        """The transaction a request runs in, and the Transaction message if it began one."""
        kind = selector.WhichOneof("selector")
        if kind is None:
            return _ReadOnly(self._read_timestamp(None, database_id)), None
        if kind == "single_use":
            if selector.single_use.WhichOneof("mode") != "read_only":
                raise invalid(
                    "DML statements may not be performed in single-use transactions, to avoid "
                    "replay; queries in single-use transactions must be read-only"
                )
            return _ReadOnly(self._read_timestamp(selector.single_use.read_only, database_id)), None
        if kind == "begin":
            started = self._start(selector.begin, database_id)
            return started[0], self._transaction_message(started)
        return self._by_id(selector.id, database_id), None

    def _by_id(self, transaction_id: bytes, database_id: str):
        if transaction_id.startswith(_READ_ONLY_PREFIX):
            try:
                read_us = int(transaction_id[len(_READ_ONLY_PREFIX) :].split(b"/")[0])
            except ValueError:
                raise _transaction_not_found(transaction_id) from None
            self._check_readable(read_us, database_id)
            return _ReadOnly(read_us)
        with self._lock:
            transaction = self._read_write.get(transaction_id)
        if transaction is None:
            raise _transaction_not_found(transaction_id)
        return transaction

    def rollback(self, transaction_id: bytes) -> None:
        with self._lock:
            self._read_write.pop(transaction_id, None)

    # --- read timestamps ----------------------------------------------------------------
    def _read_timestamp(self, read_only, database_id: str) -> int:
        clock = self.database.clock
        bound = None if read_only is None else read_only.WhichOneof("timestamp_bound")
        now_us = clock.now_us
        if bound == "read_timestamp":
            read_us = _micros(read_only.read_timestamp)
        elif bound == "exact_staleness":
            read_us = now_us - _duration_us(read_only.exact_staleness)
        elif bound == "min_read_timestamp":
            read_us = max(now_us, _micros(read_only.min_read_timestamp))
        else:  # strong; max_staleness may pick any recent time: now is one
            read_us = now_us
        self._check_readable(read_us, database_id)
        self.database.note_read(read_us)
        return read_us

    def _check_readable(self, read_us: int, database_id: str) -> None:
        clock = self.database.clock
        now_us = clock.now_us
        if read_us > now_us:
            if not clock.wall:
                raise failed_precondition(
                    f"Read timestamp {format_micros(read_us)} is after the emulator's clock "
                    f"{format_micros(now_us)}: the emulator's clock is settable and does not move "
                    f"by itself, so Spanner's wait for that time would never end. Read at or "
                    f"before {format_micros(now_us)}, or move the clock first (emulator.now = ...)."
                )
            if read_us - now_us > MAX_FUTURE_WAIT_US:
                raise failed_precondition(
                    f"Read timestamp {format_micros(read_us)} is "
                    f"{(read_us - now_us) / 1e6:.1f} s after now ({format_micros(now_us)}): "
                    f"the emulator waits at most {MAX_FUTURE_WAIT_US // 1_000_000} s for a read "
                    f"timestamp in the future"
                )
            clock.reach(read_us)
            now_us = clock.now_us
        earliest = self.database.earliest_version_us(now_us)
        if read_us < earliest:
            retention = self.database.version_retention_period
            raise failed_precondition(
                f"Read timestamp {format_micros(read_us)} is before the earliest version time "
                f"{format_micros(earliest)} of database {database_id} (version_retention_period "
                f"'{retention}', now {format_micros(now_us)}, created "
                f"{format_micros(self.database.created_us)}): versions older than the retention "
                f"period are gone. Read at or after {format_micros(earliest)}, or give the "
                f"database a longer version_retention_period."
            )

    # --- SQL ----------------------------------------------------------------------------
    def execute(self, request, database_id: str):
        """ExecuteSql / ExecuteStreamingSql: (metadata, rows of Values, stats or None)."""
        dialect = self.dialect(database_id)
        statement = table_sql.parse(request.sql, dialect)
        params = execution.QueryParams(request.params.fields, request.param_types)
        context, started = self._context(request.transaction, database_id)
        if isinstance(statement, table_sql.Select):
            if request.partition_token:
                answer = self._partition_answer(request, statement, context, database_id, params)
            else:
                relation = self._relation(statement.table, context, dialect, database_id)
                answer = execution.answer(statement, relation, params, dialect)
            metadata = _metadata(answer.fields, dialect, started)
            rows = [[to_wire(t, v) for (_, t), v in zip(answer.fields, row)] for row in answer.rows]
            return metadata, rows, None
        if not isinstance(context, ReadWriteTransaction):
            raise invalid(
                "DML statements may only be performed in read-write or partitioned DML "
                "transactions, not in read-only ones"
            )
        count = self._execute_dml(statement, context, dialect, params)
        stats = _ResultSetStats()
        if context.partitioned:
            stats.row_count_lower_bound = count
        else:
            stats.row_count_exact = count
        return _metadata([], dialect, started), [], stats

    def execute_streaming(self, request, database_id: str):
        metadata, rows, stats = self.execute(request, database_id)
        sent = 0
        while True:
            batch = rows[sent : sent + ROWS_PER_BATCH]
            partial = _PartialResultSet()
            if sent == 0:
                partial.metadata.CopyFrom(metadata)
            for row in batch:
                partial.values.extend(row)
            sent += len(batch)
            # The client hands rows over only once a batch carries a resume token.
            partial.resume_token = str(sent).encode()
            if sent >= len(rows):
                if stats is not None:
                    partial.stats.CopyFrom(stats)
                yield partial
                return
            yield partial

    def execute_unary(self, request, database_id: str):
        metadata, rows, stats = self.execute(request, database_id)
        answer = _ResultSet()
        answer.metadata.CopyFrom(metadata)
        for row in rows:
            answer.rows.add().values.extend(row)
        if stats is not None:
            answer.stats.CopyFrom(stats)
        return answer

    def execute_batch_dml(self, request, database_id: str):
        dialect = self.dialect(database_id)
        context, started = self._context(request.transaction, database_id)
        response = _BatchDmlResponse()
        if not isinstance(context, ReadWriteTransaction) or context.partitioned:
            raise invalid("ExecuteBatchDml needs a read-write transaction")
        for index, statement_pb in enumerate(request.statements):
            try:
                statement = table_sql.parse(statement_pb.sql, dialect)
                if isinstance(statement, table_sql.Select):
                    raise invalid(f"Statement {index} is not a DML statement: {statement_pb.sql}")
                params = execution.QueryParams(statement_pb.params.fields, statement_pb.param_types)
                count = self._execute_dml(statement, context, dialect, params)
            except SpannerStatusError as error:
                if index == 0 and started is not None:
                    self.rollback(context.id)
                response.status.CopyFrom(
                    status_pb2.Status(
                        code=grpc.StatusCode[error.code].value[0], message=error.message
                    )
                )
                return response
            result = response.result_sets.add()
            result.metadata.CopyFrom(_metadata([], dialect, started if index == 0 else None))
            result.stats.row_count_exact = count
        response.status.CopyFrom(status_pb2.Status(code=0))
        return response

    def _execute_dml(self, statement, transaction: ReadWriteTransaction, dialect, params) -> int:
        table = execution.resolve_table(statement.table, self.database.schema, dialect)
        if not isinstance(table, TableSpec):
            raise invalid(f"INFORMATION_SCHEMA views are read-only: {statement.table.text}")
        if transaction.partitioned and isinstance(statement, table_sql.Insert):
            raise invalid("Only UPDATE and DELETE statements are allowed in partitioned DML")
        rows = transaction.view.rows(table.name)
        mutations, count = execution.dml_mutations(statement, table, rows, params, dialect)
        for mutation in mutations:
            self.database.apply(transaction.view, mutation)
        if transaction.partitioned:
            self.database.commit_us(mutations)
            transaction.view = RowView(self.database)
        else:
            transaction.mutations.extend(mutations)
        return count

    def _relation(self, ref, context, dialect: str, database_id: str) -> execution.Relation:
        resolved = execution.resolve_table(ref, self.database.schema, dialect)
        if not isinstance(resolved, TableSpec):
            return execution.view_relation(
                resolved[1], self.database.schema, dialect, database_id,
                self.database.version_retention_period,
            )  # fmt: skip
        if isinstance(context, ReadWriteTransaction):
            pairs = context.view.rows(resolved.name)
        else:
            pairs = self.database.rows_at(resolved.name, context.read_us)
        return execution.Relation(resolved.name, resolved.columns, [r for _, r in pairs], resolved)

    # --- partitions ---------------------------------------------------------------------
    def partition_query(self, request, database_id: str):
        dialect = self.dialect(database_id)
        statement = table_sql.parse(request.sql, dialect)
        if not isinstance(statement, table_sql.Select):
            raise invalid("PartitionQuery takes a query; partitioned DML uses ExecuteSql")
        context, started = self._context(request.transaction, database_id)
        if not isinstance(context, _ReadOnly):
            raise invalid("Partitioned queries run in read-only transactions")
        transaction_id = started.id if started is not None else request.transaction.id
        relation = self._relation(statement.table, context, dialect, database_id)
        reason = execution.is_partitionable(statement, relation)
        if reason:
            raise invalid(
                f"Query is not root partitionable since it does not have a DistributedUnion at "
                f"the root ({reason}). Please check the conditions for a query to be "
                f"root-partitionable."
            )
        params = execution.QueryParams(request.params.fields, request.param_types)
        rows = execution.matching_rows(statement, relation, params, dialect)
        wanted = request.partition_options.max_partitions or DEFAULT_MAX_PARTITIONS
        table = relation.table
        response = _PartitionResponse()
        digest = _query_digest(request)
        for low, high in execution.partition_bounds(rows, table, wanted):
            token = {
                "transaction": base64.b64encode(transaction_id).decode(),
                "query": digest,
                "table": table.name,
                "low": _encode_key(table, low),
                "high": _encode_key(table, high),
            }
            encoded = base64.urlsafe_b64encode(json.dumps(token, sort_keys=True).encode())
            response.partitions.add().partition_token = _TOKEN_PREFIX + encoded
        if started is not None:
            response.transaction.CopyFrom(started)
        return response

    def _partition_answer(self, request, statement, context, database_id, params):
        token = request.partition_token
        try:
            if not token.startswith(_TOKEN_PREFIX):
                raise ValueError
            content = json.loads(base64.urlsafe_b64decode(token[len(_TOKEN_PREFIX) :]))
            transaction_id = base64.b64decode(content["transaction"])
        except (ValueError, KeyError, TypeError):
            raise invalid("Invalid partition token: it was not made by PartitionQuery") from None
        if (
            request.transaction.WhichOneof("selector") != "id"
            or request.transaction.id != transaction_id
        ):
            raise invalid(
                "Partition token belongs to another transaction: run a partition in the "
                "read-only transaction that PartitionQuery partitioned (BatchSnapshot.from_dict)"
            )
        if content["query"] != _query_digest(request):
            raise invalid(
                "Partition token does not belong to this query: run it with the SQL text and "
                "parameters given to PartitionQuery"
            )
        dialect = self.dialect(database_id)
        relation = self._relation(statement.table, context, dialect, database_id)
        table = relation.table
        low = _decode_key(table, content["low"])
        high = _decode_key(table, content["high"])
        rows = [
            row
            for row in execution.matching_rows(statement, relation, params, dialect)
            if execution.in_bounds(table.key_of(row), low, high)
        ]
        return execution.answer(statement, relation, params, dialect, rows=rows)

    # --- reads by key -------------------------------------------------------------------
    def read(self, request, database_id: str):
        """Read / StreamingRead: (metadata, rows of Values, None)."""
        dialect = self.dialect(database_id)
        if request.partition_token:
            raise SpannerStatusError(
                "UNIMPLEMENTED",
                "PartitionRead is not supported by the emulator: use PartitionQuery",
            )
        if request.index:
            raise SpannerStatusError(
                "UNIMPLEMENTED",
                f"Reads through secondary index {request.index} are not supported by the "
                f"emulator: read the table, or query it",
            )
        table = self.database.table(request.table)
        columns = []
        for name in request.columns:
            column = table.column(name)
            if column is None:
                raise SpannerStatusError(
                    "NOT_FOUND", f"Column not found in table {table.name}: {name}"
                )
            columns.append(column)
        context, started = self._context(request.transaction, database_id)
        if isinstance(context, ReadWriteTransaction):
            pairs = context.view.rows(table.name)
        else:
            pairs = self.database.rows_at(table.name, context.read_us)
        key_set = self._key_set(table, request.key_set)
        rows = [row for key, row in pairs if key_set.contains(key)]
        if request.limit:
            rows = rows[: request.limit]
        fields = [(c.name, c.type) for c in columns]
        values = [[to_wire(c.type, row[c.name]) for c in columns] for row in rows]
        return _metadata(fields, dialect, started), values, None

    def streaming_read(self, request, database_id: str):
        metadata, rows, _ = self.read(request, database_id)
        sent = 0
        while True:
            partial = _PartialResultSet()
            if sent == 0:
                partial.metadata.CopyFrom(metadata)
            for row in rows[sent : sent + ROWS_PER_BATCH]:
                partial.values.extend(row)
            sent += ROWS_PER_BATCH
            partial.resume_token = str(sent).encode()
            yield partial
            if sent >= len(rows):
                return

    # --- commits ------------------------------------------------------------------------
    def commit(self, request, database_id: str):
        mutations = [self._mutation(m) for m in request.mutations]
        kind = request.WhichOneof("transaction")
        if kind == "single_use_transaction":
            if request.single_use_transaction.WhichOneof("mode") != "read_write":
                raise invalid("Commit needs a read-write transaction")
            commit_us = self.database.commit_us(mutations)
        else:
            transaction_id = request.transaction_id
            if transaction_id.startswith(_READ_ONLY_PREFIX):
                raise failed_precondition("Cannot commit a read-only transaction")
            with self._lock:
                transaction = self._read_write.pop(transaction_id, None)
            if transaction is None:
                raise _transaction_not_found(transaction_id)
            if transaction.partitioned:
                raise failed_precondition("Partitioned DML transactions do not commit")
            commit_us = self.database.commit_us(
                [*transaction.mutations, *mutations], begin_sequence=transaction.begin_sequence
            )
        response = _CommitResponse()
        response.commit_timestamp.CopyFrom(_timestamp_pb(commit_us))
        if request.return_commit_stats:
            response.commit_stats.mutation_count = sum(
                len(m.values) * len(m.columns) if isinstance(m, Write) else 1 for m in mutations
            )
        return response

    def _mutation(self, mutation_pb) -> Mutation:
        operation = mutation_pb.WhichOneof("operation")
        if operation == "delete":
            table = self.database.table(mutation_pb.delete.table)
            return Delete(table.name, self._key_set(table, mutation_pb.delete.key_set))
        if operation not in WRITE_OPERATIONS:
            raise invalid(f"Mutation {operation} is not supported by the emulator")
        write = getattr(mutation_pb, operation)
        table = self.database.table(write.table)
        columns = []
        for name in write.columns:
            column = table.column(name)
            if column is None:
                raise SpannerStatusError(
                    "NOT_FOUND", f"Column not found in table {table.name}: {name}"
                )
            columns.append(column)
        rows = []
        for row in write.values:
            if len(row.values) != len(columns):
                raise invalid(
                    f"Mutation on table {table.name} has {len(row.values)} values for "
                    f"{len(columns)} columns"
                )
            rows.append(
                tuple(
                    from_wire(c.type, v, f"{table.name}.{c.name}")
                    for c, v in zip(columns, row.values)
                )
            )
        return Write(operation, table.name, tuple(c.name for c in columns), tuple(rows))

    def _key_set(self, table: TableSpec, key_set_pb) -> KeySet:
        def key(list_value, whole: bool) -> tuple:
            values = list(list_value.values)
            size = len(table.key_columns)
            if len(values) > size or (whole and len(values) != size):
                raise invalid(
                    f"Wrong number of key parts ({len(values)}) for table {table.name}: its key "
                    f"is ({', '.join(table.primary_key)})"
                )
            return tuple(
                from_wire(c.type, v, f"key of {table.name}")
                for c, v in zip(table.key_columns, values)
            )

        ranges = []
        for range_pb in key_set_pb.ranges:
            start_kind = range_pb.WhichOneof("start_key_type")
            end_kind = range_pb.WhichOneof("end_key_type")
            start = key(getattr(range_pb, start_kind), False) if start_kind else ()
            end = key(getattr(range_pb, end_kind), False) if end_kind else ()
            ranges.append(KeyRange(start, end, start_kind != "start_open", end_kind != "end_open"))
        # proto-plus renames the field ``all`` to ``all_``, in its protobuf descriptor too
        return KeySet(tuple(key(k, True) for k in key_set_pb.keys), tuple(ranges), key_set_pb.all_)


def _transaction_not_found(transaction_id: bytes) -> SpannerStatusError:
    return SpannerStatusError(
        "NOT_FOUND",
        f"Transaction not found: {transaction_id.decode(errors='replace')} (committed, rolled "
        f"back, or begun on another emulator)",
    )


def _metadata(fields, dialect: str, started):
    metadata = _ResultSetMetadata()
    row_type = spanner_type.StructType(
        fields=[
            spanner_type.StructType.Field(name=name, type_=wire_type(kind, dialect))
            for name, kind in fields
        ]
    )
    metadata.row_type.CopyFrom(spanner_type.StructType.pb(row_type))
    if started is not None:
        metadata.transaction.CopyFrom(started)
    return metadata


def _timestamp_pb(micros: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=micros // 1_000_000, nanos=(micros % 1_000_000) * 1000)


def _micros(timestamp) -> int:
    return timestamp.seconds * 1_000_000 + timestamp.nanos // 1000


def _duration_us(duration) -> int:
    return duration.seconds * 1_000_000 + duration.nanos // 1000


def _query_digest(request) -> str:
    params = json.dumps(json_format.MessageToDict(request.params), sort_keys=True)
    return hashlib.sha256(f"{request.sql}\x00{params}".encode()).hexdigest()[:24]


def _encode_key(table: TableSpec, key: tuple | None):
    if key is None:
        return None
    return [c.type.encode(v) for c, v in zip(table.key_columns, key)]


def _decode_key(table: TableSpec, encoded) -> tuple | None:
    if encoded is None:
        return None
    return tuple(c.type.decode(v) for c, v in zip(table.key_columns, encoded))
