"""Debezium's snapshot signals sent from Airflow (airflow_cdc.sources.debezium.signals and
DebeziumIncrementalSnapshotOperator).

Without a database: every name, condition, key and id is checked before any SQL is built, the
data is Debezium's JSON per signal type, and the insert statement binds the values. Against
the real PostgreSQL on 127.0.0.1: the operator, run through a real Airflow task (``dag.test``
of a DAG in a bundle of its own, the connection given as ``AIRFLOW_CONN_<ID>``), writes one
signal row per run however often the task runs, and the key checks refuse or accept tables.
Last, one run end to end: the real Debezium capture (``airflow-cdc capture debezium``, its own
process) streams without an initial snapshot; the operator's execute-snapshot signal with an
additional condition makes it read exactly the rows the condition selects.
"""

from __future__ import annotations

import json
import os
import signal as os_signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_cdc.sources.debezium.errors import InvalidSignalError, SignalTargetError
from airflow_cdc.sources.debezium.signals import SnapshotSignal, run_signal_id, send_signal
from tests.debezium.test_capture import drop_slot, execute, wait_for

DB = "cdc_signals_test"
E2E_DB = "cdc_signals_e2e"
E2E_SLOT = "cdc_signals_e2e_slot"
E2E_PREFIX = "sig"
SIGNAL_TABLE = "public.debezium_signal"
SIGNAL_TABLE_DDL = ("CREATE TABLE debezium_signal "
                    "(id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))")
ORDERS = [(i, "open" if i % 3 == 0 else "closed", i * 10) for i in range(1, 13)]
OPEN_ORDER_IDS = [i for i, status, _amount in ORDERS if status == "open"]


# --- names, conditions, keys and ids: refused before any SQL ---------------------------------
@pytest.mark.parametrize("name", [
    "public.orders; drop table x", "public.orders;", "orders", "public.orders.items", 'public."orders',
    "public.'orders'", "public.ord ers", "public.*", "public.orders--", ".orders", "public.", "",
    '"public"."a"b"', "public.1orders", None, 42,
])
def test_a_collection_that_is_not_schema_dot_table_is_refused_naming_the_value_and_the_fix(name):
    with pytest.raises(InvalidSignalError) as refused:
        SnapshotSignal.execute_snapshot([name])

    assert repr(name) in str(refused.value)
    assert "schema.table" in str(refused.value) and "double quotes" in str(refused.value)


def test_a_part_in_double_quotes_may_hold_dots_and_other_characters():
    signal = SnapshotSignal.execute_snapshot(['"public"."My.Table"', 'shop."order lines"'])

    assert signal.data["data-collections"] == ['"public"."My.Table"', 'shop."order lines"']
    assert [t.key for t in signal.collections] == [("public", "My.Table"), ("shop", "order lines")]


@pytest.mark.parametrize("collections", [[], (), iter([])])
def test_an_execute_snapshot_without_tables_is_refused(collections):
    with pytest.raises(InvalidSignalError, match="at least one table"):
        SnapshotSignal.execute_snapshot(collections)


def test_a_stop_snapshot_with_an_empty_list_is_refused_with_the_way_to_stop_everything():
    with pytest.raises(InvalidSignalError, match=r"leave collections out \(None\) to stop the whole snapshot"):
        SnapshotSignal.stop_snapshot([])


def test_a_condition_for_a_table_the_signal_does_not_snapshot_is_refused():
    with pytest.raises(InvalidSignalError, match="'public.customers': that table is not one this signal snapshots"):
        SnapshotSignal.execute_snapshot(["public.orders"], additional_conditions={"public.customers": "id > 1"})


def test_a_condition_keyed_by_a_hostile_name_is_refused():
    with pytest.raises(InvalidSignalError, match="is not a table name"):
        SnapshotSignal.execute_snapshot(["public.orders"],
                                        additional_conditions={"public.orders; drop table x": "id > 1"})


