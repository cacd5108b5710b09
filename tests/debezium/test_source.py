"""The Debezium source over a Kafka Connect sink folder: partitions, the files a window reads,
heartbeat evidence, and what each line becomes (hand-written PostgreSQL events, no schemas)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_cdc.model import Op, PartitionPosition, Window
from airflow_cdc.sources.registry import build_source, source_spec

T0 = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
ORDERS = "pg.public.orders"
HEARTBEATS = "__debezium-heartbeat.pg"


def millis(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def change(op: str, row_id: int, at: datetime, lsn: int, table: str = "orders", before=None):
    after = None if op == "d" else {"id": row_id, "amount": f"{row_id}.50"}
    return {"op": op, "before": before, "after": after, "ts_ms": millis(at) + 5,
            "source": {"connector": "postgresql", "name": "pg", "db": "shop", "schema": "public",
                       "table": table, "ts_ms": millis(at), "lsn": lsn, "txId": lsn // 10,
                       "sequence": json.dumps([str(lsn - 5), str(lsn)]), "snapshot": "false"}}


def write(sink: Path, topic: str, start: int, values) -> None:
    folder = sink / "topics" / topic / "partition=0"
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["null" if v is None else json.dumps(v) for v in values]
    (folder / f"{topic}+0+{start:010d}.json").write_text("\n".join(lines) + "\n")


@pytest.fixture
def sink(tmp_path):
    sink = tmp_path / "sink"
    write(sink, ORDERS, 0, [change("c", 1, T0 + timedelta(minutes=1), 100),
                            change("c", 2, T0 + timedelta(minutes=2), 200),
                            change("d", 1, T0 + timedelta(minutes=3), 300,
                                   before={"id": 1, "amount": "1.50"}),
                            None])
    write(sink, ORDERS, 4, [change("c", 3, T0 + timedelta(minutes=4), 400, table="audit")])
    write(sink, HEARTBEATS, 0, [{"ts_ms": millis(T0 + timedelta(minutes=12))}])
    return sink


def source_for(sink: Path, options=None):
    spec = source_spec("debezium", "shop", {
        "prefix": str(sink), "topic_prefix": "pg", "key_columns": {"public.orders": ["id"]},
        "settings": {"flush_lateness_seconds": 60},
    })
    return build_source(spec, options)


WINDOW = Window("shop", T0, T0 + timedelta(minutes=10))
FROM_START = (PartitionPosition(f"{ORDERS}+0", T0, "0"), PartitionPosition(f"{HEARTBEATS}+0", T0, "0"))


def test_every_topic_partition_the_sink_wrote_is_a_partition(sink):
    found = source_for(sink).discover(WINDOW, T0 + timedelta(hours=1), None)

    assert sorted(p.partition_id for p in found.partitions) == [f"{HEARTBEATS}+0", f"{ORDERS}+0"]


def test_the_window_waits_for_a_heartbeat_past_its_end_plus_the_flush_lateness(sink):
    source = source_for(sink)
    late = Window("shop", T0 + timedelta(minutes=10), T0 + timedelta(minutes=20))

    assert source.readiness(WINDOW, T0 + timedelta(hours=1), [], None).ready
    status = source.readiness(late, T0 + timedelta(hours=1), [], None)
    assert not status.ready and f"{HEARTBEATS}+0 holds the evidence back" in status.reason


def test_a_window_reads_its_planned_files_and_resumes_at_the_next_offset(sink):
    planner = source_for(sink)
    options = planner.plan_options(None, T0 + timedelta(hours=1), None, FROM_START)
    read = source_for(sink, options).read_partition(
        WINDOW, PartitionPosition(f"{ORDERS}+0", T0, "0"))

    assert [(r.source_table, r.op, r.keys["id"]) for r in read.rows] == [
        ("public_orders", Op.INSERT, 1), ("public_orders", Op.INSERT, 2),
        ("public_orders", Op.DELETE, 1)]
    assert read.counts["tombstones"] == 1
    assert read.outcome.resume_position == "5" and read.outcome.watermark == WINDOW.end


def test_events_of_a_table_without_key_columns_go_to_dead_letters_with_the_reason(sink):
    options = source_for(sink).plan_options(None, T0 + timedelta(hours=1), None, FROM_START)
    read = source_for(sink, options).read_partition(
        WINDOW, PartitionPosition(f"{ORDERS}+0", T0, "0"))

    assert [d.reason.split(":")[0] for d in read.dead_letters] == ["events for tables without a key"]


def test_files_written_after_the_plan_wait_for_the_next_window(sink):
    options = source_for(sink).plan_options(None, T0 + timedelta(hours=1), None, FROM_START)
    write(sink, ORDERS, 5, [change("u", 2, T0 + timedelta(minutes=11), 500)])

    read = source_for(sink, options).read_partition(
        WINDOW, PartitionPosition(f"{ORDERS}+0", T0, "0"))

    assert read.outcome.resume_position == "5"


def test_the_plan_names_the_exact_files_each_topic_partition_reads_from_its_resume_offset(sink):
    positions = (PartitionPosition(f"{ORDERS}+0", T0, "4"), PartitionPosition(f"{HEARTBEATS}+0", T0, "0"))

    options = source_for(sink).plan_options(None, T0 + timedelta(hours=1), None, positions)

    assert options["files"] == {
        f"{ORDERS}+0": [f"topics/{ORDERS}/partition=0/{ORDERS}+0+0000000004.json"],
        f"{HEARTBEATS}+0": [f"topics/{HEARTBEATS}/partition=0/{HEARTBEATS}+0+0000000000.json"],
    }


def test_a_re_plan_keeps_the_files_an_earlier_attempt_named(sink):
    first = source_for(sink).plan_options(None, T0 + timedelta(hours=1), None, FROM_START)
    write(sink, ORDERS, 5, [change("u", 2, T0 + timedelta(minutes=11), 500)])

    again = source_for(sink).plan_options(first, T0 + timedelta(hours=2), None, FROM_START)

    assert again == first
