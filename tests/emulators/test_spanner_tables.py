"""Tables with commit timestamp columns, served as Spanner serves them, read and written through
the real google-cloud-spanner client the way the commit-timestamp change source uses it:
exact-timestamp and partitioned reads, INFORMATION_SCHEMA, version retention, mutations and DML
writing the commit timestamp, and a clock that can follow wall time."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from google.api_core.exceptions import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from google.cloud.spanner import COMMIT_TIMESTAMP as CLIENT_COMMIT_TIMESTAMP
from google.cloud.spanner_v1 import TypeAnnotationCode, TypeCode, param_types
from google.cloud.spanner_v1.database import BatchSnapshot
from google.cloud.spanner_v1.keyset import KeyRange as ClientKeyRange
from google.cloud.spanner_v1.keyset import KeySet as ClientKeySet
from spanner_reading import ChangeStreamReader, spanner_database

from airflow_cdc_emulators.spanner import (
    COMMIT_TIMESTAMP,
    COMMIT_TIMESTAMP_SCHEMA,
    ColumnSpec,
    DatabaseSchema,
    History,
    HistoryConfig,
    SpannerEmulator,
    SpannerStatusError,
    TableSpec,
    VersionedDatabase,
    generate_commit_timestamp_tables,
    mutations,
)
from airflow_cdc.model import format_ts

ROOT = Path(__file__).resolve().parents[2]
START = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
PG = "pgdb"
WINDOW_SQL = (
    "SELECT `OrderId`, `Amount`, `LastUpdateTime` FROM `Orders` "
    "WHERE `LastUpdateTime` >= @s AND `LastUpdateTime` < @e"
)
WINDOW_TYPES = {"s": param_types.TIMESTAMP, "e": param_types.TIMESTAMP}
ORDER_COLUMNS = [c.name for c in COMMIT_TIMESTAMP_SCHEMA.table("Orders").columns]


# --- fixtures ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def seeded() -> VersionedDatabase:
    """40 minutes of seeded history, all of it inside the 3 h retention."""
    return generate_commit_timestamp_tables(
        seed=5, duration=timedelta(minutes=40), version_retention_period="3h"
    )


@pytest.fixture(scope="module")
def served(seeded):
    with SpannerEmulator(tables=seeded, postgresql_databases=(PG,)) as running:
        yield running


@pytest.fixture(scope="module")
def database(served):
    return spanner_database(served.emulator_host)


@pytest.fixture(scope="module")
def pg_database(served):
    return spanner_database(served.emulator_host, PG)


@pytest.fixture
def fresh():
    """An empty database (created 08:00, now 09:00) on its own emulator, for writes."""
    tables = VersionedDatabase(
        COMMIT_TIMESTAMP_SCHEMA, created_at=START, now=START + timedelta(hours=1)
    )
    with SpannerEmulator(tables=tables, postgresql_databases=(PG,)) as running:
        yield tables, running, spanner_database(running.emulator_host)


# --- helpers ----------------------------------------------------------------------------------
def query(database, sql, params=None, types=None, **bound):
    with database.snapshot(**bound) as snapshot:
        results = snapshot.execute_sql(sql, params=params, param_types=types)
        rows = list(results)
        return rows, list(results.fields)


def as_python(value, type_):
    """A client value as the store keeps it (BYTES come base64-encoded from the client)."""
    if value is None:
        return None
    if type_.code == TypeCode.ARRAY:
        return [as_python(item, type_.array_element_type) for item in value]
    if type_.code == TypeCode.BYTES:
        return base64.b64decode(value)
    if type_.code == TypeCode.JSON:
        return json.loads(value.serialize())
    return value


def table_as_read(rows, fields) -> dict:
    return {row[0]: {f.name: as_python(v, f.type_) for v, f in zip(row, fields)} for row in rows}


def information_schema_queries(dialect: str) -> list[str]:
    """The four queries the commit-timestamp source sends, in the dialect's spelling."""
    queries = [
        (
            "SELECT TABLE_NAME, COLUMN_NAME, SPANNER_TYPE, ORDINAL_POSITION, IS_NULLABLE "
            "FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_SCHEMA = ''"
        ),
        (
            "SELECT TABLE_NAME, COLUMN_NAME, OPTION_NAME, OPTION_VALUE "
            "FROM INFORMATION_SCHEMA.COLUMN_OPTIONS WHERE TABLE_SCHEMA = ''"
        ),
        (
            "SELECT TABLE_NAME, INDEX_NAME, INDEX_TYPE, COLUMN_NAME, ORDINAL_POSITION "
            "FROM INFORMATION_SCHEMA.INDEX_COLUMNS WHERE TABLE_SCHEMA = ''"
        ),
        "SELECT TABLE_NAME, PARENT_TABLE_NAME FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA=''",
    ]
    if dialect == "POSTGRESQL":
        return [q.lower().replace("''", "'public'") for q in queries]
    return queries


