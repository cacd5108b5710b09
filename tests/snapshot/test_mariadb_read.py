"""The parallel snapshot's reader on MariaDB 10.11: a table's chunks read over JDBC in
parallel (one Spark partition per chunk) become READ change rows whose values apply types
back exactly: every row once, DATETIME as a wall-clock time, TIMESTAMP as an instant,
DECIMAL exact.

(The watermarks need a capture of MariaDB's binlog, which Debezium 3.6's bundled MySQL
connector refuses; see README. What is shown here is the read and the row mapping.)
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from airflow_cdc.sources.snapshot.chunks import plan_chunks
from airflow_cdc.sources.snapshot.database import connect
from airflow_cdc.sources.snapshot.dialects import MARIADB
from airflow_cdc.spark_jobs.snapshot import SnapshotSpec, column_reading, read_chunks
from airflow_cdc.spark_jobs.snapshot_rows import read_rows

DB = "cdc_snapshot_read"
ROWS = 3_000


@pytest.fixture(scope="module")
def mariadb():
    import pymysql  # the dev extra (make setup installs it)
    try:
        conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", autocommit=True)
    except pymysql.err.OperationalError as error:
        pytest.fail(f"MariaDB on 127.0.0.1:3306 is not reachable ({error}): run make services")
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(f"""CREATE TABLE {DB}.orders (
            shop VARCHAR(20) NOT NULL, id BIGINT NOT NULL, amount DECIMAL(12,2) NOT NULL,
            placed DATETIME(6) NOT NULL, seen TIMESTAMP(6) NULL, note TEXT,
            PRIMARY KEY (shop, id))""")
        cur.execute("SET time_zone = '+00:00'")
        rows = [(("north", "south", "éast")[i % 3], i, f"{i}.{i % 100:02d}",
                 f"2025-03-30 02:{i % 60:02d}:00.{i:06d}", f"2025-01-0{1 + i % 9} 10:00:00.5",
                 None if i % 7 == 0 else f"n'{i}\\") for i in range(ROWS)]
        cur.executemany(f"INSERT INTO {DB}.orders VALUES (%s, %s, %s, %s, %s, %s)", rows)
    conn.close()
    yield
    conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
    conn.close()


@pytest.fixture(scope="module")
def read(mariadb, spark):
    spec = SnapshotSpec(snapshot_id="m1", stream_id="m", source_table=f"{DB}.orders",
                        dialect="mariadb", host="127.0.0.1", port=3306, database=DB,
                        user="root", sink={}, chunk_size=500, watermark_table=f"{DB}.wm")
    conn = connect("mariadb", "127.0.0.1", 3306, DB, "root")
    try:
        plan = plan_chunks(conn, MARIADB, "orders", chunk_size=500, schema=DB)
        reading = column_reading(conn, spec, plan)
    finally:
        conn.close()
    frame = read_chunks(spark, spec, plan, plan.chunks, reading)
    rows = read_rows(frame, stream="m", source_table=f"{DB}_orders", key_columns=["shop", "id"],
                     ordering_key=b"\x01", commit_ts="2025-01-01T00:00:00Z",
                     event_id_prefix="m/orders/r/1/", partition_id="snapshot:m1", metadata={})
    return {"plan": plan, "frame": frame, "rows": rows.collect()}


def test_every_chunk_is_one_spark_partition_and_every_row_is_read_once(read):
    assert read["frame"].rdd.getNumPartitions() == len(read["plan"].chunks) == ROWS // 500
    keys = [tuple(json.loads(json.dumps(r.keys)).values()) for r in read["rows"]]
    assert len(keys) == len(set(keys)) == ROWS


def test_values_are_written_as_the_changelog_texts_apply_types_back(read):
    row = next(r for r in read["rows"] if r.keys == {"id": "7", "shop": "south"})
    assert row.new_values["amount"] == "7.07"
    assert row.new_values["placed"] == "2025-03-30T02:07:00.000007"  # wall clock, no zone
    assert row.new_values["seen"] == "2025-01-08T10:00:00.500000Z"  # the instant, in UTC
    assert row.new_values["note"] is None
    types = json.loads(row.column_types_json)
    assert types == {"amount": "NUMERIC(12,2)", "id": "INT64", "note": "STRING",
                     "placed": "DATETIME", "seen": "TIMESTAMP", "shop": "STRING"}


def test_text_with_quotes_and_backslashes_arrives_unchanged(read):
    row = next(r for r in read["rows"] if r.keys == {"id": "8", "shop": "éast"})
    assert row.new_values["note"] == "n'8\\"
    assert Decimal(row.new_values["amount"]) == Decimal("8.08")
