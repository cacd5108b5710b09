"""The example Debezium DAG through real Airflow (dag.test), real PostgreSQL, real Debezium
(the embedded capture writing the Kafka Connect sink layout), Spark (spark-submit) and Iceberg.

Two 30-second windows in the past: the first reads the capture of the initial snapshot, the
second the capture of later changes (an update, a delete, a truncate followed by an insert,
a transaction over both tables). The tests read what they left, then clear and re-run the
second window (I1).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.warm import stop_warm_drivers, warm_driver_env

pytestmark = pytest.mark.long  # make test-long (CI runs it); make test keeps the Spanner DAG's run

DAG_ID = "debezium_to_iceberg"
DB = "cdc_dbz_dag"
SLOT = "cdc_dbz_dag_slot"
PREFIX = "dagpg"
WINDOW = timedelta(seconds=30)
STREAM = "dbzdag"


def execute(sql: str, dbname: str = DB):
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname=dbname)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall() if cur.description else None
    finally:
        conn.close()


def capture_once(sink: Path) -> None:
    """The capture command in its own process, as users run it: the JVM it starts (JPype)
    must not share a process with Airflow's DAG parsing, which installs a SIGSEGV handler
    that the JVM's own signals then hit."""
    import subprocess
    import sys

    config = sink.parent / "capture.json"
    config.write_text(json.dumps({
        "output": str(sink), "flush_size": 50, "rotate_interval_ms": 500,
        "connector": {
            "name": "cdc-dag-test", "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": "pgoutput", "database.hostname": "127.0.0.1", "database.port": 5432,
            "database.user": "postgres", "database.dbname": DB, "topic.prefix": PREFIX,
            "table.include.list": "public.accounts,public.orders", "slot.name": SLOT,
            "publication.name": "cdc_dbz_dag_pub", "publication.autocreate.mode": "filtered",
            "heartbeat.interval.ms": 300, "provide.transaction.metadata": True,
            "skipped.operations": "none",
        },
    }))
    subprocess.run([sys.executable, "-m", "airflow_cdc.cli", "capture", "debezium", "--config",
                    str(config), "--until-idle", "3", "--max-seconds", "120"],
                   check=True, stdout=subprocess.DEVNULL, timeout=300)


def drop_database() -> None:
    execute(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            f"WHERE slot_name = '{SLOT}' AND NOT active", dbname="postgres")
    execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", dbname="postgres")


@pytest.fixture(scope="module")
def replay(airflow_db, tmp_path_factory):
    from airflow.dag_processing.dagbag import DagBag

    base = tmp_path_factory.mktemp("debezium-dag")
    sink = base / "sink"
    drop_database()
    execute(f"CREATE DATABASE {DB}", dbname="postgres")
    execute("""
        CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2));
        CREATE TABLE orders (id int PRIMARY KEY, account_id int NOT NULL, quantity int NOT NULL);
        INSERT INTO accounts VALUES (1, 'ada', 10.50), (2, 'bob', 20.00), (3, 'cyd', NULL);
        INSERT INTO orders VALUES (1, 1, 10), (2, 2, 20);
    """)
    start = (datetime.now(timezone.utc) - timedelta(minutes=3)).replace(microsecond=0)
    ends = [start + WINDOW, start + 2 * WINDOW]
    saved = dict(os.environ)
    os.environ.update({
        **warm_driver_env(base),
        "AIRFLOW_CDC_WAREHOUSE": str(base / "warehouse"),
        "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
        "AIRFLOW_CDC_STATE_URL": f"sqlite:///{base / 'cdc_state.db'}",
        "CDC_START": start.isoformat(),
        "CDC_WINDOW_SECONDS": str(int(WINDOW.total_seconds())),
        "CDC_DEBEZIUM_PREFIX": str(sink),
        "CDC_DEBEZIUM_TOPIC_PREFIX": PREFIX,
        "CDC_DEBEZIUM_STREAM_ID": STREAM,
        "CDC_DEBEZIUM_KEY_COLUMNS": json.dumps({"public.accounts": ["id"], "public.orders": ["id"]}),
        "CDC_DEBEZIUM_FLUSH_LATENESS_SECONDS": "1",
        "CDC_WAIT_POKE_SECONDS": "1",
        "CDC_GATE_POKE_SECONDS": "1",
    })
    try:
        dag = DagBag(str(Path(__file__).resolve().parents[2] / "dags")).get_dag(DAG_ID)
        capture_once(sink)  # the snapshot, and heartbeats past both windows
        runs = {ends[0]: dag.test(logical_date=ends[0])}
        execute("""
            UPDATE accounts SET balance = 11.25 WHERE id = 1;
            DELETE FROM accounts WHERE id = 2;
            TRUNCATE orders;
            INSERT INTO orders VALUES (7, 3, 70);
        """)
        execute("BEGIN; INSERT INTO accounts VALUES (4, 'dee', 0.01); "
                "INSERT INTO orders VALUES (8, 4, 80); COMMIT;")
        capture_once(sink)  # resumes: the changes
        runs[ends[1]] = dag.test(logical_date=ends[1])
        yield {"dag": dag, "runs": runs, "ends": ends, "base": base}
    finally:
        stop_warm_drivers(base)
        os.environ.clear()
        os.environ.update(saved)
        drop_database_quietly()


