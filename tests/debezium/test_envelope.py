"""Debezium sink-file lines -> events -> change rows, and the order of a key's changes.

The events are written by hand after Debezium's documented envelopes: the PostgreSQL
connector's (source: connector, name, db, schema, table, ts_ms, snapshot, sequence, lsn, txId)
and the MySQL connector's (file, pos, row, gtid, server_id), as Kafka Connect's JSON
converter writes them with and without ``schemas.enable``.
"""

from __future__ import annotations

import base64
import json

import pytest

from airflow_cdc.model import Image, Op, change_row_to_record
from airflow_cdc.sources.debezium.records import (
    ChangeEvent,
    Heartbeat,
    LogicalMessage,
    Tombstone,
    TransactionEvent,
    Truncate,
    change_of,
    is_unavailable,
    parse_line,
)
from airflow_cdc.sources.debezium.errors import KeylessTableError, MalformedEventError

PLACEHOLDER = "__debezium_unavailable_value"
KEYS = {"public.orders": ["id"], "shop.orders": ["id"]}


def pg_source(lsn=2400, commit=2300, snapshot="false", table="orders", **extra):
    source = {
        "version": "3.0.0.Final", "connector": "postgresql", "name": "pg", "ts_ms": 1_700_000_000_123,
        "snapshot": snapshot, "db": "shop", "sequence": json.dumps([None if commit is None else str(commit), str(lsn)]),
        "schema": "public", "table": table, "txId": 771, "lsn": lsn, "xmin": None,
    }
    source.update(extra)
    return source


def mysql_source(file="mysql-bin.000003", pos=154, row=0, snapshot="false", gtid=None):
    return {
        "version": "3.0.0.Final", "connector": "mysql", "name": "my", "ts_ms": 1_700_000_000_000,
        "snapshot": snapshot, "db": "shop", "table": "orders", "server_id": 223344, "gtid": gtid,
        "file": file, "pos": pos, "row": row, "thread": 7, "query": None,
    }


def pg_line(op, after=None, before=None, **source):
    return json.dumps({"before": before, "after": after, "source": pg_source(**source), "op": op, "ts_ms": 1_700_000_000_500})


def mysql_line(op, after=None, before=None, **source):
    return json.dumps({"before": before, "after": after, "source": mysql_source(**source), "op": op, "ts_ms": 1_700_000_000_500})


def row_of(line, keys=KEYS, **kwargs):
    return change_of(parse_line(line), stream="shop", window_id="w1", key_columns=keys, partition_id="pg.public.orders+0", **kwargs)


