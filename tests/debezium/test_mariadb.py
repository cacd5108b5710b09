"""MariaDB through Debezium's MariaDB connector: the ordering rule, the events it writes, and
what the capture sets up for it (no Java here; the real capture is test_mariadb_capture.py).

``data/mariadb_events.jsonl`` holds lines Debezium 3.5's MariaDB connector wrote through the
capture (schemas on) from MariaDB 10.11, as the sink layout stores them: a snapshot READ, an
update inside a two-table transaction, a key change (delete, tombstone, create), a schema
change, the transaction's END and a heartbeat.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from airflow_cdc.capture.classpath import (
    MARIADB_CONNECTOR_CLASS,
    MARIADB_DEBEZIUM_VERSION,
    mariadb_folder,
    mariadb_pom,
    own_classpath,
)
from airflow_cdc.capture.debezium import BINLOG_KEEP_ALIVE_MS, CaptureConfig
from airflow_cdc.model import Op, PartitionPosition, Window
from airflow_cdc.sources.debezium.ordering import ORDERING_KEY_PARTS, source_position
from airflow_cdc.sources.debezium.records import SchemaChange, change_of, parse_line
from airflow_cdc.sources.registry import build_source, source_spec

EVENTS = (Path(__file__).parent / "data" / "mariadb_events.jsonl").read_text().splitlines()
KEYS = {"dbz_try.customers": ["id"], "dbz_try.orders": ["id"]}


def mariadb_line(op, row_id, file="mysql-bin.000005", pos=4175, row=0, gtid="0-1-489",
                 snapshot="false", before=None):
    """A MariaDB change event without schemas, its source block as the connector writes it."""
    after = None if op == "d" else {"id": row_id, "v": f"{file}:{pos}:{row}"}
    source = {"version": "3.5.0.Final", "connector": "mariadb", "name": "mdb",
              "ts_ms": 1_796_659_509_000, "snapshot": snapshot, "db": "dbz_try",
              "table": "customers", "server_id": 0 if snapshot != "false" else 1,
              "gtid": None if snapshot != "false" else gtid, "file": file, "pos": pos,
              "row": row, "thread": None, "query": None}
    return json.dumps({"before": before, "after": after, "source": source, "op": op,
                       "ts_ms": 1_796_659_510_000})


def row_of(line):
    return change_of(parse_line(line), stream="s", window_id="w", key_columns=KEYS)


def test_mariadb_orders_a_key_by_binlog_file_number_then_position_then_row():
    in_binlog_order = [
        mariadb_line("r", 1, pos=3975, snapshot="first"),
        mariadb_line("u", 1, pos=4175, gtid="0-1-489"),
        mariadb_line("u", 1, pos=5210, row=0, gtid="0-1-492"),
        mariadb_line("u", 1, pos=5210, row=2, gtid="0-1-492"),
        mariadb_line("u", 1, pos=5210, row=10, gtid="0-1-492"),
        mariadb_line("u", 1, file="mysql-bin.000006", pos=4, gtid="0-1-493"),
        mariadb_line("u", 1, file="mysql-bin.000010", pos=3, gtid="0-1-494"),
    ]
    shuffled = in_binlog_order[:]
    random.Random(5).shuffle(shuffled)

    rows = sorted((row_of(line) for line in shuffled), key=lambda r: r.ordering_key)

    assert [r.new_values["v"] for r in rows] == [
        "mysql-bin.000005:3975:0", "mysql-bin.000005:4175:0", "mysql-bin.000005:5210:0",
        "mysql-bin.000005:5210:2", "mysql-bin.000005:5210:10", "mysql-bin.000006:4:0",
        "mysql-bin.000010:3:0"]
    assert ORDERING_KEY_PARTS["mariadb"] == ("binlog_file_number", "pos", "row", "op_rank")


def test_a_mariadb_gtid_names_the_transaction_and_never_orders():
    # Two replication domains: domain 1's sequence is far ahead of domain 0's, yet its
    # transaction is later in the binlog.
    first = row_of(mariadb_line("u", 1, pos=4175, gtid="1-1-9000"))
    second = row_of(mariadb_line("u", 1, pos=4900, gtid="0-1-12"))

    assert first.ordering_key < second.ordering_key
    assert (first.transaction_id, second.transaction_id) == ("1-1-9000", "0-1-12")


def test_a_mariadb_key_change_is_a_delete_ranked_before_a_create_at_one_position():
    before = {"id": 3, "v": "old"}
    delete = row_of(mariadb_line("d", 3, pos=4739, gtid="0-1-490", before=before))
    create = row_of(mariadb_line("c", 30, pos=4739, gtid="0-1-490"))

    assert delete.ordering_key < create.ordering_key
    assert delete.ordering_key[:-9] == create.ordering_key[:-9]  # same (file, pos, row)
    assert delete.event_id != create.event_id


def test_a_mariadb_change_delivered_twice_has_one_event_id():
    line = mariadb_line("u", 1, pos=5210, row=1, gtid="0-1-492")

    assert row_of(line).event_id == row_of(line).event_id == (
        'mdb/dbz_try.customers/u/mysql-bin.000005:5210:1/{"id":"1"}')


def test_a_mariadb_snapshot_read_sorts_before_the_first_change_streamed_after_it():
    read = row_of(mariadb_line("r", 1, pos=3975, snapshot="last"))
    change = row_of(mariadb_line("u", 1, pos=4175))

    assert read.op is Op.READ and read.ordering_key < change.ordering_key
    assert read.transaction_id is None and "gtid" not in read.source_metadata


def test_the_mariadb_connectors_lines_parse_to_their_kinds():
    kinds = [type(parse_line(line)).__name__ for line in EVENTS]

    assert kinds == ["ChangeEvent", "ChangeEvent", "ChangeEvent", "Tombstone", "ChangeEvent",
                     "SchemaChange", "TransactionEvent", "Heartbeat"]


def test_a_mariadb_snapshot_row_keeps_every_column_typed_and_exact():
    row = change_of(parse_line(EVENTS[0]), stream="s", window_id="w", key_columns=KEYS)

    assert row.source_table == "dbz_try.customers" and row.op is Op.READ
    values = row.new_values
    assert values["balance"] == Decimal("10.50") and str(values["balance"]) == "10.50"
    assert values["seen"] == "2025-01-06T08:00:00.123456Z"  # TIMESTAMP(6): the instant, UTC
    assert values["ts"] == "2025-01-06T08:01:02.500000"  # DATETIME(3): the wall clock
    assert values["born"] == "1815-12-10"
    assert values["vip"] == 1  # BOOLEAN is TINYINT(1)
    assert row.column_types["f"] == "FLOAT64"  # DOUBLE: the JSON converter's "double"
    assert row.column_types["balance"] == "NUMERIC(12,2)"
    assert row.source_metadata["position"] == "mysql-bin.000005:3975:0"


def test_a_mariadb_change_carries_its_gtid_and_binlog_coordinates():
    row = change_of(parse_line(EVENTS[1]), stream="s", window_id="w", key_columns=KEYS)

    assert row.op is Op.UPDATE and row.old_values["name"] == "ada"
    assert row.new_values["name"] == "ada l"
    assert row.transaction_id == "0-1-489"
    assert {k: row.source_metadata[k] for k in ("connector", "gtid", "server_id", "file", "pos")} == {
        "connector": "mariadb", "gtid": "0-1-489", "server_id": 1, "file": "mysql-bin.000005",
        "pos": 4175}


def test_the_real_key_change_deletes_the_old_key_then_creates_the_new_one():
    delete, create = (change_of(parse_line(EVENTS[i]), stream="s", window_id="w", key_columns=KEYS)
                      for i in (2, 4))

    assert (delete.op, delete.keys, create.op, create.keys) == (Op.DELETE, {"id": 2}, Op.INSERT, {"id": 30})
    assert source_position(parse_line(EVENTS[2]).source) == source_position(parse_line(EVENTS[4]).source)
    assert delete.ordering_key < create.ordering_key


def test_a_mariadb_schema_change_names_its_database_and_ddl():
    change = parse_line(EVENTS[5])

    assert isinstance(change, SchemaChange)
    assert change.database == "dbz_try" and change.ddl.startswith("CREATE TABLE `customers`")


def test_the_transaction_end_counts_events_per_database_table():
    end = parse_line(EVENTS[6])

    assert (end.status, end.id) == ("END", "0-1-489")
    assert dict(end.data_collections) == {"dbz_try.orders": 2, "dbz_try.customers": 1}


def test_a_window_counts_schema_changes_and_dead_letters_none(tmp_path):
    start = datetime(2026, 12, 7, 16, 0, tzinfo=timezone.utc)
    folder = tmp_path / "topics" / "mdb" / "partition=0"
    folder.mkdir(parents=True)
    (folder / "mdb+0+0000000000.json").write_text(EVENTS[5] + "\n")
    beats = tmp_path / "topics" / "__debezium-heartbeat.mdb" / "partition=0"
    beats.mkdir(parents=True)
    (beats / "__debezium-heartbeat.mdb+0+0000000000.json").write_text(EVENTS[7] + "\n")
    spec = source_spec("debezium", "s", {"prefix": str(tmp_path), "topic_prefix": "mdb",
                                         "key_columns": KEYS})
    positions = (PartitionPosition("mdb+0", start, "0"),
                 PartitionPosition("__debezium-heartbeat.mdb+0", start, "0"))
    options = build_source(spec).plan_options(None, start + timedelta(hours=1), None, positions)

    read = build_source(spec, options).read_partition(
        Window("s", start, start + timedelta(minutes=5)), positions[0])

    assert read.counts["schema_changes"] == 1 and read.dead_letters == () and read.rows == ()


def test_a_mariadb_capture_keeps_a_schema_history_and_a_binlog_keep_alive(tmp_path):
    props = CaptureConfig.from_dict({"output": str(tmp_path), "connector": {
        "connector.class": MARIADB_CONNECTOR_CLASS, "topic.prefix": "mdb",
        "heartbeat.interval.ms": 1000}}).engine_properties()

    assert props["schema.history.internal"] == "io.debezium.storage.file.history.FileSchemaHistory"
    assert props["schema.history.internal.file.filename"] == str(
        (tmp_path / "_debezium" / "schema-history.dat").resolve())
    assert props["connect.keep.alive.interval.ms"] == str(BINLOG_KEEP_ALIVE_MS)
    assert "post.processors" not in props


def test_only_the_mariadb_connector_needs_a_classpath_of_its_own():
    assert own_classpath("io.debezium.connector.postgresql.PostgresConnector") is None
    assert own_classpath("io.debezium.connector.mysql.MySqlConnector") is None


def test_the_mariadb_classpath_is_one_debezium_release_in_the_jar_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CDC_JARS_DIR", str(tmp_path))
    pom = mariadb_pom()

    assert mariadb_folder() == tmp_path / f"debezium-mariadb-{MARIADB_DEBEZIUM_VERSION}"
    assert f"<artifactId>debezium-bom</artifactId><version>{MARIADB_DEBEZIUM_VERSION}</version>" in pom
    for artifact in ("debezium-embedded", "debezium-connector-mariadb", "debezium-storage-file",
                     "log4j-jul"):
        assert f"<artifactId>{artifact}</artifactId>" in pom