@pytest.mark.parametrize("condition", [
    "id > 1; drop table x", "id > 1 -- and the rest", "id > 1 /* hidden */", "", "   ", None,
])
def test_a_filter_that_is_not_one_sql_condition_is_refused(condition):
    with pytest.raises(InvalidSignalError) as refused:
        SnapshotSignal.execute_snapshot(["public.orders"], additional_conditions={"public.orders": condition})

    assert "public.orders" in str(refused.value) and "status = 'open'" in str(refused.value)


@pytest.mark.parametrize("conditions", [{}, ["public.orders"], "status = 'open'"])
def test_additional_conditions_must_map_tables_to_conditions(conditions):
    with pytest.raises(InvalidSignalError, match="give a mapping of table to SQL condition"):
        SnapshotSignal.execute_snapshot(["public.orders"], additional_conditions=conditions)


@pytest.mark.parametrize("key", ["id; drop table x", 'code"', "order id", "", "1st", ["id"]])
def test_a_surrogate_key_that_is_not_an_identifier_is_refused(key):
    with pytest.raises(InvalidSignalError) as refused:
        SnapshotSignal.execute_snapshot(["public.orders"], surrogate_key=key)

    assert f"surrogate_key {key!r} is not a column name" in str(refused.value)
    assert "letters, digits and _" in str(refused.value)


@pytest.mark.parametrize("snapshot_type", ["full", "INCREMENTAL", ""])
def test_an_unknown_snapshot_type_is_refused(snapshot_type):
    with pytest.raises(InvalidSignalError, match=r"\['incremental', 'blocking'\]"):
        SnapshotSignal.execute_snapshot(["public.orders"], snapshot_type=snapshot_type)


@pytest.mark.parametrize("signal_id", ["x" * 43, "", "a\nb"])
def test_a_signal_id_the_signal_table_cannot_hold_is_refused(signal_id):
    with pytest.raises(InvalidSignalError, match="1 to 42 printable characters"):
        SnapshotSignal.pause_snapshot(signal_id=signal_id)


def test_generated_ids_fit_the_signal_table_and_differ():
    ids = {SnapshotSignal.resume_snapshot().id for _ in range(50)}

    assert len(ids) == 50
    assert all(i.startswith("airflow-cdc-") and len(i) <= 42 for i in ids)


def test_a_task_instance_gets_the_same_signal_id_on_every_try_and_another_run_another():
    first = run_signal_id("shop_backfill", "manual__2026-01-01T00:00:00+00:00", "snapshot_orders")

    assert first == run_signal_id("shop_backfill", "manual__2026-01-01T00:00:00+00:00", "snapshot_orders")
    assert first != run_signal_id("shop_backfill", "manual__2026-01-02T00:00:00+00:00", "snapshot_orders")
    assert first != run_signal_id("shop_backfill", "manual__2026-01-01T00:00:00+00:00", "snapshot_orders", 1)
    assert len(first) == 42 and first.startswith("airflow-cdc-")


def test_a_hostile_signal_table_name_is_refused_before_the_statement_is_built():
    signal = SnapshotSignal.pause_snapshot()

    with pytest.raises(InvalidSignalError, match="signal table 'public.debezium_signal; drop table x'"):
        signal.insert_statement("public.debezium_signal; drop table x")


def test_sending_to_a_hostile_signal_table_never_touches_the_connection():
    class Untouchable:
        def __getattr__(self, name):
            raise AssertionError(f"the connection was used ({name}) before the values were checked")

    with pytest.raises(InvalidSignalError, match="is not a table name"):
        send_signal(Untouchable(), SnapshotSignal.resume_snapshot(), 'public."x"; drop table y', dialect="postgresql")


