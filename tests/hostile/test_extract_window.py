"""A real extract job over a window whose files mix good and hostile events lands the good ones.

The Datastream extract (``spark_jobs/extract.py`` on the suite's Spark session, reading real
files) is the cheapest real window: its JSON lines here carry one event of each kind of
hostility the property tests draw from, and each ends in the dead-letter table with its
reason while every good event reaches the changelog in the window's one commit.
"""

from __future__ import annotations

import copy
import json
from decimal import Decimal

from airflow_cdc.sources.datastream.writer import _json_value, write_json_events
from tests.datastream.support import STREAM, mysql, run_extract, window

from .strategies import json_text


def hostile(good: dict, **changes) -> str:
    event = copy.deepcopy(_json_value(good))
    for path, value in changes.items():
        target = event
        *parents, last = path.split("__")
        for part in parents:
            target = target[part]
        target[last] = value
    return json_text(event)


def test_an_extract_window_with_hostile_lines_lands_every_good_event_and_dead_letters_the_rest(
        spark, tmp_path):
    namespace = "hostile_extract"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{namespace}")
    good = [mysql({"id": i, "name": f"n{i}", "price": Decimal("2.50"), "odd": "\u202e😀\x00"}, pos=10 * i)
            for i in range(1, 5)]
    template = mysql({"id": 99, "name": "x"}, pos=990, uuid="hostile")
    lines = [
        json_text(_json_value(good[0]))[:57],                                   # truncated
        "[" * 5000 + "]" * 5000,                                                # nested too deep
        hostile(template, source_metadata__log_position=10**30),               # beyond 64 bits
        hostile(template, read_method=["mysql-cdc-binlog"]),                   # wrong type
        hostile(template, source_timestamp="10000-01-01T00:00:00Z"),           # beyond year 9999
        hostile(template, source_metadata__primary_keys=True),                 # not a list
        hostile(template, payload=None),                                       # missing payload
        hostile(template, payload__name="\ud800"),                            # lone surrogate
        "\x00\xff binary junk",
    ]
    events = write_json_events(tmp_path / "events.jsonl", good, lines)

    run = run_extract(spark, namespace, tmp_path, window(0), [events])

    changelog = spark.table(f"lake.{namespace}.{STREAM}_changelog")
    landed = sorted((r.event_id, r.new_values["odd"]) for r in changelog.collect())
    assert landed == sorted((e["uuid"], "\u202e😀\x00") for e in good)
    dead = spark.table(f"lake.{namespace}.{STREAM}_dead_letters").collect()
    assert run.result["counts"]["dead_letters"] == len(dead) == len(lines)
    reasons = sorted(d.reason for d in dead)
    assert reasons == sorted([
        "extract: line is not a JSON object",
        "extract: line nests arrays or objects deeper than the JSON parser reads",
        f"extract: log_position {10**30} does not fit in a signed 64-bit integer: no source "
        f"position is that large",
        "extract: read_method ['mysql-cdc-binlog'] is a list, not text naming the source (seed "
        "001, generic metadata)",
        "extract: source_timestamp '10000-01-01T00:00:00Z' is neither epoch milliseconds nor "
        "ISO-8601 text of an instant in the years 1 to 9999",
        "extract: source_metadata.primary_keys True of event hostile is a bool, not a list of "
        "column names",
        "extract: event hostile has no payload object",
        "extract: line holds a lone surrogate (a \\udXXX escape without its pair): no UTF-8 "
        "text can hold it, and the changelog would keep U+FFFD in its place",
        "extract: line is not a JSON object",
    ])
    raws = {json.loads(d.source_metadata_json)["raw"] for d in dead}
    assert set(lines) <= raws  # each line kept whole
