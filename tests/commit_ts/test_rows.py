"""Rows read at a window's end -> change rows; which reads a window makes per table."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from google.cloud.spanner_v1.data_types import JsonObject

from airflow_cdc.model import PartitionPosition, Window
from airflow_cdc.sources.base import changelog_tuple
from airflow_cdc.spark_jobs.sources.read_frame import KIND, bad_row_dead_letter
from airflow_cdc.sources.spanner_commit_ts.reads import KEYS, ROWS, plan_steps
from airflow_cdc.spark_jobs.sources.spanner_commit_ts import table_batches
from airflow_cdc.sources.spanner_commit_ts.records import reconcile_delete, row_change
from airflow_cdc.sources.spanner_commit_ts.schema import CHANGELOG, PLAIN, TablePlan

T0 = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
W = Window("shop", T0, T0 + timedelta(minutes=20))
ORDERS = TablePlan("Orders", "LastUpdateTime", PLAIN,
                   (("OrderId", "INT64"), ("Details", "JSON"), ("Total", "NUMERIC"),
                    ("Deleted", "BOOL"), ("LastUpdateTime", "TIMESTAMP")),
                   ("OrderId",), "Deleted", "BOOL")
HISTORY = TablePlan("DocumentHistory", "Ts", CHANGELOG,
                    (("DocumentId", "INT64"), ("Ts", "TIMESTAMP"), ("Delta", "STRING")),
                    ("DocumentId", "Ts"))


def change(plan, values):
    return row_change(plan, values, stream="shop", window_id=W.window_id, read_at=W.end)


def test_plain_row_is_a_full_update_with_json_as_text_and_exact_numbers():
    at = T0 + timedelta(minutes=3)
    row = change(ORDERS, (7, JsonObject({"b": 1}), Decimal("1.50"), False, at))
    assert (row.op, row.image, row.keys, row.commit_ts) == ("UPDATE", "FULL", {"OrderId": 7}, at)
    assert row.new_values["Details"] == '{"b":1}' and row.new_values["Total"] == Decimal("1.50")
    assert row.event_id == 'Orders/2025-01-06T08:03:00.000000Z/{"OrderId":"7"}'


def test_soft_deleted_row_is_a_delete_carrying_the_row():
    row = change(ORDERS, (7, None, None, True, T0 + timedelta(minutes=3)))
    assert row.op == "DELETE" and row.new_values is None and row.old_values["Deleted"] is True


def test_changelog_table_rows_are_inserts():
    row = change(HISTORY, (3, T0 + timedelta(minutes=1), "+a"))
    assert row.op == "INSERT" and row.keys == {"DocumentId": 3, "Ts": T0 + timedelta(minutes=1)}


def test_order_per_key_is_commit_timestamp_then_reconciliation_after_rows_at_the_same_end():
    early = change(ORDERS, (7, None, None, False, T0 + timedelta(minutes=1)))
    late = change(ORDERS, (7, None, None, False, W.end - timedelta(microseconds=1)))
    gone = reconcile_delete(ORDERS, {"OrderId": 7}, stream="shop", window_id=W.window_id,
                            read_at=W.end)
    assert early.ordering_key < late.ordering_key < gone.ordering_key
    same_instant_other_key = change(ORDERS, (8, None, None, False, T0 + timedelta(minutes=1)))
    assert same_instant_other_key.ordering_key != early.ordering_key


def test_first_window_reads_whole_tables_then_from_the_watermark():
    first = plan_steps(W, [PartitionPosition("Orders", T0)], {"Orders": ORDERS},
                       reconcile_every=0, initial_load=True)[0]
    assert [(r.mode, r.start, r.read_at) for r in first.reads] == [(ROWS, None, W.end)]
    later = plan_steps(W, [PartitionPosition("Orders", T0, json.dumps({"windows_since_reconcile": 0}))],
                       {"Orders": ORDERS}, reconcile_every=0, initial_load=True)[0]
    assert [(r.mode, r.start) for r in later.reads] == [(ROWS, T0)]
    assert later.watermark == W.end


def test_reconciliation_reads_keys_every_n_windows_but_never_for_changelog_tables():
    position = PartitionPosition("Orders", T0, json.dumps({"windows_since_reconcile": 2}))
    due = plan_steps(W, [position], {"Orders": ORDERS}, reconcile_every=3, initial_load=True)[0]
    assert [r.mode for r in due.reads] == [ROWS, KEYS] and due.windows_since_reconcile == 0
    history = plan_steps(W, [PartitionPosition("Orders", T0, position.resume_position)],
                         {"Orders": HISTORY}, reconcile_every=3, initial_load=True)[0]
    assert [r.mode for r in history.reads] == [ROWS]


def test_reseed_reads_whole_tables_at_its_instant_and_moves_the_watermark_past_the_window():
    at = W.end + timedelta(hours=2)
    positions = [PartitionPosition("Orders", T0, json.dumps({"windows_since_reconcile": 1})),
                 PartitionPosition("reseed:x", T0, at.isoformat())]
    step = plan_steps(W, positions, {"Orders": ORDERS}, reconcile_every=0, initial_load=True)[0]
    assert [(r.mode, r.start, r.read_at) for r in step.reads] == [(ROWS, None, at), (KEYS, None, at)]
    assert step.watermark == at
    after = plan_steps(Window("shop", W.end, W.end + timedelta(minutes=20)),
                       [PartitionPosition("Orders", at, json.dumps({"windows_since_reconcile": 0}))],
                       {"Orders": ORDERS}, reconcile_every=0, initial_load=True)[0]
    assert after.reads == [] and after.watermark == at


def test_a_row_arrow_cannot_hold_is_counted_as_a_dead_letter_of_its_table_and_the_others_go_on():
    rows = [changelog_tuple(change(HISTORY, (n, T0 + timedelta(minutes=1), text)))
            for n, text in ((1, "+a"), (2, "+\udc80"), (3, "+c"))]
    dead, counted = [], Counter()
    batches = list(table_batches("History", rows, dead, lambda row, error: bad_row_dead_letter(
        "shop", W.window_id, row, error), counted))
    assert [b.column(KIND).to_pylist() for b in batches] == [["row", "row"]]
    assert counted == {("row", "History"): 2, ("dead", "History"): 1}
    assert len(dead) == 1 and "cannot be handed to Spark" in dead[0][-1]
