"""A parallel snapshot's watermarks in the log, and the keys changed between them.

The lines follow what the real PostgreSQL connector wrote for ``pg_logical_emit_message``
and row changes (op m with ``message.prefix`` and base64 ``message.content``; ``source.
sequence`` ``[last commit LSN, event LSN]``), and the MySQL connector's envelope for a
watermark table.
"""

from __future__ import annotations

import base64
import json

import pytest

from airflow_cdc.sources.debezium.ordering import ordering_key, source_position
from airflow_cdc.sources.debezium.watermarks import (
    MESSAGE_PREFIX,
    Watermark,
    WatermarkError,
    key_text,
    postgresql_emit,
    scan_batch,
    table_emit,
)

TABLE = "public.orders"
WM = Watermark("snap1", 3, "low")


def pg_source(commit, lsn, table="orders"):
    return {"connector": "postgresql", "name": "pg", "db": "shop", "schema": "public",
            "table": table, "ts_ms": 1_700_000_000_000, "snapshot": "false",
            "sequence": json.dumps([None if commit is None else str(commit), str(lsn)]),
            "lsn": lsn, "txId": 7}


def message(text, commit, lsn, prefix=MESSAGE_PREFIX):
    content = base64.b64encode(text.encode()).decode()
    return ("pg.message", json.dumps({
        "op": "m", "ts_ms": 1, "source": {**pg_source(commit, lsn), "table": ""},
        "message": {"prefix": prefix, "content": content}}))


def change(op, key, commit, lsn, before_key=None):
    after = None if op == "d" else {"id": key, "note": "x"}
    before = {"id": before_key if before_key is not None else key} if op in ("d", "u") else None
    return ("pg.public.orders", json.dumps({
        "op": op, "ts_ms": 1, "before": before, "after": after, "source": pg_source(commit, lsn)}))


def scan(lines, watermark=WM, **kwargs):
    return scan_batch(lines, watermark, TABLE, ["id"], **kwargs)


def test_keys_changed_strictly_between_the_watermarks_are_found():
    lines = [
        change("u", 1, 90, 95),                    # before the low watermark
        message("snap1/3/low", 100, 110),
        change("u", 2, 120, 121),
        change("d", 3, 130, 131),
        message("snap1/3/high", 140, 150),
        change("u", 4, 160, 161),                  # after the high watermark
    ]
    result = scan(lines)
    assert result.complete and result.changed_keys == {key_text({"id": 2}), key_text({"id": 3})}
    assert result.events_between == 2


def test_lines_in_any_order_give_the_same_keys():
    lines = [change("u", 2, 120, 121), message("snap1/3/high", 140, 150),
             change("u", 4, 160, 161), message("snap1/3/low", 100, 110)]
    assert scan(lines).changed_keys == {key_text({"id": 2})}


def test_a_change_of_a_transaction_in_flight_at_the_low_watermark_counts_by_its_commit():
    # WAL written before the low watermark (event LSN 105 < 110) but committed after it: its
    # commit position puts it between the watermarks, where the read may or may not see it.
    lines = [message("snap1/3/low", 100, 110), change("u", 5, 115, 105),
             message("snap1/3/high", 140, 150)]
    assert scan(lines).changed_keys == {key_text({"id": 5})}


def test_a_key_changing_update_marks_both_keys():
    lines = [message("snap1/3/low", 100, 110), change("u", 8, 120, 121, before_key=7),
             message("snap1/3/high", 140, 150)]
    assert scan(lines).changed_keys == {key_text({"id": 7}), key_text({"id": 8})}


def test_watermarks_of_other_batches_and_prefixes_are_not_this_batch():
    lines = [message("snap1/2/low", 10, 11), message("snap1/3/low", 100, 110, prefix="other"),
             message("snap2/3/high", 140, 150)]
    result = scan(lines)
    assert result.low is None and result.high is None and not result.complete


def test_a_high_watermark_before_the_low_one_is_refused():
    lines = [message("snap1/3/low", 140, 150), message("snap1/3/high", 100, 110)]
    with pytest.raises(WatermarkError, match="not after the low one"):
        scan(lines)


def test_read_rows_at_the_high_watermark_sort_between_the_batch_and_later_changes():
    lines = [message("snap1/3/low", 100, 110), change("u", 2, 120, 121),
             message("snap1/3/high", 140, 150)]
    high = scan(lines).high
    read_key = ordering_key(high, "r")
    before = ordering_key(source_position(json.loads(change("u", 2, 120, 121)[1])["source"]), "u")
    # The transaction after the high watermark's carries its commit LSN (>= 150's commit).
    after = ordering_key(source_position(pg_source(155, 152)), "u")
    assert before < read_key < after


def test_watermarks_in_a_table_are_found_for_databases_without_messages():
    def mysql(op, after, pos):
        return ("my.shop.t", json.dumps({"op": op, "ts_ms": 1, "before": None, "after": after,
                                         "source": {"connector": "mysql", "name": "my", "db": "shop",
                                                    "table": "airflow_cdc_watermarks" if "kind" in after else "orders",
                                                    "file": "mysql-bin.000003", "pos": pos, "row": 0}}))
    lines = [mysql("c", {"id": "snap1/3/low", "snapshot_id": "snap1", "batch": 3, "kind": "low"}, 100),
             mysql("u", {"id": 9, "note": "y"}, 200),
             mysql("c", {"id": "snap1/3/high", "snapshot_id": "snap1", "batch": 3, "kind": "high"}, 300)]
    result = scan_batch(lines, WM, "shop.orders", ["id"], watermark_table="shop.airflow_cdc_watermarks")
    assert result.changed_keys == {key_text({"id": 9})}


def test_emitting_binds_the_watermark_and_validates_the_table():
    assert postgresql_emit(WM) == ("SELECT pg_logical_emit_message(true, %s, %s)",
                                   (MESSAGE_PREFIX, "snap1/3/low"))
    sql, params = table_emit(WM, "shop.airflow_cdc_watermarks")
    assert sql.startswith("INSERT INTO `shop`.`airflow_cdc_watermarks`") and params[0] == "snap1/3/low"
    with pytest.raises(ValueError, match="watermark table"):
        table_emit(WM, "shop.t; drop table x")


def test_key_text_is_what_spark_to_json_writes_of_the_key_map():
    assert key_text({"b": "é\"x", "a": 1}) == '{"a":"1","b":"é\\"x"}'