# --- the data, as Debezium documents it -------------------------------------------------------
def test_execute_snapshot_data_is_debeziums_json():
    signal = SnapshotSignal.execute_snapshot(
        ["public.orders", "public.customers"], additional_conditions={"public.orders": "status = 'open'"},
        surrogate_key="code", signal_id="s-1")

    assert (signal.id, signal.type) == ("s-1", "execute-snapshot")
    assert signal.data_json == (
        '{"data-collections": ["public.orders", "public.customers"], "type": "incremental", '
        '"additional-conditions": [{"data-collection": "public.orders", "filter": "status = \'open\'"}], '
        '"surrogate-key": "code"}'
    )


def test_a_blocking_snapshot_says_so():
    signal = SnapshotSignal.execute_snapshot(["shop.orders"], snapshot_type="blocking", signal_id="s-2")

    assert json.loads(signal.data_json) == {"data-collections": ["shop.orders"], "type": "blocking"}


def test_a_condition_on_a_quoted_table_is_that_name_as_a_regular_expression():
    # Debezium matches an additional condition's data-collection as a regex against the name.
    signal = SnapshotSignal.execute_snapshot(['"public"."My.Table"'],
                                             additional_conditions={'"public"."My.Table"': "id < 3"})

    assert signal.data["additional-conditions"] == [{"data-collection": r'"public"\."My\.Table"', "filter": "id < 3"}]


def test_stop_pause_and_resume_data_are_debeziums_json():
    assert json.loads(SnapshotSignal.stop_snapshot(["public.orders"]).data_json) == {
        "data-collections": ["public.orders"], "type": "incremental"}
    assert json.loads(SnapshotSignal.stop_snapshot().data_json) == {"type": "incremental"}
    assert [(s.type, s.data_json) for s in (SnapshotSignal.pause_snapshot(), SnapshotSignal.resume_snapshot())] == [
        ("pause-snapshot", '{"type": "incremental"}'), ("resume-snapshot", '{"type": "incremental"}')]


def test_a_signal_built_directly_is_checked_like_one_from_a_constructor():
    with pytest.raises(InvalidSignalError, match="is not a table name"):
        SnapshotSignal("s-3", "execute-snapshot", {"data-collections": ["public.orders;"], "type": "incremental"})
    with pytest.raises(InvalidSignalError, match="pause-snapshot signal data has"):
        SnapshotSignal("s-4", "pause-snapshot", {"type": "incremental", "data-collections": ["public.orders"]})


# --- the insert statement ---------------------------------------------------------------------
def test_the_insert_statement_binds_the_three_values_and_quotes_the_table_per_dialect():
    signal = SnapshotSignal.execute_snapshot(
        ["public.orders"], additional_conditions={"public.orders": "note = 'it''s'"}, signal_id="s-5")
    values = ("s-5", "execute-snapshot", signal.data_json)

    assert signal.insert_statement("public.debezium_signal") == (
        'INSERT INTO "public"."debezium_signal" ("id", "type", "data") VALUES (%s, %s, %s)', values)
    assert signal.insert_statement("inventory.debezium_signal", "format", dialect="mysql") == (
        "INSERT INTO `inventory`.`debezium_signal` (`id`, `type`, `data`) VALUES (%s, %s, %s)", values)
    assert signal.insert_statement("public.debezium_signal", "qmark")[0].endswith("VALUES (?, ?, ?)")
    assert signal.insert_statement("public.debezium_signal", "named") == (
        'INSERT INTO "public"."debezium_signal" ("id", "type", "data") VALUES (:id, :type, :data)',
        dict(zip(("id", "type", "data"), values)))
    assert signal.insert_statement("public.debezium_signal", "pyformat")[0].endswith(
        "VALUES (%(id)s, %(type)s, %(data)s)")


def test_once_leaves_a_row_with_the_same_id_alone():
    signal = SnapshotSignal.resume_snapshot(signal_id="s-6")

    assert signal.insert_statement(SIGNAL_TABLE, once=True)[0].endswith('ON CONFLICT ("id") DO NOTHING')
    assert signal.insert_statement("shop.debezium_signal", dialect="mariadb", once=True)[0].startswith(
        "INSERT IGNORE INTO `shop`.`debezium_signal`")


