"""No type lost: Avro logical types, exact JSON decimals and declared column types land typed.

One window of three source tables, extracted and applied once (real Spark and Iceberg):

* ``shop_orders`` (MySQL, Avro) with Datastream's schema: a ``datetime`` record, a decimal,
  a date, ``timestamp-micros``, ``local-timestamp-micros`` and ``time-micros`` columns;
* ``shop.payments`` (MySQL, JSON lines) typed by the pipeline's ``column_types`` mapping, plus
  an undeclared ``fee`` column written ``20.00``; one payment's amount does not fit its
  declared ``DECIMAL(10,2)``;
* ``shop_refunds`` (JSON lines, no mapping) with amounts of two scales in one window.
"""

from __future__ import annotations

import json
from datetime import date, datetime, time, timezone
from decimal import Decimal

import pytest

from airflow_cdc.sources.datastream.writer import DATETIME_RECORD, write_avro_events, write_json_events

from .support import STREAM, apply, iceberg_types, mysql, run_extract, table_rows, window

NAMESPACE = "ds_types"
UTC = timezone.utc
ORDERS_SCHEMA = [
    {"name": "id", "type": "long"},
    {"name": "placed_at", "type": ["null", DATETIME_RECORD], "default": None},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "birthday", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None},
    {"name": "paid_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "local_at", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "opens", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "note", "type": ["null", {"type": "string", "logicalType": "varchar", "maxLength": 20}], "default": None},
]
PAYMENT_TYPES = {
    "shop.payments": {"amount": "DECIMAL(10,2)", "placed_at": "DATETIME", "birthday": "DATE", "paid_at": "TIMESTAMP"},
}


@pytest.fixture(scope="module")
def lake(spark, warehouse, tmp_path_factory):
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{NAMESPACE}")
    folder = tmp_path_factory.mktemp("ds_types")
    orders = [
        mysql({"id": 1, "placed_at": {"date": 19792, "time": 32495000000}, "amount": Decimal("20.00"),
               "birthday": date(1990, 5, 17), "paid_at": datetime(2024, 3, 10, 9, 1, 35, 250000, tzinfo=UTC),
               "local_at": datetime(2024, 3, 10, 9, 1, 35, 5), "opens": time(9, 30), "note": "first"}, pos=10),
        mysql({"id": 2, "placed_at": datetime(2024, 3, 11, 23, 59, 59, 999999), "amount": Decimal("-0.50"),
               "birthday": None, "paid_at": datetime(2024, 3, 11, 0, 0, tzinfo=UTC),
               "local_at": datetime(2024, 3, 11, 0, 0), "opens": time(0, 0, 0, 1)}, pos=20),
    ]
    payments = [
        mysql({"id": 1, "amount": Decimal("20.00"), "fee": Decimal("20.00"), "placed_at": "2024-03-10 09:01:35",
               "birthday": "1990-05-17", "paid_at": "2024-03-10T09:01:35.250Z"}, pos=30, obj="shop.payments"),
        mysql({"id": 2, "amount": Decimal("1.005"), "fee": Decimal("0.10"), "placed_at": "2024-03-10T10:00:00",
               "birthday": "1990-05-18", "paid_at": "2024-03-10T10:00:00Z"}, pos=40, obj="shop.payments"),
    ]
    refunds = [
        mysql({"id": 1, "amount": Decimal("20.5")}, pos=50, obj="shop_refunds"),
        mysql({"id": 2, "amount": Decimal("3.25")}, pos=60, obj="shop_refunds"),
        mysql({"id": 3, "amount": 7}, pos=70, obj="shop_refunds"),
    ]
    files = [
        write_avro_events(folder / "orders.avro", orders, payload_schema=ORDERS_SCHEMA),
        write_json_events(folder / "payments.jsonl", payments),
        write_json_events(folder / "refunds.jsonl", refunds),
    ]
    run = run_extract(spark, NAMESPACE, folder, window(0), files, column_types=PAYMENT_TYPES)
    result = apply(spark, NAMESPACE, window(0), history=["shop_orders"])
    return {"spark": spark, "warehouse": warehouse, "run": run, "result": result}


def target(lake, table: str) -> dict:
    return table_rows(lake["spark"], f"lake.{NAMESPACE}.{table}")


def spark_types(lake, table: str) -> dict:
    return {f.name: f.dataType.simpleString() for f in lake["spark"].table(f"lake.{NAMESPACE}.{table}").schema.fields}


def test_an_avro_datetime_record_lands_as_a_timestamp_without_time_zone(lake):
    assert spark_types(lake, "shop_orders")["placed_at"] == "timestamp_ntz"
    assert iceberg_types(lake["warehouse"], NAMESPACE, "shop_orders")["placed_at"] == "timestamp"
    placed = {k: v["placed_at"] for k, v in target(lake, "shop_orders").items()}
    assert placed == {1: datetime(2024, 3, 10, 9, 1, 35), 2: datetime(2024, 3, 11, 23, 59, 59, 999999)}
    assert placed[1].isoformat() == "2024-03-10T09:01:35"