def with_schema(payload: dict, columns: list[dict]) -> str:
    """``payload`` inside the JSON converter's schema envelope, with ``columns`` as the row struct."""
    row = {"type": "struct", "fields": columns, "optional": True, "name": "pg.public.orders.Value"}
    envelope = {
        "type": "struct",
        "name": "pg.public.orders.Envelope",
        "version": 2,
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {"type": "struct", "fields": [], "optional": False, "name": "io.debezium.connector.postgresql.Source", "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }
    return json.dumps({"schema": envelope, "payload": payload})


ORDER_COLUMNS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "note"},
    {"type": "bytes", "optional": True, "field": "photo"},
    {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
     "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "amount"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "version": 1, "field": "placed_at"},
]


def amount_bytes(unscaled: int) -> str:
    return base64.b64encode(unscaled.to_bytes(8, "big", signed=True).lstrip(b"\x00") or b"\x00").decode()


# --- parsing lines ------------------------------------------------------------------------------
def test_a_line_without_schema_is_the_payload_alone():
    event = parse_line(pg_line("c", after={"id": 1, "note": "hi"}))

    assert isinstance(event, ChangeEvent)
    assert (event.op, event.after, event.before, event.source_table) == ("c", {"id": 1, "note": "hi"}, None, "public.orders")
    assert event.row_schema is None


def test_a_line_with_schema_types_the_columns_from_it():
    payload = json.loads(pg_line("c", after={"id": 1, "note": "hi", "photo": None, "amount": amount_bytes(1999), "placed_at": 1_700_000_000_123_456}))

    row = row_of(with_schema(payload, ORDER_COLUMNS))

    assert row.column_types == {"amount": "NUMERIC(10,2)", "id": "INT64", "note": "STRING", "photo": "BYTES", "placed_at": "DATETIME"}
    assert change_row_to_record(row)["new_values"] == {
        "amount": "19.99", "id": "1", "note": "hi", "photo": None, "placed_at": "2023-11-14T22:13:20.123456",
    }


def test_the_null_line_is_a_tombstone():
    assert parse_line("null") == Tombstone()
    assert parse_line('{"schema":null,"payload":null}') == Tombstone()


def test_a_logical_decoding_message_is_recognised_not_a_change():
    line = json.dumps({"op": "m", "ts_ms": 1, "source": pg_source(table=""), "message": {"prefix": "audit", "content": "aGk="}})

    event = parse_line(line)

    assert isinstance(event, LogicalMessage) and event.prefix == "audit"


@pytest.mark.parametrize(
    "line, reason",
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not an object"),
        (pg_line("x", after={"id": 1}), "op 'x' is not a Debezium operation"),
        (json.dumps({"after": {"id": 1}, "source": pg_source()}), "has no op"),
        (json.dumps({"op": "c", "after": {"id": 1}}), "no source block"),
        (pg_line("c", after=None), "has no after row"),
        (pg_line("d", before=None), "has no before row"),
        (json.dumps({"op": "c", "after": {"id": 1}, "source": {**pg_source(), "connector": "oracle"}}), "'oracle' is not one"),
        ("", "empty"),
    ],
)
def test_a_malformed_line_is_refused_with_its_reason(line, reason):
    with pytest.raises(MalformedEventError, match=reason):
        parse_line(line)


def test_transaction_begin_and_end_are_parsed_with_per_table_counts():
    begin = parse_line('{"status":"BEGIN","id":"571:53195832","ts_ms":1486500577125,"event_count":null,"data_collections":null}')
    end = parse_line(json.dumps({
        "status": "END", "id": "571:53195832", "ts_ms": 1486500577691, "event_count": 3,
        "data_collections": [{"data_collection": "public.orders", "event_count": 2}, {"data_collection": "public.items", "event_count": 1}],
    }), topic="pg.transaction")

    assert begin == TransactionEvent(status="BEGIN", id="571:53195832", ts_ms=1486500577125)
    assert isinstance(end, TransactionEvent) and end.event_count == 3
    assert end.table_counts == {"public.orders": 2, "public.items": 1}


def test_an_end_without_data_collections_is_malformed():
    with pytest.raises(MalformedEventError, match="data_collections"):
        parse_line('{"status":"END","id":"9","event_count":1}')


def test_a_heartbeat_is_the_connector_clock_in_milliseconds():
    schema = {"type": "struct", "fields": [{"type": "int64", "optional": False, "field": "ts_ms"}], "optional": False, "name": "io.debezium.connector.common.Heartbeat"}
    beat = parse_line(json.dumps({"schema": schema, "payload": {"ts_ms": 1_700_000_000_250}}), topic="__debezium-heartbeat.pg")

    assert beat == Heartbeat(1_700_000_000_250)
    assert beat.at.isoformat() == "2023-11-14T22:13:20.250000+00:00"
    assert parse_line('{"ts_ms": 5}') == Heartbeat(5)


def test_a_change_of_a_table_named_transaction_is_still_a_change():
    line = pg_line("c", after={"id": 1}, table="transaction")

    assert isinstance(parse_line(line, topic="pg.public.transaction"), ChangeEvent)


def test_a_value_of_no_known_shape_is_malformed_naming_its_topic():
    with pytest.raises(MalformedEventError, match="of topic 'pg.public.orders' has no op"):
        parse_line('{"id": 1}', topic="pg.public.orders")