def orders_changed(seeded: VersionedDatabase) -> list:
    return [c for r in seeded.commits for c in r.changes if c.table == "Orders"]


# --- reads at a timestamp ---------------------------------------------------------------------
def test_an_exact_timestamp_read_sees_every_commit_at_or_before_it_and_none_after(seeded, database):
    change = orders_changed(seeded)[len(orders_changed(seeded)) // 2]
    at = change.commit_timestamp

    rows, fields = query(database, "SELECT * FROM Orders", read_timestamp=at)
    before, _ = query(
        database, "SELECT * FROM Orders", read_timestamp=at - timedelta(microseconds=1)
    )

    assert table_as_read(rows, fields) == {
        k[0]: v for k, v in seeded.state_at(at)["Orders"].items()
    }
    expected_before = seeded.state_at(at - timedelta(microseconds=1))["Orders"]
    assert [r[0] for r in before] == [k[0] for k in expected_before]
    assert table_as_read(rows, fields) != table_as_read(before, fields)


def test_every_column_type_reaches_the_client_as_its_python_type(seeded, database):
    rows, fields = query(database, "SELECT * FROM Orders", read_timestamp=seeded.now)
    by_name = [dict(zip((f.name for f in fields), row)) for row in rows]
    full = next(r for r in by_name if all(r[c] is not None for c in ORDER_COLUMNS) and r["Tags"])
    with_null_element = next(r for r in by_name if r["Tags"] and None in r["Tags"])

    assert [f.name for f in fields] == ORDER_COLUMNS
    assert isinstance(full["OrderId"], int) and isinstance(full["Quantity"], int)
    assert isinstance(full["Amount"], float) and isinstance(full["Paid"], bool)
    assert type(full["Total"]).__name__ == "Decimal"
    assert type(full["Details"]).__name__ == "JsonObject" and "sku" in full["Details"]
    assert type(full["DeliveryDate"]).__name__ == "date"
    assert isinstance(base64.b64decode(full["Receipt"]), bytes)
    assert type(full["LastUpdateTime"]).__name__ == "DatetimeWithNanoseconds"
    assert type(full["PlacedAt"]).__name__ == "DatetimeWithNanoseconds"
    assert all(isinstance(t, str) for t in full["Tags"])
    assert with_null_element["Tags"].count(None) >= 1
    assert any(isinstance(r["Quantity"], int) and r["Quantity"] > 2**53 for r in by_name)


def test_strong_and_exact_staleness_reads_see_now_and_now_minus_the_staleness(seeded, database):
    strong, _ = query(database, "SELECT OrderId FROM Orders")
    stale, _ = query(database, "SELECT OrderId FROM Orders", exact_staleness=timedelta(minutes=10))

    assert [r[0] for r in strong] == [k[0] for k in seeded.state_at(seeded.now)["Orders"]]
    ten_before = seeded.now - timedelta(minutes=10)
    assert [r[0] for r in stale] == [k[0] for k in seeded.state_at(ten_before)["Orders"]]


def test_a_window_read_keeps_rows_committed_at_its_start_and_leaves_those_at_its_end(fresh):
    tables, _, database = fresh
    s, e = START + timedelta(minutes=5), START + timedelta(minutes=6)
    for order_id, at in ((1, s), (2, e - timedelta(microseconds=1)), (3, e)):
        tables.commit(
            [
                mutations.insert(
                    "Orders", ("OrderId", "LastUpdateTime"), [(order_id, COMMIT_TIMESTAMP)]
                )
            ],
            at=at,
        )

    window, _ = query(database, WINDOW_SQL, {"s": s, "e": e}, WINDOW_TYPES, read_timestamp=e)
    next_window, _ = query(
        database,
        WINDOW_SQL,
        {"s": e, "e": e + timedelta(minutes=1)},
        WINDOW_TYPES,
        read_timestamp=e,
    )
    initial, _ = query(
        database,
        "SELECT `OrderId` FROM `Orders` WHERE `LastUpdateTime` < @e",
        {"e": e},
        {"e": param_types.TIMESTAMP},
        read_timestamp=e,
    )

    assert [(r[0], r[2]) for r in window] == [(1, s), (2, e - timedelta(microseconds=1))]
    assert [(r[0], r[2]) for r in next_window] == [(3, e)]
    assert [r[0] for r in initial] == [1, 2]


def test_the_postgresql_window_read_binds_dollar_parameters_like_the_googlesql_one(
    seeded, database, pg_database
):
    at = seeded.now
    s, e = seeded.created_at + timedelta(minutes=10), seeded.created_at + timedelta(minutes=20)
    gsql, _ = query(database, WINDOW_SQL, {"s": s, "e": e}, WINDOW_TYPES, read_timestamp=at)
    pg, fields = query(
        pg_database,
        'SELECT "OrderId", "Total", "Details", "LastUpdateTime" FROM "Orders" '
        'WHERE "LastUpdateTime" >= $1 AND "LastUpdateTime" < $2',
        {"p1": s, "p2": e},
        {"p1": param_types.TIMESTAMP, "p2": param_types.TIMESTAMP},
        read_timestamp=at,
    )

    assert [r[0] for r in pg] == [r[0] for r in gsql] and pg
    assert all(s <= r[3] < e for r in pg)
    assert fields[1].type_.type_annotation == TypeAnnotationCode.PG_NUMERIC
    assert fields[2].type_.type_annotation == TypeAnnotationCode.PG_JSONB


def test_seeded_whole_minute_commits_are_window_boundaries_with_data(seeded, database):
    minute = datetime.fromisoformat(seeded.seeded_facts["whole_minute_commits"][0])
    on_the_minute = [c for c in orders_changed(seeded) if c.commit_timestamp == minute]

    rows, _ = query(
        database, WINDOW_SQL, {"s": minute, "e": minute + timedelta(minutes=1)}, WINDOW_TYPES,
        read_timestamp=minute,
    )  # fmt: skip

    assert on_the_minute
    assert {c.key[0] for c in on_the_minute} <= {r[0] for r in rows if r[2] == minute}


# --- partitioned queries ----------------------------------------------------------------------
def test_partitions_are_contiguous_key_ranges_whose_union_is_the_whole_answer(seeded, database):
    at = seeded.created_at + timedelta(minutes=30)
    params = {"s": seeded.created_at, "e": at}
    whole, _ = query(database, WINDOW_SQL, params, WINDOW_TYPES, read_timestamp=at)
    snapshot = database.batch_snapshot(read_timestamp=at)
    batches = list(
        snapshot.generate_query_batches(
            WINDOW_SQL, params=params, param_types=WINDOW_TYPES, max_partitions=3
        )
    )

    parts = [
        [r[0] for r in BatchSnapshot.from_dict(database, snapshot.to_dict()).process_query_batch(b)]
        for b in batches
    ]

    assert len(batches) == 3 and all(parts)
    assert [order_id for part in parts for order_id in part] == [r[0] for r in whole]
    assert all(parts[i][-1] < parts[i + 1][0] for i in range(len(parts) - 1))


def test_a_query_gets_four_partitions_by_default_and_never_more_than_its_rows(seeded, database):
    snapshot = database.batch_snapshot(read_timestamp=seeded.now)
    second = list(seeded.state_at(seeded.now)["Orders"])[1][0]
    default = list(snapshot.generate_query_batches("SELECT `OrderId` FROM `Orders`"))
    two_rows = list(
        snapshot.generate_query_batches(
            f"SELECT OrderId FROM Orders WHERE OrderId <= {second}", max_partitions=10
        )
    )
    none = list(
        snapshot.generate_query_batches(
            "SELECT OrderId FROM Orders WHERE OrderId < 0", max_partitions=10
        )
    )

    assert (len(default), len(two_rows), len(none)) == (4, 2, 1)


_OTHER_PROCESS = """
import base64, json, os, sys
from datetime import datetime
from google.auth.credentials import AnonymousCredentials
from google.cloud import spanner
from google.cloud.spanner_v1 import param_types
from google.cloud.spanner_v1.database import BatchSnapshot

job = json.load(sys.stdin)
client = spanner.Client(project="another-process", credentials=AnonymousCredentials(),
                        disable_builtin_metrics=True)
database = client.instance("emulated-instance").database("db")
snapshot = BatchSnapshot.from_dict(database, {"session_id": job["session_id"],
                                   "transaction_id": base64.b64decode(job["transaction_id"])})
params = {k: datetime.fromisoformat(v) for k, v in job["params"].items()}
batch = {"partition": base64.b64decode(job["partition"]),
         "query": {"sql": job["sql"], "params": params,
                   "param_types": {k: param_types.TIMESTAMP for k in params}}}
print(json.dumps([row[0] for row in snapshot.process_query_batch(batch)]))
"""


def test_a_partition_runs_in_another_process_from_the_batch_snapshot_dict(seeded, served, database):
    at = seeded.created_at + timedelta(minutes=25)
    params = {"s": seeded.created_at + timedelta(minutes=5), "e": at}
    snapshot = database.batch_snapshot(read_timestamp=at)
    batch = list(
        snapshot.generate_query_batches(
            WINDOW_SQL, params=params, param_types=WINDOW_TYPES, max_partitions=2
        )
    )[1]
    state = snapshot.to_dict()
    job = {
        "session_id": state["session_id"],
        "transaction_id": base64.b64encode(state["transaction_id"]).decode(),
        "partition": base64.b64encode(batch["partition"]).decode(),
        "sql": WINDOW_SQL,
        "params": {k: v.isoformat() for k, v in params.items()},
    }

    env = {**os.environ, "SPANNER_EMULATOR_HOST": served.emulator_host}
    done = subprocess.run(
        [sys.executable, "-c", _OTHER_PROCESS], input=json.dumps(job), env=env, cwd=ROOT,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    here = [r[0] for r in BatchSnapshot.from_dict(database, state).process_query_batch(batch)]

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == here and here


# --- INFORMATION_SCHEMA -----------------------------------------------------------------------
def test_information_schema_describes_columns_options_keys_and_interleaving_in_googlesql(database):
    columns, options, keys, tables = (
        query(database, sql)[0] for sql in information_schema_queries("GOOGLE_STANDARD_SQL")
    )

    assert ["Orders", "LastUpdateTime", "TIMESTAMP", 13, "NO"] in columns
    assert ["Orders", "Tags", "ARRAY<STRING(MAX)>", 10, "YES"] in columns
    assert ["Orders", "Receipt", "BYTES(MAX)", 9, "YES"] in columns
    assert {r[0] for r in columns} == {
        "Orders",
        "Documents",
        "DocumentHistory",
        "Customers",
        "Events",
    }
    assert sorted(options) == sorted(
        [t, c, "allow_commit_timestamp", "TRUE"]
        for t, c in (("Orders", "LastUpdateTime"), ("Documents", "LastUpdateTime"),
                     ("DocumentHistory", "Ts"), ("Customers", "UpdatedAt"), ("Events", "EventTime"))
    )  # fmt: skip
    assert ["Events", "PRIMARY_KEY", "PRIMARY_KEY", "EventTime", 1] in keys
    assert ["Events", "PRIMARY_KEY", "PRIMARY_KEY", "EventId", 2] in keys
    assert ["Customers", "CustomersByUpdatedAt", "INDEX", "UpdatedAt", 1] in keys
    assert ["DocumentHistory", "Documents"] in tables and ["Orders", None] in tables


def test_information_schema_in_postgresql_reports_commit_timestamp_columns_by_type(pg_database):
    columns, options, keys, tables = (
        query(pg_database, sql)[0] for sql in information_schema_queries("POSTGRESQL")
    )

    assert ["Orders", "LastUpdateTime", "spanner.commit_timestamp", 13, "NO"] in columns
    assert ["Orders", "PlacedAt", "timestamp with time zone", 12, "YES"] in columns
    assert ["Orders", "ItemCounts", "bigint[]", 11, "YES"] in columns
    assert ["Orders", "Total", "numeric", 6, "YES"] in columns
    assert ["Orders", "Details", "jsonb", 7, "YES"] in columns
    assert options == []
    assert ["Customers", "CustomersByUpdatedAt", "INDEX", "UpdatedAt", 1] in keys
    assert ["DocumentHistory", "Documents"] in tables


def test_get_database_ddl_declares_commit_timestamp_columns_interleaving_and_retention(
    database, pg_database
):
    database.reload()
    pg_database.reload()
    googlesql, postgresql = (
        "\n".join(database.ddl_statements),
        "\n".join(pg_database.ddl_statements),
    )

    assert "LastUpdateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp=true)" in googlesql
    assert "INTERLEAVE IN PARENT Documents ON DELETE NO ACTION" in googlesql
    assert "CREATE INDEX CustomersByUpdatedAt ON Customers(UpdatedAt)" in googlesql
    assert "ALTER DATABASE `db` SET OPTIONS (\n  version_retention_period = '3h'\n)" in googlesql
    assert '"LastUpdateTime" SPANNER.COMMIT_TIMESTAMP NOT NULL' in postgresql
    assert "spanner.version_retention_period = '3h'" in postgresql


# --- retention and the clock ------------------------------------------------------------------
def test_reload_exposes_the_version_retention_period_and_earliest_version_time(seeded, database):
    database.reload()

    assert database.version_retention_period == "3h"
    assert database.earliest_version_time == max(seeded.created_at, seeded.now - timedelta(hours=3))


def test_a_read_before_the_earliest_version_time_fails_naming_it_and_the_retention():
    tables = generate_commit_timestamp_tables(
        seed=2, duration=timedelta(hours=2), transactions_per_minute=2
    )
    earliest = tables.now - timedelta(hours=1)
    too_old = earliest - timedelta(seconds=1)
    with SpannerEmulator(tables=tables) as emulator:
        database = spanner_database(emulator.emulator_host)
        with pytest.raises(FailedPrecondition) as single_use:
            query(database, "SELECT OrderId FROM Orders", read_timestamp=too_old)
        with pytest.raises(FailedPrecondition) as batch:
            list(
                database.batch_snapshot(read_timestamp=too_old).generate_query_batches(
                    "SELECT OrderId FROM Orders"
                )
            )
        at_the_limit, _ = query(database, "SELECT OrderId FROM Orders", read_timestamp=earliest)

    for refused in (single_use, batch):
        message = refused.value.message
        assert (
            f"Read timestamp {format_ts(too_old)} is before the earliest version time " in message
        )
        assert f"earliest version time {format_ts(earliest)} of database db" in message
        assert "version_retention_period '1h'" in message
    assert [r[0] for r in at_the_limit] == [k[0] for k in tables.state_at(earliest)["Orders"]]


def test_a_read_after_the_settable_clock_fails_naming_the_clock(seeded, served, database):
    later = served.now + timedelta(seconds=1)

    with pytest.raises(FailedPrecondition) as refused:
        query(database, "SELECT OrderId FROM Orders", read_timestamp=later)

    message = refused.value.message
    assert (
        f"Read timestamp {format_ts(later)} is after the emulator's clock {format_ts(served.now)}"
        in message
    )


def test_one_settable_clock_drives_the_change_stream_and_the_tables():
    history = History(
        HistoryConfig(
            seed=3,
            duration=timedelta(minutes=20),
            changes_per_second=0.5,
            splits=1,
            merges=0,
            three_way_merges=0,
            quiet_periods=0,
        )
    )
    tables = VersionedDatabase(COMMIT_TIMESTAMP_SCHEMA, created_at=history.created_at)
    with SpannerEmulator(history, tables=tables, now=history.end) as emulator:
        database = spanner_database(emulator.emulator_host)
        emulator.now = history.created_at + timedelta(minutes=10)
        with database.batch() as batch:
            batch.insert("Orders", ("OrderId", "LastUpdateTime"), [(1, CLIENT_COMMIT_TIMESTAMP)])
        records = ChangeStreamReader(database, history.stream_name).query(history.created_at)

    assert batch.committed == history.created_at + timedelta(minutes=10)
    assert tables.now == emulator.now
    assert records and all(r["kind"] == "child_partitions_record" for r in records)


# --- writes -----------------------------------------------------------------------------------
def test_mutations_write_the_commit_timestamp_into_commit_timestamp_columns_and_keys(fresh):
    tables, _, database = fresh
    with database.batch() as batch:
        batch.insert(
            "Orders", ("OrderId", "Amount", "LastUpdateTime"), [(7, 1.5, CLIENT_COMMIT_TIMESTAMP)]
        )
        batch.insert(
            "Events", ("EventTime", "EventId", "Kind"), [(CLIENT_COMMIT_TIMESTAMP, "e-1", "login")]
        )
        batch.insert(
            "Documents",
            ("UserId", "DocumentId", "Contents", "LastUpdateTime"),
            [(1, 1, "hi", CLIENT_COMMIT_TIMESTAMP)],
        )
        batch.insert(
            "DocumentHistory",
            ("UserId", "DocumentId", "Ts", "Delta"),
            [(1, 1, CLIENT_COMMIT_TIMESTAMP, "+hi")],
        )
    committed = batch.committed

    orders, _ = query(
        database, "SELECT OrderId, LastUpdateTime FROM Orders", read_timestamp=committed
    )
    events, _ = query(database, "SELECT EventTime, EventId FROM Events", read_timestamp=committed)
    history, _ = query(database, "SELECT Ts FROM DocumentHistory", read_timestamp=committed)
    before, _ = query(
        database, "SELECT OrderId FROM Orders", read_timestamp=committed - timedelta(microseconds=1)
    )

    assert committed == START + timedelta(hours=1)
    assert (
        orders == [[7, committed]] and events == [[committed, "e-1"]] and history == [[committed]]
    )
    assert before == []
    assert tables.row_at("Orders", (7,), committed)["LastUpdateTime"] == committed


def test_dml_writes_pending_commit_timestamp_in_a_read_write_transaction(fresh):
    tables, _, database = fresh
    seen = {}

    def work(transaction):
        seen["transaction"] = transaction
        inserted = transaction.execute_update(
            "INSERT INTO Orders (OrderId, Quantity, LastUpdateTime) "
            "VALUES (1, 10, PENDING_COMMIT_TIMESTAMP()), (2, @q, PENDING_COMMIT_TIMESTAMP())",
            params={"q": 20}, param_types={"q": param_types.INT64},
        )  # fmt: skip
        status, counts = transaction.batch_update(
            [
                (
                    "UPDATE Orders SET Quantity = 11, LastUpdateTime = PENDING_COMMIT_TIMESTAMP() "
                    "WHERE OrderId = 1"
                ),
                "DELETE FROM Orders WHERE OrderId = 2",
            ]
        )
        return inserted, status.code, counts

    inserted, status, counts = database.run_in_transaction(work)
    committed = seen["transaction"].committed
    rows, _ = query(
        database, "SELECT OrderId, Quantity, LastUpdateTime FROM Orders", read_timestamp=committed
    )

    assert (inserted, status, counts) == (2, 0, [1, 1])
    assert rows == [[1, 11, committed]]
    assert [
        c.mod_type
        for c in tables.changes_between("Orders", committed, committed + timedelta(microseconds=1))
    ] == ["INSERT"]


def test_postgresql_dml_writes_spanner_pending_commit_timestamp(fresh):
    _, _, _ = fresh
    tables, emulator, _ = fresh
    database = spanner_database(emulator.emulator_host, PG)
    seen = {}

    def work(transaction):
        seen["transaction"] = transaction
        return transaction.execute_update(
            'INSERT INTO "Customers" ("CustomerId", "Deleted", "UpdatedAt") '
            "VALUES ($1, false, SPANNER.PENDING_COMMIT_TIMESTAMP())",
            params={"p1": "cust-1"}, param_types={"p1": param_types.STRING},
        )  # fmt: skip

    assert database.run_in_transaction(work) == 1
    committed = seen["transaction"].committed
    assert tables.row_at("Customers", ("cust-1",), committed)["UpdatedAt"] == committed


def test_a_user_written_commit_timestamp_in_the_future_is_refused(fresh):
    _, emulator, database = fresh
    future = emulator.now + timedelta(hours=1)

    with pytest.raises(FailedPrecondition) as refused, database.batch() as batch:
        batch.insert("Orders", ("OrderId", "LastUpdateTime"), [(1, future)])

    assert "Cannot write timestamps in the future: Orders.LastUpdateTime" in refused.value.message
    assert format_ts(future) in refused.value.message


def test_the_commit_timestamp_placeholder_in_a_plain_timestamp_column_is_refused(fresh):
    _, _, database = fresh

    with pytest.raises(FailedPrecondition) as refused, database.batch() as batch:
        batch.insert(
            "Orders",
            ("OrderId", "PlacedAt", "LastUpdateTime"),
            [(1, CLIENT_COMMIT_TIMESTAMP, CLIENT_COMMIT_TIMESTAMP)],
        )

    assert (
        "allow_commit_timestamp column option is not set to true for column Orders.PlacedAt"
        in refused.value.message
    )


def test_two_transactions_on_disjoint_rows_may_share_a_commit_timestamp(fresh):
    tables, _, database = fresh
    at = START + timedelta(minutes=30)
    write = lambda order_id: [
        mutations.insert("Orders", ("OrderId", "LastUpdateTime"), [(order_id, COMMIT_TIMESTAMP)])
    ]
    tables.commit(write(1), at=at)
    tables.commit(write(2), at=at)

    with pytest.raises(SpannerStatusError) as overlapping:
        tables.commit([mutations.update("Orders", ("OrderId", "Amount"), [(1, 2.0)])], at=at)
    rows, _ = query(database, "SELECT OrderId, LastUpdateTime FROM Orders", read_timestamp=at)

    assert rows == [[1, at], [2, at]]
    assert tables.shared_commit_timestamps() == [at]
    assert overlapping.value.code == "FAILED_PRECONDITION"
    assert "is not after the last commit" in overlapping.value.message


def test_commits_through_the_client_get_increasing_timestamps_and_move_the_settable_clock(fresh):
    _, emulator, database = fresh
    now = emulator.now
    committed = []
    for order_id in (1, 2):
        with database.batch() as batch:
            batch.insert(
                "Orders", ("OrderId", "LastUpdateTime"), [(order_id, CLIENT_COMMIT_TIMESTAMP)]
            )
        committed.append(batch.committed)

    assert committed == [now, now + timedelta(microseconds=1)]
    assert emulator.now == committed[-1]


def test_an_interleaved_child_needs_its_parent_and_no_action_keeps_a_parent_with_children(fresh):
    _, _, database = fresh
    with pytest.raises(NotFound) as orphan, database.batch() as batch:
        batch.insert(
            "DocumentHistory", ("UserId", "DocumentId", "Ts"), [(1, 1, CLIENT_COMMIT_TIMESTAMP)]
        )
    with database.batch() as batch:
        batch.insert(
            "Documents",
            ("UserId", "DocumentId", "Contents", "LastUpdateTime"),
            [(1, 1, "x", CLIENT_COMMIT_TIMESTAMP)],
        )
        batch.insert(
            "DocumentHistory", ("UserId", "DocumentId", "Ts"), [(1, 1, CLIENT_COMMIT_TIMESTAMP)]
        )
    with pytest.raises(FailedPrecondition) as parent_with_children, database.batch() as batch:
        batch.delete("Documents", ClientKeySet(keys=[(1, 1)]))
    with pytest.raises(AlreadyExists), database.batch() as batch:
        batch.insert(
            "Documents",
            ("UserId", "DocumentId", "Contents", "LastUpdateTime"),
            [(1, 1, "y", CLIENT_COMMIT_TIMESTAMP)],
        )
    with database.batch() as together:
        together.delete(
            "DocumentHistory",
            ClientKeySet(ranges=[ClientKeyRange(start_closed=[1, 1], end_closed=[1, 1])]),
        )
        together.delete("Documents", ClientKeySet(keys=[(1, 1)]))
    left, _ = query(
        database, "SELECT UserId FROM DocumentHistory", read_timestamp=together.committed
    )

    assert "Parent row for row [1,1," in orphan.value.message
    assert "Found child row [1,1," in parent_with_children.value.message
    assert left == []


def test_on_delete_cascade_deletes_the_children_with_their_parent():
    parent = TableSpec("Carts", (ColumnSpec("CartId", "INT64", nullable=False),), ("CartId",))
    child = TableSpec(
        "CartItems",
        (
            ColumnSpec("CartId", "INT64", nullable=False),
            ColumnSpec("ItemId", "INT64", nullable=False),
            ColumnSpec("AddedAt", "TIMESTAMP", nullable=False, allow_commit_timestamp=True),
        ),
        ("CartId", "ItemId"),
        parent="Carts",
        on_delete="CASCADE",
    )
    tables = VersionedDatabase(DatabaseSchema((parent, child)), created_at=START, now=START)
    tables.commit(
        [
            mutations.insert("Carts", ("CartId",), [(1,), (2,)]),
            mutations.insert(
                "CartItems",
                ("CartId", "ItemId", "AddedAt"),
                [(1, 1, COMMIT_TIMESTAMP), (1, 2, COMMIT_TIMESTAMP), (2, 1, COMMIT_TIMESTAMP)],
            ),
        ]
    )
    with SpannerEmulator(tables=tables) as emulator:
        database = spanner_database(emulator.emulator_host)
        with database.batch() as batch:
            batch.delete("Carts", ClientKeySet(keys=[(1,)]))
        items, _ = query(database, "SELECT CartId, ItemId FROM CartItems")

    assert items == [[2, 1]]
    assert (
        len(tables.hard_deletes_between(batch.committed, emulator.now + timedelta(seconds=1))) == 3
    )


def test_unsupported_sql_is_refused_naming_the_feature(database):
    with pytest.raises(InvalidArgument) as with_or:
        query(database, "SELECT OrderId FROM Orders WHERE OrderId = 1 OR OrderId = 2")
    with pytest.raises(InvalidArgument) as with_join:
        query(database, "SELECT OrderId FROM Orders JOIN Customers ON Name = Tier")

    assert "Not supported by the Spanner emulator's SQL: OR" in with_or.value.message
    assert "Not supported by the Spanner emulator's SQL: joins" in with_join.value.message


# --- wall clock -------------------------------------------------------------------------------
def test_with_a_wall_clock_commits_through_the_client_get_real_time_timestamps():
    tables = VersionedDatabase(
        COMMIT_TIMESTAMP_SCHEMA,
        created_at=datetime.now(timezone.utc) - timedelta(minutes=1),
        clock="wall",
    )
    written = []
    with SpannerEmulator(tables=tables) as emulator:
        database = spanner_database(emulator.emulator_host)

        def writer():
            for order_id in range(1, 4):
                before = datetime.now(timezone.utc)
                with database.batch() as batch:
                    batch.insert(
                        "Orders",
                        ("OrderId", "LastUpdateTime"),
                        [(order_id, CLIENT_COMMIT_TIMESTAMP)],
                    )
                written.append((before, batch.committed, datetime.now(timezone.utc)))

        thread = threading.Thread(target=writer)
        thread.start()
        thread.join(timeout=30)
        seen_at_commit, _ = query(
            database, "SELECT OrderId FROM Orders", read_timestamp=written[0][1]
        )
        waited_from = time.monotonic()
        ahead = datetime.now(timezone.utc) + timedelta(milliseconds=400)
        future_read, _ = query(database, "SELECT OrderId FROM Orders", read_timestamp=ahead)
        waited = time.monotonic() - waited_from

    assert len(written) == 3
    assert all(before <= committed <= after for before, committed, after in written)
    assert seen_at_commit == [[1]]
    assert future_read == [[1], [2], [3]] and waited >= 0.3


# --- the seeded history and the command line --------------------------------------------------
def test_the_seeded_history_has_hard_and_soft_deletes_shared_timestamps_and_whole_minute_commits(
    seeded,
):
    summary = seeded.summary()
    again = generate_commit_timestamp_tables(
        seed=5, duration=timedelta(minutes=40), version_retention_period="3h"
    )

    assert summary["commits"] > 900
    assert set(summary["changes_by_table"]) == {
        "Orders",
        "Documents",
        "DocumentHistory",
        "Customers",
        "Events",
    }
    assert summary["hard_deletes"] > 0 and summary["soft_deletes"] > 0 and summary["undeletes"] > 0
    assert summary["shared_commit_timestamps"] >= 3
    assert len(summary["whole_minute_commits"]) >= 10
    assert again.state_at(again.now) == seeded.state_at(seeded.now)
    deletes = seeded.hard_deletes_between(seeded.created_at, seeded.now)
    assert deletes and all(c.new_row is None for c in deletes)


def test_the_command_line_serves_the_seeded_commit_timestamp_tables():
    command = [
        sys.executable, "-m", "airflow_cdc_emulators.spanner", "--port", "0", "--commit-ts-tables",
        "--seed", "4", "--hours", "0.25", "--version-retention", "3h",
    ]  # fmt: skip
    server = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        host_line = server.stdout.readline().strip()
        assert host_line.startswith("SPANNER_EMULATOR_HOST=127.0.0.1:"), server.stderr.read()
        summary = json.loads(server.stdout.readline())
        database = spanner_database(host_line.split("=", 1)[1])
        rows, _ = query(database, "SELECT OrderId FROM Orders")
        database.reload()
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stdout.close()
        server.stderr.close()

    expected = generate_commit_timestamp_tables(seed=4, duration=timedelta(hours=0.25))
    assert summary["version_retention_period"] == "3h" and database.version_retention_period == "3h"
    assert [r[0] for r in rows] == [k[0] for k in expected.state_at(expected.now)["Orders"]]
