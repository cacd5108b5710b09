"""Real PostgreSQL -> real Debezium (the capture) -> the sink layout -> the Debezium source
through the extract and apply Spark jobs -> Iceberg targets equal to the tables.

Three windows: the first holds the initial snapshot (READ events); the second the changes
made after it (an update leaving a TOASTed column unchanged, a delete, a key change, a
multi-table transaction checked against its END event), captured by a second run that
resumes the source position; the third a truncate followed by an insert.
"""

from __future__ import annotations

import json
import random
import string
import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from airflow_cdc.model import Window
from airflow_cdc.pipeline.protocol import StreamConfig, commit_window, plan_window
from airflow_cdc.sources.registry import build_source
from airflow_cdc.state import StateStore
from airflow_cdc.spark_jobs import apply_job
from airflow_cdc.spark_jobs.extract import extract_window

pytestmark = pytest.mark.jvm_in_process  # its own pytest process (pyproject.toml)

DB = "cdc_dbz_jobs"
SLOT = "cdc_dbz_jobs_slot"
PREFIX = "jobs"
BIG = "".join(random.Random(5).choices(string.ascii_letters, k=20_000))  # TOASTed, incompressible


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


def drop_slot() -> None:
    execute(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            f"WHERE slot_name = '{SLOT}' AND NOT active", dbname="postgres")


@pytest.fixture(scope="module")
def database():
    drop_slot()
    execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", dbname="postgres")
    execute(f"CREATE DATABASE {DB}", dbname="postgres")
    execute(f"""
        CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, balance numeric(12,2),
                                doc text, seen timestamptz);
        CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL, quantity int NOT NULL);
        INSERT INTO customers VALUES
            (1, 'ada', 10.50, '{BIG}', '2025-01-06T08:00:00.123456Z'),
            (2, 'bob', NULL, 'short', NULL),
            (3, 'cyd', 99999999.99, NULL, '2025-01-06T09:30:00Z');
        INSERT INTO orders VALUES (1, 1, 10), (2, 3, 20);
    """)
    yield DB
    try:
        drop_slot()
    finally:
        execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", dbname="postgres")


def capture_once(output: Path) -> None:
    from airflow_cdc.capture.debezium import capture

    capture({
        "output": str(output), "flush_size": 50, "rotate_interval_ms": 500,
        "connector": {
            "name": "cdc-jobs-test",
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": "pgoutput", "database.hostname": "127.0.0.1", "database.port": 5432,
            "database.user": "postgres", "database.dbname": DB, "topic.prefix": PREFIX,
            "table.include.list": "public.customers,public.orders", "slot.name": SLOT,
            "publication.name": "cdc_dbz_jobs_pub", "publication.autocreate.mode": "filtered",
            "heartbeat.interval.ms": 300, "provide.transaction.metadata": True,
            "skipped.operations": "none",  # Debezium skips truncates ("t") by default
        },
    }, until_idle_seconds=3, max_seconds=120)