# --- change rows --------------------------------------------------------------------------------
@pytest.mark.parametrize("op, expected", [("c", Op.INSERT), ("r", Op.READ), ("u", Op.UPDATE)])
def test_create_read_and_update_carry_the_after_row(op, expected):
    row = row_of(pg_line(op, after={"id": 7, "note": "n"}))

    assert (row.op, row.image, row.keys, row.new_values, row.old_values) == (expected, Image.FULL, {"id": 7}, {"id": 7, "note": "n"}, None)


def test_a_delete_carries_the_before_row_and_no_new_values():
    row = row_of(pg_line("d", before={"id": 7, "note": None}))

    assert (row.op, row.keys, row.new_values, row.old_values) == (Op.DELETE, {"id": 7}, None, {"id": 7, "note": None})


def test_an_update_with_replica_identity_full_keeps_the_before_row_as_old_values():
    row = row_of(pg_line("u", before={"id": 7, "note": "old"}, after={"id": 7, "note": "new"}))

    assert row.old_values == {"id": 7, "note": "old"}


def test_an_unchanged_toast_column_is_left_out_and_the_image_is_partial():
    row = row_of(pg_line("u", after={"id": 7, "note": PLACEHOLDER, "status": "paid"}))

    assert row.image is Image.PARTIAL
    assert row.new_values == {"id": 7, "status": "paid"}
    assert "note" not in row.column_types
    assert row.source_metadata["unchanged_columns"] == ["note"]
    assert PLACEHOLDER not in json.dumps(change_row_to_record(row), default=str)


def test_an_unchanged_toast_bytea_column_is_recognised_in_its_base64_form():
    placeholder_bytes = base64.b64encode(PLACEHOLDER.encode()).decode()
    payload = json.loads(pg_line("u", after={"id": 7, "note": "x", "photo": placeholder_bytes, "amount": None, "placed_at": None}))

    row = row_of(with_schema(payload, ORDER_COLUMNS))

    assert row.image is Image.PARTIAL and "photo" not in row.new_values


@pytest.mark.parametrize(
    "value",
    [
        PLACEHOLDER,
        base64.b64encode(PLACEHOLDER.encode()).decode(),
        {PLACEHOLDER: PLACEHOLDER},
        json.dumps({PLACEHOLDER: PLACEHOLDER}, separators=(",", ":")),
        [PLACEHOLDER],
        list(PLACEHOLDER.encode()),
    ],
    ids=["text", "bytea", "hstore-map", "json", "text-array", "int-array"],
)
def test_every_form_of_the_placeholder_is_unavailable(value):
    assert is_unavailable(value)


def test_ordinary_values_are_not_the_placeholder():
    assert not any(is_unavailable(v) for v in ("__debezium", "", [1, 2, 3], {"a": "b"}, 5, []))


def test_a_custom_placeholder_is_honoured():
    row = row_of(pg_line("u", after={"id": 7, "note": "<toast>"}), placeholder="<toast>")

    assert row.image is Image.PARTIAL and row.new_values == {"id": 7}


def test_a_truncate_becomes_a_truncate_at_its_position():
    truncate = row_of(pg_line("t", lsn=5000, commit=4900))
    later = row_of(pg_line("c", after={"id": 1}, lsn=5100, commit=5050))
    earlier = row_of(pg_line("c", after={"id": 1}, lsn=4000, commit=3900))

    assert isinstance(truncate, Truncate)
    assert (truncate.source_table, truncate.event_id) == ("public.orders", "pg/public.orders/t/4900:5000")
    assert earlier.ordering_key < truncate.ordering_key < later.ordering_key


def test_events_of_a_table_without_a_key_are_refused_with_that_reason():
    with pytest.raises(KeylessTableError, match="^events for tables without a key: table 'public.orders'"):
        row_of(pg_line("c", after={"id": 1}), keys={"public.items": ["id"]})


def test_a_missing_key_column_is_refused_naming_it():
    with pytest.raises(MalformedEventError, match="lacks key column 'id'"):
        row_of(pg_line("c", after={"note": "x"}))