def test_a_percent_sign_in_a_quoted_table_name_is_not_taken_for_a_placeholder():
    sql, _params = SnapshotSignal.pause_snapshot().insert_statement('"my%schema".debezium_signal', "format")

    assert sql.startswith('INSERT INTO "my%%schema"."debezium_signal"')


def test_the_operator_refuses_wrong_arguments_when_the_dag_file_is_parsed():
    from airflow_cdc.operators.debezium_snapshot import DebeziumIncrementalSnapshotOperator as Operator

    base = {"task_id": "t", "conn_id": "c", "signal_table": SIGNAL_TABLE}
    for arguments, message in [
        ({"data_collections": ["public.orders; drop table x"]}, "is not a table name"),
        ({"data_collections": ["public.orders"], "action": "restart"}, "use one of"),
        ({"action": "pause", "data_collections": ["public.orders"]}, "takes no data_collections"),
        ({"action": "stop", "surrogate_key": "code"}, "takes no surrogate_key"),
        ({"action": "execute"}, "needs data_collections"),
        ({"data_collections": ["public.orders"], "signal_table": "debezium_signal"}, "signal_table 'debezium_signal'"),
    ]:
        with pytest.raises(InvalidSignalError, match=message):
            Operator(**{**base, **arguments})
    templated = Operator(**base, data_collections=["{{ params.table }}"])
    assert templated.data_collections == ["{{ params.table }}"]  # checked when rendered


# --- against PostgreSQL -------------------------------------------------------------------------
DAG_FILE = '''
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG

from airflow_cdc.operators.debezium_snapshot import DebeziumIncrementalSnapshotOperator


class FailsAfterItsFirstSend(DebeziumIncrementalSnapshotOperator):
    """Its first try sends the signal, then fails (a worker lost after the commit): Airflow retries it."""

    def execute(self, context):
        sent = super().execute(context)
        if context["ti"].try_number == 1:
            raise RuntimeError(f"the first try fails after sending {sent}")
        return sent


ARGUMENTS = dict(task_id="snapshot_open_orders", signal_table="public.debezium_signal",
                 data_collections=["public.orders"], additional_conditions={"public.orders": "status = 'open'"})
START = datetime(2026, 1, 1, tzinfo=timezone.utc)

with DAG("debezium_signal_once", schedule=None, start_date=START, catchup=False) as debezium_signal_once:
    FailsAfterItsFirstSend(conn_id="cdc_signals_pg", retries=1, retry_delay=timedelta(0), **ARGUMENTS)

with DAG("debezium_signal_e2e", schedule=None, start_date=START, catchup=False) as debezium_signal_e2e:
    DebeziumIncrementalSnapshotOperator(conn_id="cdc_signals_e2e", retries=0, **ARGUMENTS)
'''


def create_database(name: str, sql: str) -> None:
    execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", dbname="postgres")
    execute(f"CREATE DATABASE {name}", dbname="postgres")
    execute(sql, dbname=name)


def orders_sql() -> str:
    rows = ", ".join(f"({i}, '{status}', {amount})" for i, status, amount in ORDERS)
    return (f"CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL, amount int NOT NULL);"
            f"INSERT INTO orders VALUES {rows};")


@pytest.fixture(scope="module")
def database():
    try:
        execute("SELECT 1", dbname="postgres")
    except Exception as error:  # noqa: BLE001 - any connection failure
        pytest.fail(f"PostgreSQL is not reachable on 127.0.0.1:5432 (user postgres, trust auth): run "
                    f".ci/ensure-postgres. Cause: {error}", pytrace=False)
    create_database(DB, orders_sql() + SIGNAL_TABLE_DDL + """;
        CREATE TABLE signals_direct (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048));
        CREATE TABLE audit_log (event_uuid uuid NOT NULL UNIQUE, detail text);
        CREATE TABLE signals_by_position (type varchar(32), id varchar(42) PRIMARY KEY, data varchar(2048));
    """)
    yield DB
    execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", dbname="postgres")


