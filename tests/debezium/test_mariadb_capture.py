"""A real capture of MariaDB: Debezium's MariaDB connector (its own classpath, fetched once
into the jar folder by :mod:`airflow_cdc.capture.classpath`) against the MariaDB on
127.0.0.1:3306 (root without a password, ROW binlog: ``make services``), through
``airflow-cdc capture debezium`` in its own process, into the Kafka Connect sink layout.

One capture, shared by the module's tests: the snapshot of two rows, then an update and a
delete made once it streams; it stops after a few idle seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path

import pytest

from airflow_cdc.capture.classpath import MARIADB_CONNECTOR_CLASS, mariadb_jars
from airflow_cdc.capture.layout import parse_file_name, read_lines
from airflow_cdc.model import Op
from airflow_cdc.sources.debezium.records import Heartbeat, Tombstone, change_of, parse_line

DB = "cdc_capture_mariadb_test"
PREFIX = "mtest"
ITEMS = f"{PREFIX}.{DB}.items"
ROOT = Path(__file__).resolve().parents[2]


def execute(*statements: str) -> None:
    import pymysql

    try:
        conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="",
                               autocommit=True)
    except pymysql.err.OperationalError as error:
        pytest.fail(f"MariaDB is not reachable on 127.0.0.1:3306 as root ({error}): run make services")
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
    finally:
        conn.close()


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """The sink folder after the capture, and the capture's JSON summary."""
    mariadb_jars()  # fetched once into the jar folder (Maven), before the clock below starts
    execute(f"DROP DATABASE IF EXISTS {DB}", f"CREATE DATABASE {DB}",
            f"CREATE TABLE {DB}.items (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, "
            f"price DECIMAL(8,2))",
            f"INSERT INTO {DB}.items VALUES (1, 'pen', 1.50), (2, 'ink', NULL)")
    sink = tmp_path_factory.mktemp("mariadb") / "sink"
    config = sink.parent / "capture.json"
    config.write_text(json.dumps({
        "output": str(sink), "flush_size": 100, "rotate_interval_ms": 300,
        "jvm_options": ["-Xmx256m"],
        "connector": {
            "connector.class": MARIADB_CONNECTOR_CLASS, "database.hostname": "127.0.0.1",
            "database.port": 3306, "database.user": "root", "database.password": "",
            "database.server.id": 184_077, "topic.prefix": PREFIX, "database.include.list": DB,
            "heartbeat.interval.ms": 500, "include.schema.changes": False,
            # A server heartbeat every 1.6 s while idle: the first heartbeat, which starts
            # the changes below, comes well before the capture's idle stop.
            "connect.keep.alive.interval.ms": 2000,
        }}))

    def change_once_streaming():
        deadline = time.monotonic() + 150
        while not (sink / "topics" / f"__debezium-heartbeat.{PREFIX}").is_dir():
            if time.monotonic() > deadline:
                return
            time.sleep(0.2)
        execute(f"UPDATE {DB}.items SET price = 2.25 WHERE id = 1", f"DELETE FROM {DB}.items WHERE id = 2")

    changer = threading.Thread(target=change_once_streaming, daemon=True)
    changer.start()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "airflow_cdc.cli", "capture", "debezium", "--config", str(config),
             "--until-idle", "8", "--max-seconds", "170"],
            capture_output=True, text=True, cwd=ROOT, timeout=240)
    finally:
        changer.join(timeout=5)
        execute(f"DROP DATABASE IF EXISTS {DB}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sink, json.loads(proc.stdout.strip().splitlines()[-1])


def lines_of(sink: Path, topic: str) -> list[tuple[int, str]]:
    """(offset, line) of a topic's partition 0, in offset order."""
    files = sorted((sink / "topics" / topic / "partition=0").glob("*.json"))
    return [(parse_file_name(f.name)[2] + i, line)
            for f in files for i, line in enumerate(read_lines(f))]


def test_the_snapshot_and_the_streamed_changes_land_in_one_topic_in_binlog_order(captured):
    sink, summary = captured
    events = [parse_line(line) for _, line in lines_of(sink, ITEMS)]
    rows = [change_of(e, stream="s", window_id="w", key_columns={f"{DB}.items": ["id"]})
            for e in events if not isinstance(e, Tombstone)]

    assert summary["reason"] == "idle"
    assert [(r.op, r.keys["id"]) for r in rows] == [
        (Op.READ, 1), (Op.READ, 2), (Op.UPDATE, 1), (Op.DELETE, 2)]
    assert isinstance(events[-1], Tombstone)
    assert rows[2].new_values["price"] == Decimal("2.25") and rows[2].transaction_id
    assert [r.ordering_key for r in rows[1:]] == sorted(r.ordering_key for r in rows[1:])
    assert {r.source_metadata["connector"] for r in rows} == {"mariadb"}


def test_offsets_count_from_zero_without_gaps_and_heartbeats_have_their_topic(captured):
    sink, _ = captured

    assert [offset for offset, _ in lines_of(sink, ITEMS)] == list(range(5))
    beats = [parse_line(line) for _, line in lines_of(sink, f"__debezium-heartbeat.{PREFIX}")]
    assert beats and all(isinstance(b, Heartbeat) for b in beats)
