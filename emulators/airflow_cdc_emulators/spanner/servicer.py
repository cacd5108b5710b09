"""The gRPC services: Spanner (sessions, change stream queries) and a minimal DatabaseAdmin.

Built on ``spannermockserver``'s in-memory servicer, which already handles sessions and
transactions; :class:`ChangeStreamServicer` answers ``ExecuteStreamingSql`` itself from the
request's SQL text and bound parameters. Records are streamed in ``PartialResultSet`` batches,
each with a ``resume_token`` (the Python client hands rows to the caller only once a batch
with a resume token arrives), the result metadata on the first batch only.

Every database name answers both dialects' read functions (a real database has one dialect);
``GetDatabase`` reports POSTGRESQL for the database ids listed in ``postgresql_databases`` so
clients that ask for the dialect get a stable answer.

With ``tables`` (a :class:`~.tables.VersionedDatabase`), every other statement, transaction,
partition and commit goes to :class:`~.tables.service.TableService`: exact-timestamp and
partitioned reads of tables with commit timestamp columns, DML and mutations. Change stream
queries keep their own path. One clock (:class:`~.clock.EmulatorClock`) drives both.
"""

from __future__ import annotations

import threading

import grpc
from google.cloud.spanner_admin_database_v1.types import common as admin_common
from google.cloud.spanner_admin_database_v1.types import spanner_database_admin as admin
from google.cloud.spanner_v1.types import result_set
from google.cloud.spanner_v1.types import type as spanner_type
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2, struct_pb2
from spannermockserver import DatabaseAdminServicer, SpannerServicer

from airflow_cdc_emulators.injected_faults import CallFaults, Faults

from . import records, sql
from .clock import EmulatorClock
from .history import History
from .query import (
    ChangeStreamQueryError,
    ChildPartitionsRecord,
    HeartbeatRecord,
    answer,
    too_far_in_the_past,
)
from .schema import GOOGLESQL, POSTGRESQL
from .tables.service import TableService
from .tables.status import SpannerStatusError
from .tables.store import VersionedDatabase
from .timeline import to_datetime, to_micros

ROWS_PER_BATCH = 200
# The RPC that reads change streams: the one ``emulator.faults`` acts on.
CHANGE_STREAM_METHOD = "ExecuteStreamingSql"
_DIALECT_QUERY = (
    "select option_value from information_schema.database_options "
    "where option_name='database_dialect'"
)