@pytest.fixture(scope="module")
def signal_dags(airflow_db, tmp_path_factory):
    """The test DAGs from a bundle of their own, with their connections from the environment."""
    from airflow.dag_processing.dagbag import DagBag

    bundle = tmp_path_factory.mktemp("signal-dags")
    (bundle / "signal_dags.py").write_text(DAG_FILE)
    local = "airflow.dag_processing.bundles.local.LocalDagBundle"
    saved = dict(os.environ)
    os.environ.update({
        "AIRFLOW_CONN_CDC_SIGNALS_PG": f"postgres://postgres@127.0.0.1:5432/{DB}",
        "AIRFLOW_CONN_CDC_SIGNALS_E2E": f"postgres://postgres@127.0.0.1:5432/{E2E_DB}",
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps([
            {"name": "dags-folder", "classpath": local, "kwargs": {}},
            {"name": "signal-tests", "classpath": local, "kwargs": {"path": str(bundle)}},
        ]),
    })
    try:
        bag = DagBag(str(bundle))
        assert not bag.import_errors, bag.import_errors
        yield bag.dags
    finally:
        os.environ.clear()
        os.environ.update(saved)


def returned(run) -> dict:
    ti = next(ti for ti in run.get_task_instances() if ti.task_id == "snapshot_open_orders")
    return ti.xcom_pull(task_ids="snapshot_open_orders")


def signal_rows(dbname: str, table: str = "debezium_signal") -> list[tuple]:
    return execute(f"SELECT id, type, data FROM {table} ORDER BY id", dbname=dbname)


def test_the_operator_writes_one_signal_row_for_a_run_even_when_the_task_runs_twice(database, signal_dags):
    from airflow.utils.state import DagRunState

    dag = signal_dags["debezium_signal_once"]

    run = dag.test(logical_date=datetime(2026, 1, 1, tzinfo=timezone.utc))  # try 1 sends and fails, try 2 runs
    ti = next(ti for ti in run.get_task_instances() if ti.task_id == "snapshot_open_orders")
    sent = returned(run)

    assert (run.state, ti.try_number) == (DagRunState.SUCCESS, 2)
    assert sent["newly_sent"] is False  # try 2 found try 1's row
    assert sent["signal_id"] == run_signal_id(dag.dag_id, run.run_id, "snapshot_open_orders")
    assert signal_rows(database) == [(sent["signal_id"], "execute-snapshot", json.dumps({
        "data-collections": ["public.orders"], "type": "incremental",
        "additional-conditions": [{"data-collection": "public.orders", "filter": "status = 'open'"}]}))]
    assert (sent["type"], sent["signal_table"]) == ("execute-snapshot", SIGNAL_TABLE)
    assert sent["data"] == json.loads(signal_rows(database)[0][2])


def send(signal, signal_table="public.signals_direct") -> bool:
    """send_signal on a psycopg2 connection (the operator's rows stay alone in debezium_signal)."""
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname=DB)
    try:
        return send_signal(conn, signal, signal_table, dialect="postgresql")
    finally:
        conn.close()


def test_a_table_without_a_primary_key_is_refused_naming_the_table_and_the_fix(database):
    signal = SnapshotSignal.execute_snapshot(["public.orders", "public.audit_log"], signal_id="keyless-1")

    with pytest.raises(SignalTargetError) as refused:
        send(signal)

    assert str(refused.value).startswith("table public.audit_log has no primary key")
    assert "give surrogate_key= naming a unique column" in str(refused.value)
    assert 'ALTER TABLE "public"."audit_log" ADD PRIMARY KEY' in str(refused.value)
    assert ("keyless-1",) not in [row[:1] for row in signal_rows(database, "signals_direct")]


def test_with_a_surrogate_key_a_table_without_a_primary_key_is_accepted(database):
    signal = SnapshotSignal.execute_snapshot(["public.audit_log"], surrogate_key="event_uuid", signal_id="surrogate-1")

    assert send(signal) is True
    assert ("surrogate-1", "execute-snapshot") in [row[:2] for row in signal_rows(database, "signals_direct")]


