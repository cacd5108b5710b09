"""A declared DATETIME applies whatever shape the source wrote it in (real Spark and Iceberg).

One window of ``shop.orders`` declared ``{"placed_at": "DATETIME"}``: an Avro file whose
``placed_at`` is Datastream's datetime record without a record-level logical type (its
fields typed ``date`` and ``time-micros``), and a JSON-lines file with the record as an
object, a wall-clock text and a bare number. Apply lands every datetime; only the number,
whose unit nothing states, is a dead letter.
"""

from __future__ import annotations

from datetime import date, datetime, time

import pytest

from airflow_cdc.sources.datastream.writer import write_avro_events, write_json_events

from .support import STREAM, apply, mysql, run_extract, table_rows, window

NAMESPACE = "ds_datetime_shapes"
SHAPED_RECORD = {
    "type": "record",
    "name": "placed_at_value",
    "fields": [
        {"name": "date", "type": {"type": "int", "logicalType": "date"}},
        {"name": "time", "type": {"type": "long", "logicalType": "time-micros"}},
    ],
}


@pytest.fixture(scope="module")
def lake(spark, warehouse, tmp_path_factory):
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{NAMESPACE}")
    folder = tmp_path_factory.mktemp("ds_datetime_shapes")
    avro = [mysql({"id": 1, "placed_at": {"date": date(2024, 3, 10), "time": time(9, 1, 35)}}, pos=10, obj="shop.orders")]
    lines = [
        mysql({"id": 2, "placed_at": {"date": 19793, "time": 1}}, pos=20, obj="shop.orders"),
        mysql({"id": 3, "placed_at": "2024-03-12 23:59:59"}, pos=30, obj="shop.orders"),
        mysql({"id": 4, "placed_at": 1710061295}, pos=40, obj="shop.orders"),
    ]
    files = [
        write_avro_events(folder / "orders.avro", avro,
                          payload_schema=[{"name": "id", "type": "long"}, {"name": "placed_at", "type": SHAPED_RECORD}]),
        write_json_events(folder / "orders.jsonl", lines),
    ]
    run = run_extract(spark, NAMESPACE, folder, window(0), files,
                      column_types={"shop.orders": {"placed_at": "DATETIME"}})
    result = apply(spark, NAMESPACE, window(0))
    return {"spark": spark, "run": run, "result": result}


def test_a_declared_datetime_lands_from_a_shaped_record_a_json_record_and_text(lake):
    rows = table_rows(lake["spark"], f"lake.{NAMESPACE}.shop_orders")
    types = {f.name: f.dataType.simpleString() for f in lake["spark"].table(f"lake.{NAMESPACE}.shop_orders").schema.fields}

    assert types["placed_at"] == "timestamp_ntz"
    assert {k: v["placed_at"] for k, v in rows.items()} == {
        1: datetime(2024, 3, 10, 9, 1, 35),
        2: datetime(2024, 3, 11, 0, 0, 0, 1),
        3: datetime(2024, 3, 12, 23, 59, 59),
    }


def test_only_the_number_without_a_unit_is_a_dead_letter_and_it_names_the_fix(lake):
    dead = lake["spark"].table(f"lake.{NAMESPACE}.{STREAM}_dead_letters").collect()

    assert [(d.source_table, d.reason.startswith("extract: ")) for d in dead] == [("shop.orders", True)]
    assert "table 'shop_orders' column 'placed_at' is declared DATETIME but holds 1710061295" in dead[0].reason
    assert "declare the column INT64" in dead[0].reason