def test_avro_decimal_date_timestamp_and_local_timestamp_columns_land_typed(lake):
    types = spark_types(lake, "shop_orders")
    assert {c: types[c] for c in ("amount", "birthday", "paid_at", "local_at", "opens", "note")} == {
        "amount": "decimal(10,2)", "birthday": "date", "paid_at": "timestamp", "local_at": "timestamp_ntz",
        "opens": "string", "note": "string",
    }
    rows = target(lake, "shop_orders")
    assert (rows[1]["amount"], rows[2]["amount"]) == (Decimal("20.00"), Decimal("-0.50"))
    assert (rows[1]["birthday"], rows[2]["birthday"]) == (date(1990, 5, 17), None)
    assert rows[1]["local_at"] == datetime(2024, 3, 10, 9, 1, 35, 5)
    assert rows[1]["opens"] == "09:30:00.000000" and rows[2]["opens"] == "00:00:00.000001"
    instants = lake["spark"].sql(
        f"SELECT id, unix_micros(paid_at) AS micros FROM lake.{NAMESPACE}.shop_orders ORDER BY id"
    ).collect()
    assert [r.micros for r in instants] == [1710061295250000, 1710115200000000]


def test_history_of_a_table_with_wall_clock_columns_keeps_them_typed(lake):
    history = lake["spark"].table(f"lake.{NAMESPACE}.shop_orders__history")
    assert {f.name: f.dataType.simpleString() for f in history.schema.fields}["placed_at"] == "timestamp_ntz"
    assert sorted(r.placed_at for r in history.collect()) == [datetime(2024, 3, 10, 9, 1, 35), datetime(2024, 3, 11, 23, 59, 59, 999999)]


def test_a_json_decimal_lands_exact_with_its_scale_in_a_decimal_column(lake):
    assert spark_types(lake, "shop_payments")["fee"] == "decimal(38,2)"
    fee = target(lake, "shop_payments")[1]["fee"]
    assert fee == Decimal("20.00") and str(fee) == "20.00"


def test_the_json_column_types_mapping_types_date_datetime_timestamp_and_decimal_columns(lake):
    types = spark_types(lake, "shop_payments")
    assert {c: types[c] for c in ("amount", "placed_at", "birthday", "paid_at")} == {
        "amount": "decimal(10,2)", "placed_at": "timestamp_ntz", "birthday": "date", "paid_at": "timestamp",
    }
    row = target(lake, "shop_payments")[1]
    assert (row["amount"], row["placed_at"], row["birthday"]) == (
        Decimal("20.00"), datetime(2024, 3, 10, 9, 1, 35), date(1990, 5, 17),
    )


def test_a_value_that_does_not_fit_its_declared_type_is_dead_lettered_with_a_reason(lake):
    assert 2 not in target(lake, "shop_payments")
    dead = lake["spark"].table(f"lake.{NAMESPACE}.{STREAM}_dead_letters").where("source_table = 'shop_payments'").collect()
    assert [dict(d["keys"]) for d in dead] == [{"id": "2"}]
    assert "column 'amount' value '1.005' is not a decimal(10,2)" in dead[0].reason


def test_a_new_column_with_two_scales_in_one_window_holds_both_exactly(lake):
    assert spark_types(lake, "shop_refunds")["amount"] == "decimal(38,2)"
    amounts = {k: v["amount"] for k, v in target(lake, "shop_refunds").items()}
    assert amounts == {1: Decimal("20.50"), 2: Decimal("3.25"), 3: Decimal("7.00")}


def test_the_changelog_records_canonical_type_names(lake):
    declared = lake["spark"].sql(
        f"SELECT DISTINCT source_table, column_types_json FROM lake.{NAMESPACE}.{STREAM}_changelog"
    ).collect()
    by_table = {}
    for row in declared:
        by_table.setdefault(row.source_table, []).append(json.loads(row.column_types_json))
    assert by_table["shop_payments"] == [{
        "amount": "NUMERIC(10,2)", "birthday": "DATE", "fee": "NUMERIC(38,2)", "id": "INT64",
        "paid_at": "TIMESTAMP", "placed_at": "DATETIME",
    }]
    orders = by_table["shop_orders"]
    assert {"placed_at": "DATETIME", "amount": "NUMERIC(10,2)", "opens": "STRING"}.items() <= orders[0].items()
    assert sorted(t["amount"] for t in by_table["shop_refunds"]) == ["INT64", "NUMERIC(38,1)", "NUMERIC(38,2)"]
