"""Debezium sink-file lines of any content end as change rows, counted lines or dead letters.

Driven through :meth:`DebeziumSource.read_partition` over a real sink folder (the Kafka
Connect object-storage layout), the code a partition's Spark task runs, and the tuples it
hands to Spark checked to fit the changelog and dead-letter tables.
"""

from __future__ import annotations

import copy
import json
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from airflow_cdc.model import PartitionPosition, Window
from airflow_cdc.sources.debezium.source import LINE_COUNTS
from airflow_cdc.sources.registry import build_source, source_spec
from tests.debezium.test_envelope import mysql_source, pg_source, with_schema

from .strategies import hostile_lines, json_text
from .support import HALF, check_partition_read

T0 = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
WINDOW = Window("shop", T0, T0 + timedelta(minutes=10))
ORDERS, TRANSACTIONS, HEARTBEATS = "pg.public.orders", "pg.transaction", "__debezium-heartbeat.pg"
VALID = [
    {"before": None, "after": {"id": 1, "amount": "1.50", "tags": ["a"]}, "source": pg_source(),
     "op": "c", "ts_ms": 1_700_000_000_500,
     "transaction": {"id": "771:2400", "total_order": 1, "data_collection_order": 1}},
    {"before": {"id": 1, "amount": "1.50"}, "after": {"id": 1, "amount": "2.50"},
     "source": mysql_source(), "op": "u", "ts_ms": 1_700_000_000_500},
    {"before": {"id": 1}, "after": None, "source": pg_source(), "op": "d", "ts_ms": 1_700_000_000_500},
    {"before": None, "after": None, "source": pg_source(), "op": "t", "ts_ms": 1_700_000_000_500},
    {"status": "END", "id": "771:2400", "ts_ms": 1, "event_count": 2,
     "data_collections": [{"data_collection": "public.orders", "event_count": 2}]},
    {"ts_ms": 1_700_000_000_000},
    json.loads(with_schema(
        {"before": None, "after": {"id": 1, "amount": "AQ=="}, "source": pg_source(), "op": "c", "ts_ms": 1},
        [{"type": "int32", "optional": False, "field": "id"},
         {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
          "parameters": {"scale": "2"}, "field": "amount"}])),
]


def read_lines(topic: str, lines: list[str]):
    """One partition read of ``topic`` whose one sink file holds ``lines``."""
    with tempfile.TemporaryDirectory(prefix="hostile-debezium-") as sink:
        folder = Path(sink) / "topics" / topic / "partition=0"
        folder.mkdir(parents=True)
        # A lone surrogate cannot be UTF-8: its line reaches the source as bytes.
        (folder / f"{topic}+0+0000000000.json").write_bytes(
            ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass"))
        spec = source_spec("debezium", "shop", {
            "prefix": sink, "topic_prefix": "pg",
            "key_columns": {"public.orders": ["id"], "shop.orders": ["id"]},
            "settings": {"flush_lateness_seconds": 60}})
        position = PartitionPosition(f"{topic}+0", T0, "0")
        options = build_source(spec).plan_options(None, T0 + timedelta(hours=1), None, (position,))
        return build_source(spec, options).read_partition(WINDOW, position)


def fresh_change(index: int) -> dict:
    """A create of its own key at its own LSN: a change no other line repeats."""
    event = copy.deepcopy(VALID[0])
    event["after"]["id"] = 1000 + index
    event["source"].update(lsn=10_000 + index, sequence=json.dumps([str(9_000 + index), str(10_000 + index)]))
    return event


@given(st.sampled_from(VALID).flatmap(hostile_lines), st.sampled_from([ORDERS, TRANSACTIONS, HEARTBEATS]))
def test_any_line_becomes_a_change_row_a_counted_line_or_a_dead_letter(line, topic):
    read = read_lines(topic, [line])

    rows, dead = check_partition_read("shop", WINDOW.window_id, read)
    counted = sum(read.counts[name] for name in LINE_COUNTS if name not in ("events", "truncates"))
    records = line.split("\n")  # a newline inside it makes several records, each accounted for
    assert len(rows) + len(dead) + counted == len(records) == read.outcome.records
    assert {d["event_id"] for d in dead} <= {f"{topic}+0@{i}" for i in range(len(records))}


@HALF
@given(st.lists(st.sampled_from(VALID).flatmap(hostile_lines), min_size=1, max_size=6), st.randoms())
def test_every_good_change_among_hostile_lines_becomes_a_change_row(hostile, random):
    good = [fresh_change(i) for i in range(3)]
    lines = [json_text(e) for e in good] + hostile
    random.shuffle(lines)

    read = read_lines(ORDERS, lines)

    rows, _ = check_partition_read("shop", WINDOW.window_id, read)
    landed = {r["keys"]["id"] for r in rows if r["op"] == "INSERT"}
    assert {str(e["after"]["id"]) for e in good} <= landed
    assert read.outcome.resume_position == str(len("\n".join(lines).split("\n")))


def test_a_heartbeat_beyond_year_9999_is_a_dead_letter_and_no_evidence():
    beyond = json.dumps({"ts_ms": 10**20})
    good = json.dumps({"ts_ms": int((T0 + timedelta(minutes=12)).timestamp() * 1000)})

    read = read_lines(HEARTBEATS, [good, beyond])

    _, dead = check_partition_read("shop", WINDOW.window_id, read)
    assert read.counts["heartbeats"] == 1
    assert [d["reason"] for d in dead] == [f"extract: heartbeat ts_ms {10**20} is not an instant in the years 1 to 9999"]


def test_a_schema_naming_a_column_type_with_a_list_is_a_dead_letter_naming_the_column():
    line = json.loads(json_text(VALID[6]))
    line["schema"]["fields"][1]["fields"][0]["type"] = ["int32"]

    _, [dead] = check_partition_read("shop", WINDOW.window_id, read_lines(ORDERS, [json.dumps(line)]))

    assert dead["reason"] == ("extract: table 'public.orders': column 'id': schema type ['int32'] is "
                              "not text (Kafka Connect names types with strings)")

