"""Transaction completeness from Debezium's END events: a window holding fewer of a committed
transaction's events than its END counts is refused naming the transaction; events an
earlier window committed count; a transaction committed after the window end waits."""

from __future__ import annotations

import itertools
import json
from datetime import timedelta

import pytest

from airflow_cdc.model import PartitionPosition, Window, change_row_to_record
from airflow_cdc.pipeline.files import WindowPlanFile
from airflow_cdc.sources.debezium.errors import IncompleteTransactionError
from airflow_cdc.sources.debezium.records import change_of, parse_line
from airflow_cdc.sources.registry import build_source, source_spec

from .test_source import HEARTBEATS, ORDERS, T0, change, millis, write

TRANSACTIONS = "pg.transaction"
WINDOW = Window("shop", T0, T0 + timedelta(minutes=10))
EARLIER = Window("shop", T0 - timedelta(minutes=10), T0)
_tables = itertools.count()


def end(txn: str, at, orders: int) -> dict:
    return {"status": "END", "id": txn, "ts_ms": millis(at), "event_count": orders,
            "data_collections": [{"data_collection": "public.orders", "event_count": orders}]}


def in_transaction(event: dict, txn: str, order: int) -> dict:
    return {**event, "transaction": {"id": txn, "total_order": order, "data_collection_order": order}}


def rows_of(events, window: Window):
    columns = None
    for event in events:
        row = change_of(parse_line(json.dumps(event)), stream="shop", window_id=window.window_id,
                        key_columns={"public.orders": ["id"]}, partition_id=f"{ORDERS}+0")
        record = change_row_to_record(row)
        record["source_table"] = "public_orders"
        columns = columns or list(record)
        yield tuple(record[c] for c in columns)


@pytest.fixture
def lake_table(spark):
    from airflow_cdc.spark_jobs.changelog import changelog_schema

    table = f"lake.dbz_txn.changelog_{next(_tables)}"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.dbz_txn")
    spark.createDataFrame([], changelog_schema()).writeTo(table).using("iceberg").create()
    return table


def check(spark, sink, table, window_events, ends):
    from airflow_cdc.spark_jobs.changelog import changelog_schema

    write(sink, TRANSACTIONS, 0, ends)
    write(sink, HEARTBEATS, 0, [{"ts_ms": millis(T0 + timedelta(minutes=30))}])
    spec = source_spec("debezium", "shop", {"prefix": str(sink), "topic_prefix": "pg",
                                            "key_columns": {"public.orders": ["id"]}})
    positions = tuple(PartitionPosition(p, WINDOW.start, "0")
                      for p in (f"{TRANSACTIONS}+0", f"{HEARTBEATS}+0"))
    source = build_source(spec)
    options = source.plan_options(None, T0 + timedelta(hours=1), None, positions)
    plan = WindowPlanFile(WINDOW, positions, (), spec, table, options=options)
    frame = spark.createDataFrame(list(rows_of(window_events, WINDOW)), changelog_schema())
    from airflow_cdc.spark_jobs.sources import spark_side

    return spark_side(build_source(spec, options)).check_window(spark, plan, frame)


def test_a_window_short_of_a_committed_transactions_events_is_refused_naming_it(spark, tmp_path, lake_table):
    first = in_transaction(change("c", 1, T0 + timedelta(minutes=1), 100), "tx-9", 1)

    with pytest.raises(IncompleteTransactionError, match="transaction tx-9: public.orders has 1 of its 2 events"):
        check(spark, tmp_path, lake_table, [first], [end("tx-9", T0 + timedelta(minutes=1), 2)])


def test_a_transactions_events_committed_by_an_earlier_window_count(spark, tmp_path, lake_table):
    first = in_transaction(change("c", 1, T0 + timedelta(minutes=1), 100), "tx-9", 1)
    second = in_transaction(change("c", 2, T0 + timedelta(minutes=1), 101), "tx-9", 2)
    from airflow_cdc.spark_jobs.changelog import changelog_schema

    spark.createDataFrame(list(rows_of([first], EARLIER)), changelog_schema()).writeTo(lake_table).append()

    counts = check(spark, tmp_path, lake_table, [second], [end("tx-9", T0 + timedelta(minutes=1), 2)])

    assert counts == {"transactions": 1, "transactions_checked": 1}


def test_a_transaction_committed_after_the_window_end_is_left_to_the_next_window(spark, tmp_path, lake_table):
    first = in_transaction(change("c", 1, T0 + timedelta(minutes=11), 100), "tx-10", 1)
    ends = [end("tx-9", T0 + timedelta(minutes=1), 0), end("tx-10", T0 + timedelta(minutes=11), 2)]

    counts = check(spark, tmp_path, lake_table, [first], ends)
    spec = source_spec("debezium", "shop", {"prefix": str(tmp_path), "topic_prefix": "pg"})
    position = PartitionPosition(f"{TRANSACTIONS}+0", WINDOW.start, "0")
    options = build_source(spec).plan_options(None, T0 + timedelta(hours=1), None, (position,))
    read = build_source(spec, options).read_partition(WINDOW, position)

    assert counts == {"transactions": 1, "transactions_checked": 1}
    assert read.outcome.resume_position == "1"  # tx-10's END is the next window's first line


def test_a_redelivered_event_does_not_make_up_for_a_missing_one(spark, tmp_path, lake_table):
    first = in_transaction(change("c", 1, T0 + timedelta(minutes=1), 100), "tx-9", 1)

    with pytest.raises(IncompleteTransactionError, match="1 of its 2 events"):
        check(spark, tmp_path, lake_table, [first, first], [end("tx-9", T0 + timedelta(minutes=1), 2)])