class ChangeStreamServicer(SpannerServicer):
    """Answers change stream queries of one history and, given ``tables``, everything on them,
    at the emulator's notion of "now" (``clock``; default: the tables' clock, or a settable
    clock at the end of the history)."""

    def __init__(
        self,
        history: History | None,
        now_us: int | None = None,
        postgresql_databases=(),
        *,
        tables: VersionedDatabase | None = None,
        clock: EmulatorClock | None = None,
    ) -> None:
        super().__init__()
        if history is None and tables is None:
            raise ValueError("the Spanner emulator needs a change stream history, tables or both")
        self.history = history
        self.tables = tables
        if clock is None:
            clock = tables.clock if tables is not None else EmulatorClock(history.end_us)
        self.clock = clock
        if now_us is not None:
            clock.set(now_us)
        self.postgresql_databases = frozenset(postgresql_databases)
        self.table_service = (
            None if tables is None else TableService(tables, self.postgresql_databases)
        )
        self._session_lock = threading.Lock()
        self.faults = Faults((CHANGE_STREAM_METHOD,))

    @property
    def now_us(self) -> int:
        return self.clock.now_us

    @now_us.setter
    def now_us(self, value: int) -> None:
        self.clock.set(value)

    # The base class counts sessions without a lock; Spark executors create them concurrently.
    def CreateSession(self, request, context):
        with self._session_lock:
            return super().CreateSession(request, context)

    def BatchCreateSessions(self, request, context):
        with self._session_lock:
            return super().BatchCreateSessions(request, context)

    def ExecuteSql(self, request, context):
        if self.table_service is not None and not sql.mentions_change_stream(request.sql):
            return self._tables(context, "execute_unary", request)
        context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            "Change stream queries are not supported for the ExecuteSql API. Change stream "
            "queries must be strong reads executed via single use transactions using the "
            "ExecuteStreamingSql API.",
        )

    def ExecuteStreamingSql(self, request, context):
        text = request.sql
        if " ".join(text.lower().split()) == _DIALECT_QUERY:
            dialect = (
                POSTGRESQL
                if _database_id(request.session) in self.postgresql_databases
                else GOOGLESQL
            )
            yield from _single_value(
                "option_value", spanner_type.TypeCode.STRING, struct_pb2.Value(string_value=dialect)
            )
            return
        if " ".join(text.lower().split()) == "select 1":
            yield from _single_value(
                "c", spanner_type.TypeCode.INT64, struct_pb2.Value(string_value="1")
            )
            return
        if self.table_service is not None and not sql.mentions_change_stream(text):
            # Materialised first, so a refusal is a status, not a broken stream.
            yield from self._tables(context, "execute_streaming", request, stream=True)
            return
        if self.history is None:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"This emulator serves no change stream (it was started with tables only): {text}",
            )
        if not sql.mentions_change_stream(text):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"The change stream emulator answers only change stream queries "
                f"(SELECT ChangeRecord FROM READ_{self.history.stream_name}(...) or SELECT * FROM "
                f'"spanner"."read_json_{self.history.stream_name}"(...)). Received: {text}',
            )
        try:
            _check_single_use(request)
            params = type(request).pb(request).params.fields
            query = sql.parse(text, params, (self.history.stream_name,))
            call = self.faults.begin(CHANGE_STREAM_METHOD, query.arguments.partition_token)
            if call.rejection is not None:
                call.rejected()
                start = query.arguments.start_us or 0
                raise too_far_in_the_past(
                    start, max(self.now_us, start + 1),
                    f"the service no longer accepts partition token "
                    f"{query.arguments.partition_token}: fault injected by "
                    f"emulator.faults.reject_token")
            answered = answer(self.history, query.arguments, self.now_us)
        except ChangeStreamQueryError as error:
            context.abort(grpc.StatusCode[error.code], error.message)
        if call.heartbeat_stop is not None:
            answered = _progress_until(answered, to_micros(call.heartbeat_stop.after), call)
        resume_at = int(request.resume_token or b"0")
        yield from _batches(answered, query.dialect, query.function_name, resume_at, call, context)

    # --- tables: transactions, partitions, DML and commits ----------------------------------
    def _tables(self, context, method: str, request, *, stream: bool = False):
        pb = type(request).pb(request)
        database_id = _database_id(request.session)
        try:
            answered = getattr(self.table_service, method)(pb, database_id)
            return list(answered) if stream else answered
        except SpannerStatusError as error:
            context.abort(grpc.StatusCode[error.code], error.message)

    def ExecuteBatchDml(self, request, context):
        if self.table_service is None:
            return super().ExecuteBatchDml(request, context)
        return self._tables(context, "execute_batch_dml", request)

    def BeginTransaction(self, request, context):
        if self.table_service is None:
            return super().BeginTransaction(request, context)
        options = type(request).pb(request).options
        try:
            return self.table_service.begin_transaction(options, _database_id(request.session))
        except SpannerStatusError as error:
            context.abort(grpc.StatusCode[error.code], error.message)

    def Commit(self, request, context):
        if self.table_service is None:
            return super().Commit(request, context)
        return self._tables(context, "commit", request)

    def Rollback(self, request, context):
        if self.table_service is not None:
            self.table_service.rollback(request.transaction_id)
        return super().Rollback(request, context)

    def PartitionQuery(self, request, context):
        if self.table_service is None:
            context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                "This emulator serves a change stream only: start it with tables to partition "
                "queries",
            )
        return self._tables(context, "partition_query", request)

    def PartitionRead(self, request, context):
        context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            "PartitionRead is not supported by the emulator: use PartitionQuery",
        )

    def Read(self, request, context):
        if self.table_service is None:
            return super().Read(request, context)
        metadata, rows, _ = self._tables(context, "read", request)
        answer = result_set.ResultSet.pb()()
        answer.metadata.CopyFrom(metadata)
        for row in rows:
            answer.rows.add().values.extend(row)
        return answer

    def StreamingRead(self, request, context):
        if self.table_service is None:
            yield from super().StreamingRead(request, context)
            return
        yield from self._tables(context, "streaming_read", request, stream=True)


def _check_single_use(request) -> None:
    selector = request.transaction
    if "begin" in selector or "id" in selector:
        raise ChangeStreamQueryError(
            "INVALID_ARGUMENT",
            "Change stream queries are not supported for multi use transactions. Change stream "
            "queries must be strong reads executed via single use transactions using the "
            "ExecuteStreamingSql API.",
        )


def _batches(answered: list, dialect: str, function_name: str, resume_at: int = 0,
             call: CallFaults | None = None, context=None):
    """``answered`` from record ``resume_at`` on (the count a resume token carries), in batches
    of ROWS_PER_BATCH, each ending in a resume token; the result metadata on the first.

    An injected status fault due after ``n`` records of this call cuts the stream there: a
    batch broken by it goes out without a resume token (the client drops it and resumes
    from the last token), then the call ends with the fault's status."""
    metadata = records.metadata(dialect, function_name)
    pb_type = result_set.PartialResultSet.pb()
    due = None if call is None else call.next_due()
    cut = None if due is None else resume_at + due
    sent, first = resume_at, True
    while True:
        if cut is not None and sent >= cut:
            call.check(context, sent - resume_at)
        end = min(sent - sent % ROWS_PER_BATCH + ROWS_PER_BATCH, len(answered))
        if cut is not None:
            end = min(end, cut)
        partial = pb_type()
        if first:
            partial.metadata.CopyFrom(result_set.ResultSetMetadata.pb(metadata))
            first = False
        partial.values.extend(records.row_value(record, dialect) for record in answered[sent:end])
        sent = end
        if sent % ROWS_PER_BATCH == 0 or sent >= len(answered):
            partial.resume_token = str(sent).encode()
        yield partial
        if cut is not None and sent >= len(answered):  # a stream shorter than the cut: at its end
            call.abort(context, call.due(cut - resume_at), sent - resume_at)
        if sent >= len(answered):
            return


