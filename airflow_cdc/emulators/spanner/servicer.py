"""The gRPC services: Spanner (sessions, change stream queries) and a minimal DatabaseAdmin.

Built on ``spannermockserver``'s in-memory servicer, which already handles sessions and
transactions; :class:`ChangeStreamServicer` answers ``ExecuteStreamingSql`` itself from the
request's SQL text and bound parameters. Records are streamed in ``PartialResultSet`` batches,
each with a ``resume_token`` (the Python client hands rows to the caller only once a batch
with a resume token arrives), the result metadata on the first batch only.

Every database name answers both dialects' read functions (a real database has one dialect);
``GetDatabase`` reports POSTGRESQL for the database ids listed in ``postgresql_databases`` so
clients that ask for the dialect get a stable answer.
"""

from __future__ import annotations

import threading

import grpc
from google.cloud.spanner_admin_database_v1.types import common as admin_common
from google.cloud.spanner_admin_database_v1.types import spanner_database_admin as admin
from google.cloud.spanner_v1.types import result_set, type as spanner_type
from google.protobuf import struct_pb2
from spannermockserver import DatabaseAdminServicer, SpannerServicer

from . import records, sql
from .history import History
from .query import ChangeStreamQueryError, answer
from .schema import GOOGLESQL, POSTGRESQL
from .timeline import to_datetime

ROWS_PER_BATCH = 200
_DIALECT_QUERY = (
    "select option_value from information_schema.database_options "
    "where option_name='database_dialect'"
)


class ChangeStreamServicer(SpannerServicer):
    """Answers change stream queries of one history, at the emulator's notion of "now"."""

    def __init__(
        self, history: History, now_us: int | None = None, postgresql_databases=()
    ) -> None:
        super().__init__()
        self.history = history
        self.now_us = history.end_us if now_us is None else now_us
        self.postgresql_databases = frozenset(postgresql_databases)
        self._session_lock = threading.Lock()

    # The base class counts sessions without a lock; Spark executors create them concurrently.
    def CreateSession(self, request, context):
        with self._session_lock:
            return super().CreateSession(request, context)

    def BatchCreateSessions(self, request, context):
        with self._session_lock:
            return super().BatchCreateSessions(request, context)

    def ExecuteSql(self, request, context):
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
            answered = answer(self.history, query.arguments, self.now_us)
        except ChangeStreamQueryError as error:
            context.abort(grpc.StatusCode[error.code], error.message)
        yield from _batches(answered, query.dialect, query.function_name)


def _check_single_use(request) -> None:
    selector = request.transaction
    if "begin" in selector or "id" in selector:
        raise ChangeStreamQueryError(
            "INVALID_ARGUMENT",
            "Change stream queries are not supported for multi use transactions. Change stream "
            "queries must be strong reads executed via single use transactions using the "
            "ExecuteStreamingSql API.",
        )


def _batches(answered: list, dialect: str, function_name: str):
    metadata = records.metadata(dialect, function_name)
    pb_type = result_set.PartialResultSet.pb()
    sent = 0
    while True:
        batch = answered[sent : sent + ROWS_PER_BATCH]
        partial = pb_type()
        if sent == 0:
            partial.metadata.CopyFrom(result_set.ResultSetMetadata.pb(metadata))
        partial.values.extend(records.row_value(record, dialect) for record in batch)
        sent += len(batch)
        partial.resume_token = str(sent).encode()
        yield partial
        if sent >= len(answered):
            return


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
    """GetDatabase and GetDatabaseDdl, so ``Database.reload()`` and dialect lookups work."""

    def __init__(self, history: History, postgresql_databases=()) -> None:
        super().__init__()
        self.history = history
        self.postgresql_databases = frozenset(postgresql_databases)

    def _dialect(self, name: str) -> str:
        return POSTGRESQL if _database_id(name) in self.postgresql_databases else GOOGLESQL

    def GetDatabase(self, request, context):
        dialect = self._dialect(request.name)
        return admin.Database(
            name=request.name,
            state=admin.Database.State.READY,
            create_time=to_datetime(self.history.created_us),
            database_dialect=getattr(admin_common.DatabaseDialect, dialect),
        )

    def GetDatabaseDdl(self, request, context):
        return admin.GetDatabaseDdlResponse(
            statements=ddl_statements(self.history, self._dialect(request.database))
        )


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