def test_a_redelivered_change_has_the_same_event_id():
    first = row_of(pg_line("u", after={"id": 7, "note": "n"}))
    again = row_of(pg_line("u", after={"id": 7, "note": "n"}))
    next_change = row_of(pg_line("u", after={"id": 7, "note": "m"}, lsn=2500))

    assert first.event_id == again.event_id == 'pg/public.orders/u/2300:2400/{"id":"7"}'
    assert next_change.event_id != first.event_id


def test_the_transaction_block_gives_the_transaction_id_by_its_postgresql_tx_id():
    # PostgreSQL's metadata ids are <txId>:<LSN>, the LSN differing on BEGIN, END and each event
    line = json.loads(pg_line("c", after={"id": 1}))
    line["transaction"] = {"id": "771:2400", "total_order": 1, "data_collection_order": 1}

    row = row_of(json.dumps(line))

    assert row.transaction_id == "771"
    assert row.source_metadata["transaction"] == {"id": "771:2400", "total_order": 1, "data_collection_order": 1}


def test_a_mysql_gtid_transaction_id_is_kept_whole():
    from airflow_cdc.sources.debezium.records import transaction_key

    gtid = "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"

    assert transaction_key(gtid) == gtid and transaction_key("771:2400") == "771"


def test_without_a_transaction_block_postgresql_uses_the_tx_id():
    assert row_of(pg_line("c", after={"id": 1})).transaction_id == "771"


def test_commit_ts_prefers_the_source_microseconds():
    row = row_of(pg_line("c", after={"id": 1}, ts_us=1_700_000_000_123_456))

    assert row.commit_ts.isoformat() == "2023-11-14T22:13:20.123456+00:00"


def test_a_mysql_event_names_its_table_by_database_and_uses_the_gtid():
    row = row_of(mysql_line("c", after={"id": 3}, gtid="3E11FA47-71CA-11E1-9E33-C80AA9429562:23"))

    assert row.source_table == "shop.orders"
    assert row.transaction_id == "3E11FA47-71CA-11E1-9E33-C80AA9429562:23"
    assert row.event_id == 'my/shop.orders/c/mysql-bin.000003:154:0/{"id":"3"}'
    assert row.source_metadata["file"] == "mysql-bin.000003" and row.source_metadata["server_id"] == 223344


def test_without_schemas_declared_columns_are_converted_and_others_are_strings():
    line = pg_line("c", after={"id": 1, "placed_at": 1_700_000_000_123_456, "note": "x"})

    row = row_of(line, column_types={"public.orders": {"placed_at": "io.debezium.time.MicroTimestamp", "id": "INT64"}})

    assert row.column_types == {"id": "INT64", "note": "STRING", "placed_at": "DATETIME"}
    assert row.new_values["placed_at"] == "2023-11-14T22:13:20.123456"


def test_a_value_that_does_not_fit_its_schema_type_is_refused_naming_table_and_column():
    payload = json.loads(pg_line("c", after={"id": 1, "note": None, "photo": None, "amount": None, "placed_at": "yesterday"}))

    with pytest.raises(MalformedEventError, match="table 'public.orders': column 'placed_at'"):
        row_of(with_schema(payload, ORDER_COLUMNS))


# --- ordering -----------------------------------------------------------------------------------
def in_order(*lines):
    rows = [row_of(line) for line in lines]
    return [lines.index(line) for line in sorted(lines, key=lambda l: rows[lines.index(l)].ordering_key)]


def test_postgresql_orders_by_commit_lsn_before_event_lsn():
    # The second transaction wrote first (lower event LSN) but committed later.
    committed_first = pg_line("u", after={"id": 1, "note": "a"}, commit=1000, lsn=1500)
    committed_later = pg_line("u", after={"id": 1, "note": "b"}, commit=1600, lsn=1400)

    assert in_order(committed_later, committed_first) == [1, 0]


def test_postgresql_orders_a_transactions_changes_by_event_lsn():
    first = pg_line("u", after={"id": 1, "note": "a"}, commit=1000, lsn=1100)
    second = pg_line("u", after={"id": 1, "note": "b"}, commit=1000, lsn=1200)

    assert in_order(second, first) == [1, 0]