def test_a_surrogate_key_column_the_table_lacks_is_refused(database):
    signal = SnapshotSignal.execute_snapshot(["public.audit_log"], surrogate_key="id", signal_id="surrogate-2")

    with pytest.raises(SignalTargetError, match="table public.audit_log has no column 'id' for surrogate_key"):
        send(signal)


def test_a_table_that_does_not_exist_is_refused(database):
    with pytest.raises(SignalTargetError, match="table public.Orders was not found: check the name"):
        send(SnapshotSignal.execute_snapshot(["public.Orders"]))


def test_a_missing_signal_table_is_refused_with_the_statement_that_creates_it(database):
    with pytest.raises(SignalTargetError) as refused:
        send(SnapshotSignal.pause_snapshot(), "public.dbz_signals")

    assert 'create it (CREATE TABLE "public"."dbz_signals" (id varchar(42) PRIMARY KEY' in str(refused.value)
    assert "signal.data.collection" in str(refused.value)


def test_a_signal_table_whose_columns_debezium_would_misread_is_refused(database):
    with pytest.raises(SignalTargetError, match=r"starts with the columns \['type', 'id', 'data'\]"):
        send(SnapshotSignal.pause_snapshot(), "public.signals_by_position")


def test_a_signal_longer_than_the_data_column_is_refused(database):
    signal = SnapshotSignal.execute_snapshot(["public.orders"], additional_conditions={
        "public.orders": " OR ".join(f"id = {i}" for i in range(300))})

    with pytest.raises(SignalTargetError, match="column data holds 2048 characters"):
        send(signal)


def test_the_mariadb_catalog_finds_keys_and_insert_ignore_sends_once():
    import pymysql  # the dev extra (make setup installs it)
    try:
        conn = pymysql.connect(host="127.0.0.1", user="root")
    except Exception as error:  # noqa: BLE001 - any connection failure
        pytest.fail(f"MariaDB is not reachable on 127.0.0.1 as root ({error}): run make services")
    try:
        with conn.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS cdc_signals_test")
            cur.execute("CREATE DATABASE cdc_signals_test")
            cur.execute("CREATE TABLE cdc_signals_test.debezium_signal (id varchar(42) PRIMARY KEY, "
                        "type varchar(32) NOT NULL, data varchar(2048))")
            cur.execute("CREATE TABLE cdc_signals_test.orders (id int PRIMARY KEY, status text)")
            cur.execute("CREATE TABLE cdc_signals_test.audit_log (event_uuid char(36) NOT NULL UNIQUE)")
        table = "cdc_signals_test.debezium_signal"
        signal = SnapshotSignal.execute_snapshot(["cdc_signals_test.orders"], signal_id="maria-1")

        sent = [send_signal(conn, signal, table, dialect="mariadb") for _ in range(2)]
        with pytest.raises(SignalTargetError, match="table cdc_signals_test.audit_log has no primary key"):
            send_signal(conn, SnapshotSignal.execute_snapshot(["cdc_signals_test.audit_log"]), table, dialect="mariadb")
        with conn.cursor() as cur:
            cur.execute("SELECT id, type FROM cdc_signals_test.debezium_signal")
            rows = cur.fetchall()
    finally:
        with conn.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS cdc_signals_test")
        conn.close()

    assert sent == [True, False]
    assert rows == (("maria-1", "execute-snapshot"),)


# --- end to end: Airflow -> PostgreSQL -> Debezium -> sink files --------------------------------
def sink_values(output: Path, topic: str) -> list[dict]:
    """The payloads of a topic in the sink layout, in offset order (schemas are on)."""
    from airflow_cdc.capture.layout import parse_file_name, read_lines

    folder = output / "topics" / topic / "partition=0"
    if not folder.is_dir():
        return []
    files = sorted((parse_file_name(f.name)[2], f) for f in folder.iterdir() if parse_file_name(f.name))
    return [json.loads(line)["payload"] for _start, path in files for line in read_lines(path) if line != "null"]