def drop_database_quietly() -> None:
    try:
        drop_database()
    except Exception:  # noqa: BLE001 - cleanup only
        pass


def targets(base: Path) -> dict[str, dict]:
    from pyiceberg.table import StaticTable

    found = {}
    for name in ("public_accounts", "public_orders"):
        folder = base / "warehouse" / "current" / name / "metadata"
        version = (folder / "version-hint.text").read_text().strip()
        rows = StaticTable.from_metadata(str(folder / f"v{version}.metadata.json")).scan().to_arrow().to_pylist()
        found[name] = {r["id"]: {k: v for k, v in r.items() if not k.startswith("_cdc_")} for r in rows}
    return found


def test_every_window_runs_to_its_gate(replay):
    from airflow.utils.state import DagRunState

    assert [run.state for run in replay["runs"].values()] == [DagRunState.SUCCESS] * 2


def test_the_targets_equal_the_tables_read_straight_from_postgresql(replay):
    found = targets(replay["base"])

    assert found["public_accounts"] == {
        i: {"id": i, "owner": owner, "balance": balance}
        for i, owner, balance in execute("SELECT id, owner, balance FROM accounts")}
    assert found["public_orders"] == {
        i: {"id": i, "account_id": a, "quantity": q}
        for i, a, q in execute("SELECT id, account_id, quantity FROM orders")}


def test_the_window_summary_counts_the_truncate(replay):
    from airflow_cdc.state import StateStore

    store = StateStore(os.environ["AIRFLOW_CDC_STATE_URL"])
    second = store.list_windows(STREAM)[-1]

    # The changes were committed after the (past) window's end: their transactions' END
    # events are the next window's to check (tests/debezium/test_transactions.py).
    assert second.counts["truncates"] == 1
    assert second.counts["transactions_checked"] == 0


def test_clearing_and_rerunning_a_window_changes_nothing(replay):
    from airflow.utils.state import DagRunState

    from demo.compare import latest_metadata
    from airflow_cdc.state import StateStore

    base = replay["base"]
    tables = [base / "warehouse" / "cdc" / f"{STREAM}_changelog"] + [
        base / "warehouse" / "current" / name for name in ("public_accounts", "public_orders")]
    store = StateStore(f"sqlite:///{base / 'cdc_state.db'}")
    before = {t: latest_metadata(t).name for t in tables}
    windows_before = [(w.state, w.counts, w.changelog_snapshot_id) for w in store.list_windows(STREAM)]

    rerun = replay["dag"].test(logical_date=replay["ends"][1])

    assert rerun.state == DagRunState.SUCCESS
    assert {t: latest_metadata(t).name for t in tables} == before
    assert [(w.state, w.counts, w.changelog_snapshot_id) for w in store.list_windows(STREAM)] == windows_before