def _progress_until(answered: list, after_us: int, call: CallFaults) -> list:
    """The records up to ``after_us`` (a partition whose heartbeats stopped there): nothing
    later, not even the child partitions record that would end it."""
    kept = [r for r in answered if _record_time(r) <= after_us]
    if len(kept) < len(answered):
        call.quiet(len(kept))
    return kept


def _record_time(record) -> int:
    if isinstance(record, HeartbeatRecord):
        return record.timestamp_us
    if isinstance(record, ChildPartitionsRecord):
        return record.start_us
    return record.commit_us


def _single_value(column: str, code: int, value: struct_pb2.Value):
    partial = result_set.PartialResultSet.pb()()
    meta = result_set.ResultSetMetadata(
        row_type=spanner_type.StructType(
            fields=[spanner_type.StructType.Field(name=column, type_=spanner_type.Type(code=code))]
        )
    )
    partial.metadata.CopyFrom(result_set.ResultSetMetadata.pb(meta))
    partial.values.append(value)
    partial.resume_token = b"1"
    yield partial


def _database_id(name: str) -> str:
    """``projects/p/instances/i/databases/<id>[/sessions/n]`` -> ``<id>``."""
    parts = name.split("/")
    return parts[parts.index("databases") + 1] if "databases" in parts else ""


class SchemaAdminServicer(DatabaseAdminServicer):
    """GetDatabase and GetDatabaseDdl, so ``Database.reload()`` and dialect lookups work.

    With tables, GetDatabase also reports ``version_retention_period`` and
    ``earliest_version_time`` (max(creation, now - retention)).
    """

    def __init__(
        self,
        history: History | None,
        postgresql_databases=(),
        *,
        tables: VersionedDatabase | None = None,
    ) -> None:
        super().__init__()
        self.history = history
        self.tables = tables
        self.postgresql_databases = frozenset(postgresql_databases)

    def _dialect(self, name: str) -> str:
        return POSTGRESQL if _database_id(name) in self.postgresql_databases else GOOGLESQL

    def GetDatabase(self, request, context):
        dialect = self._dialect(request.name)
        created_us = self.tables.created_us if self.tables is not None else self.history.created_us
        database = admin.Database(
            name=request.name,
            state=admin.Database.State.READY,
            create_time=to_datetime(created_us),
            database_dialect=getattr(admin_common.DatabaseDialect, dialect),
        )
        if self.tables is not None:
            database.version_retention_period = self.tables.version_retention_period
            database.earliest_version_time = to_datetime(self.tables.earliest_version_us())
        return database

    def UpdateDatabaseDdl(self, request, context):
        """Apply the statements to the served tables (all or none, see ``tables/ddl.py``):
        a refused statement answers its status and changes nothing, never a success that
        applied nothing."""
        if self.tables is None:
            context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                "This emulator serves a change stream history only, so DDL cannot be applied: "
                "start it with tables (python -m airflow_cdc_emulators.spanner --ddl FILE, or "
                "--commit-ts-tables; SpannerEmulator(tables=VersionedDatabase(...)))",
            )
        try:
            self.tables.apply_ddl(request.statements, self._dialect(request.database))
        except SpannerStatusError as error:
            context.abort(grpc.StatusCode[error.code], error.message)
        operation = operations_pb2.Operation(name=f"{request.database}/operations/ddl", done=True)
        operation.response.Pack(empty_pb2.Empty())
        return operation

    def GetDatabaseDdl(self, request, context):
        dialect = self._dialect(request.database)
        statements = []
        if self.history is not None:
            statements = ddl_statements(self.history, dialect)
        if self.tables is not None:
            served = {t.name.lower() for t in self.tables.schema.tables}
            # The tables' own definitions win over same-named tables of a change stream history.
            statements = [
                s for s in statements
                if not (s.startswith("CREATE TABLE") and _created_table(s) in served)
            ]  # fmt: skip
            table_ddl = self.tables.schema.ddl(
                dialect, _database_id(request.database), self.tables.version_retention_period
            )
            statements = table_ddl[:-1] + statements + table_ddl[-1:]
        return admin.GetDatabaseDdlResponse(statements=statements)


def _created_table(statement: str) -> str:
    return statement.split()[2].strip('"`(').lower()


def ddl_statements(history: History, dialect: str) -> list[str]:
    """CREATE TABLE statements and the CREATE CHANGE STREAM statement of the history."""
    retention_hours = history.retention_us // 3_600_000_000
    capture = history.value_capture_type_at(history.end_us)
    statements = [table.ddl(dialect) for table in history.tables]
    options = f"retention_period = '{retention_hours}h', value_capture_type = '{capture}'"
    if dialect == POSTGRESQL:
        statements.append(f"CREATE CHANGE STREAM {history.stream_name} FOR ALL WITH ({options})")
    else:
        statements.append(f"CREATE CHANGE STREAM {history.stream_name} FOR ALL OPTIONS ({options})")
    return statements