@pytest.fixture
def e2e_database():
    level = execute("SHOW wal_level", dbname="postgres")[0][0]
    if level != "logical":
        pytest.fail(f"PostgreSQL runs with wal_level={level}; Debezium needs logical: run .ci/ensure-postgres",
                    pytrace=False)
    drop_slot(E2E_SLOT)
    create_database(E2E_DB, orders_sql() + SIGNAL_TABLE_DDL)
    yield E2E_DB
    try:
        drop_slot(E2E_SLOT)
    finally:
        execute(f"DROP DATABASE IF EXISTS {E2E_DB} WITH (FORCE)", dbname="postgres")


def test_an_execute_snapshot_signal_from_airflow_makes_debezium_read_exactly_the_rows_its_condition_selects(
        e2e_database, signal_dags, tmp_path):
    from airflow.utils.state import DagRunState

    started = time.monotonic()
    output = tmp_path / "sink"
    config = tmp_path / "capture.json"
    config.write_text(json.dumps({
        "output": str(output), "flush_size": 100, "rotate_interval_ms": 300,
        "connector": {
            "name": "cdc-signals-test", "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": "pgoutput", "database.hostname": "127.0.0.1", "database.port": 5432,
            "database.user": "postgres", "database.dbname": E2E_DB, "topic.prefix": E2E_PREFIX,
            "table.include.list": "public.orders", "slot.name": E2E_SLOT,
            "publication.name": "cdc_signals_e2e_pub", "publication.autocreate.mode": "filtered",
            "snapshot.mode": "no_data",  # streams from the start: orders is never snapshotted initially
            "signal.data.collection": SIGNAL_TABLE,
            "notification.enabled.channels": "sink", "notification.sink.topic.name": f"{E2E_PREFIX}.notifications",
            "incremental.snapshot.chunk.size": 2, "heartbeat.interval.ms": 300,
        },
    }))
    capture = subprocess.Popen(  # its own process: the JVM must not share one with Airflow's DAG runs
        [sys.executable, "-m", "airflow_cdc.cli", "capture", "debezium", "--config", str(config),
         "--max-seconds", "120"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: sink_values(output, f"__debezium-heartbeat.{E2E_PREFIX}") or capture.poll() is not None,
                 60, "the capture to stream (a heartbeat)")
        assert capture.poll() is None, capture.stderr.read()

        run = signal_dags["debezium_signal_e2e"].test(logical_date=datetime(2026, 1, 1, tzinfo=timezone.utc))
        sent = returned(run)

        def completed():
            return [n for n in sink_values(output, f"{E2E_PREFIX}.notifications")
                    if n["id"] == sent["signal_id"] and n["type"] == "COMPLETED"]

        wait_for(lambda: completed() or capture.poll() is not None, 30, "Debezium's COMPLETED notification")
        assert capture.poll() is None, capture.stderr.read()
    finally:
        capture.send_signal(os_signal.SIGINT)
        try:
            capture.wait(timeout=60)
        except subprocess.TimeoutExpired:
            capture.kill()
            capture.wait()

    events = sink_values(output, f"{E2E_PREFIX}.public.orders")
    notifications = [(n["aggregate_type"], n["type"]) for n in sink_values(output, f"{E2E_PREFIX}.notifications")
                     if n["id"] == sent["signal_id"]]
    assert run.state == DagRunState.SUCCESS and sent["newly_sent"] is True
    assert [(e["op"], e["source"]["snapshot"], e["after"]["id"]) for e in events] == [
        ("r", "incremental", i) for i in OPEN_ORDER_IDS]
    assert {e["after"]["status"] for e in events} == {"open"}
    assert notifications[0] == ("Incremental Snapshot", "STARTED")
    assert notifications[-1] == ("Incremental Snapshot", "COMPLETED")
    assert time.monotonic() - started < 90