@pytest.fixture(scope="module")
def windows(database, spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("dbz_jobs")
    sink = base / "sink"
    stream_id = f"dbz_{uuid.uuid4().hex[:8]}"
    store = StateStore(f"sqlite:///{base / 'state.db'}")
    store.migrate()
    config = StreamConfig.for_source("debezium", stream_id, {
        "prefix": str(sink), "topic_prefix": PREFIX,
        "key_columns": {"public.customers": ["id"], "public.orders": ["id"]},
        "settings": {"flush_lateness_seconds": 1},
    }, namespace=stream_id, work_root=str(base / "work"))
    start = datetime.now(timezone.utc) - timedelta(hours=1)
    results = []

    def run_window(window: Window):
        source = build_source(config.source_spec)
        found = source.discover(window, datetime.now(timezone.utc), None)
        plan = plan_window(store, config, window, "run", 600, source.initial_positions(window),
                           "lake", new_partitions=found.partitions,
                           plan_options=lambda kept, positions: source.plan_options(
                               kept, datetime.now(timezone.utc), None, positions))
        extracted = extract_window(spark, plan, str(config.outcome_path(window)))
        store.mark_extracted(window, "run", extracted["snapshot_id"])
        commit_window(store, config, window, "run")
        job = base / f"apply-{len(results)}.json"
        job.write_text(json.dumps({
            "catalog": "lake", "stream": stream_id, "window_id": window.window_id,
            "changelog_table": config.changelog_table,
            "targets": {"namespace": f"{stream_id}_t"},
        }))
        assert apply_job.main(["--job-config", str(job)], spark=spark) == 0
        results.append(extracted)

    capture_once(sink)  # the snapshot
    middle = datetime.now(timezone.utc)
    run_window(Window(stream_id, start, middle))
    execute("""
        UPDATE customers SET name = 'ada l.' WHERE id = 1;
        DELETE FROM orders WHERE id = 2;
        UPDATE customers SET id = 30 WHERE id = 3;
        BEGIN; INSERT INTO customers VALUES (4, 'dee', 0.01, NULL, NULL);
               INSERT INTO orders VALUES (3, 4, 30); COMMIT;
    """)
    capture_once(sink)  # resumes the source position: only the changes
    later = datetime.now(timezone.utc)
    run_window(Window(stream_id, middle, later))
    execute("TRUNCATE orders; INSERT INTO orders VALUES (5, 1, 50);")
    capture_once(sink)
    redeliver_customer_changes(sink)  # as a connector restart does: the same events, new offsets
    run_window(Window(stream_id, later, datetime.now(timezone.utc)))
    return {"results": results, "namespace": f"{stream_id}_t", "config": config}


def redeliver_customer_changes(sink: Path) -> None:
    """Append the customers topic's change events (not the snapshot's) again as a new file at
    the next offset: what the sink holds after a connector restarts from an older offset."""
    folder = sink / "topics" / f"{PREFIX}.public.customers" / "partition=0"
    lines = []
    for path in sorted(folder.glob("*.json")):
        lines += [line for line in path.read_text().splitlines() if '"op":"r"' not in line.replace(" ", "")]
    last = sorted(folder.glob("*.json"))[-1]
    next_offset = int(last.stem.rsplit("+", 1)[1]) + len(last.read_text().splitlines())
    (folder / f"{PREFIX}.public.customers+0+{next_offset:010d}.json").write_text("\n".join(lines) + "\n")


def rows(spark, table: str) -> dict:
    return {r["id"]: r.asDict() for r in spark.table(table).collect()}


def test_the_targets_equal_the_tables_read_straight_from_postgresql(windows, spark):
    ns = windows["namespace"]
    customers = rows(spark, f"lake.{ns}.public_customers")
    orders = rows(spark, f"lake.{ns}.public_orders")
    truth = {r[0]: r for r in execute("SELECT id, name, balance, doc FROM customers")}

    assert {i: (c["name"], c["balance"], c["doc"]) for i, c in customers.items()} == {
        i: (name, balance, doc) for i, (_, name, balance, doc) in truth.items()}
    assert {i: o["quantity"] for i, o in orders.items()} == dict(
        execute("SELECT id, quantity FROM orders"))


def test_an_update_that_leaves_a_toasted_column_unchanged_keeps_its_value(windows, spark):
    customers = rows(spark, f"lake.{windows['namespace']}.public_customers")

    assert customers[1]["name"] == "ada l." and customers[1]["doc"] == BIG


def test_decimals_keep_their_exact_value(windows, spark):
    customers = rows(spark, f"lake.{windows['namespace']}.public_customers")

    assert customers[30]["balance"] == Decimal("99999999.99")


def test_the_snapshot_is_the_first_window_and_the_changes_the_second(windows):
    first, second, _ = windows["results"]

    assert first["counts"]["events"] == 5 and second["counts"]["events"] == 6


def test_the_transactions_of_a_window_are_checked_against_their_end_events(windows):
    _, second, _ = windows["results"]

    # psycopg2 sends the statements as one query: one transaction of 4 + 2 events
    assert second["counts"]["transactions_checked"] == 1


def test_events_delivered_again_with_new_offsets_land_once(windows, spark):
    third = windows["results"][2]["counts"]

    assert third["duplicates"] >= 4 and third["changes"] == third["events"] - third["duplicates"]
    assert rows(spark, f"lake.{windows['namespace']}.public_customers")[1]["name"] == "ada l."


def test_a_truncate_empties_the_target_before_the_rows_inserted_after_it(windows, spark):
    orders = rows(spark, f"lake.{windows['namespace']}.public_orders")

    assert {i: o["quantity"] for i, o in orders.items()} == {5: 50}
    assert windows["results"][2]["counts"]["truncates"] == 1