def test_postgresql_never_orders_by_ts_ms():
    earlier_position = json.loads(pg_line("u", after={"id": 1}, commit=1000, lsn=1100))
    earlier_position["source"]["ts_ms"] = 1_800_000_000_000
    later_position = pg_line("u", after={"id": 1}, commit=2000, lsn=2100)

    assert in_order(later_position, json.dumps(earlier_position)) == [1, 0]


def test_postgresql_falls_back_to_the_lsn_without_sequence():
    first = json.loads(pg_line("u", after={"id": 1}, lsn=100))
    second = json.loads(pg_line("u", after={"id": 1}, lsn=200))
    for event in (first, second):
        del event["source"]["sequence"]

    assert in_order(json.dumps(second), json.dumps(first)) == [1, 0]


def test_a_postgresql_snapshot_read_sorts_before_changes_streamed_after_it():
    # Snapshot READs carry the WAL position where the snapshot began; no commit LSN yet.
    snapshot = pg_line("r", after={"id": 1, "note": "snap"}, commit=None, lsn=5000, snapshot="last")
    streamed = pg_line("u", after={"id": 1, "note": "new"}, commit=None, lsn=5200)
    later = pg_line("u", after={"id": 1, "note": "newer"}, commit=5300, lsn=5400)

    assert in_order(later, streamed, snapshot) == [2, 1, 0]


def test_a_postgresql_snapshot_read_sorts_before_a_transaction_in_flight_when_it_began():
    # The transaction wrote WAL (LSN 4900) before the snapshot began (5000), committed after it:
    # the snapshot did not see it, so its change is the newer one.
    snapshot = pg_line("r", after={"id": 1, "note": "snap"}, commit=None, lsn=5000, snapshot="true")
    in_flight = pg_line("u", after={"id": 1, "note": "new"}, commit=None, lsn=4900)

    assert in_order(in_flight, snapshot) == [1, 0]


def test_at_one_position_a_read_sorts_before_a_delete_before_a_create():
    create = pg_line("c", after={"id": 1})
    delete = pg_line("d", before={"id": 1})
    read = pg_line("r", after={"id": 1}, snapshot="incremental")

    assert in_order(create, delete, read) == [2, 1, 0]


def test_a_postgresql_key_change_is_a_delete_and_a_create_of_two_keys():
    old_key = row_of(pg_line("d", before={"id": 1, "note": "x"}, lsn=900))
    new_key = row_of(pg_line("c", after={"id": 2, "note": "x"}, lsn=900))

    assert (old_key.op, old_key.keys, new_key.op, new_key.keys) == (Op.DELETE, {"id": 1}, Op.INSERT, {"id": 2})
    assert old_key.ordering_key < new_key.ordering_key


def test_mysql_orders_by_binlog_file_number_then_position_then_row():
    lines = [
        mysql_line("u", after={"id": 1, "v": 4}, file="mysql-bin.000010", pos=4),
        mysql_line("u", after={"id": 1, "v": 3}, file="mysql-bin.000009", pos=900, row=1),
        mysql_line("u", after={"id": 1, "v": 2}, file="mysql-bin.000009", pos=900, row=0),
        mysql_line("u", after={"id": 1, "v": 1}, file="mysql-bin.000009", pos=120, row=5),
    ]

    assert in_order(*lines) == [3, 2, 1, 0]


def test_a_mysql_snapshot_read_sorts_before_changes_after_its_binlog_position():
    read = mysql_line("r", after={"id": 1}, file="mysql-bin.000003", pos=154, snapshot="true")
    change = mysql_line("u", after={"id": 1}, file="mysql-bin.000003", pos=380)

    assert in_order(change, read) == [1, 0]


def test_a_mysql_event_without_a_binlog_file_is_malformed():
    with pytest.raises(MalformedEventError, match="source.file"):
        row_of(mysql_line("c", after={"id": 1}, file=None))
