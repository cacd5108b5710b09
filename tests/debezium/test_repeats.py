"""At-least-once delivery: an event read twice (a restart's copy in the same window as its
original, or in a later one) lands once in the changelog; rows without an event id are kept."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from airflow_cdc.model import CHANGELOG_NAMES, change_row_to_record
from airflow_cdc.sources.debezium.records import change_of, parse_line
from airflow_cdc.spark_jobs.sources.dedup import deduplicated, drop_seen_event_ids, seen_event_ids

from .test_source import ORDERS, T0, change

STREAM = "shop"
EVENT_ID = CHANGELOG_NAMES.index("event_id")
PARTITION_ID = CHANGELOG_NAMES.index("partition_id")


def records(*events, window_id="w1", event_id=None):
    for event in events:
        row = change_of(parse_line(json.dumps(event)), stream=STREAM, window_id=window_id,
                        key_columns={"public.orders": ["id"]}, partition_id=f"{ORDERS}+0")
        record = change_row_to_record(row)
        if event_id is not None:
            record["event_id"] = event_id
        yield tuple(record.values())


def frame_of(spark, rows):
    from airflow_cdc.spark_jobs.changelog import changelog_schema

    return spark.createDataFrame(list(rows), changelog_schema())


def test_an_event_read_twice_in_one_window_is_kept_once(spark):
    event = change("c", 1, T0 + timedelta(minutes=1), 100)
    other = change("c", 2, T0 + timedelta(minutes=1), 200)
    frame = frame_of(spark, records(event, event, other))

    kept = drop_seen_event_ids(spark, "lake.dbz_repeats.none", STREAM, frame)

    assert sorted(r.event_id for r in kept.collect()) == sorted({r[EVENT_ID] for r in records(event, other)})


def test_a_first_window_without_repeats_is_the_frame_read(spark):
    # The extract caches a frame other than its read's (which is already kept): the same
    # rows cached twice when nothing was dropped.
    frame = frame_of(spark, records(change("c", 1, T0 + timedelta(minutes=1), 100),
                                    change("c", 2, T0 + timedelta(minutes=1), 200)))

    assert drop_seen_event_ids(spark, "lake.dbz_repeats.none", STREAM, frame) is frame


def test_rows_without_an_event_id_are_all_kept(spark):
    event = change("c", 1, T0 + timedelta(minutes=1), 100)
    rows = [tuple(None if i == EVENT_ID else v for i, v in enumerate(r)) for r in records(event, event)]

    kept = drop_seen_event_ids(spark, "lake.dbz_repeats.none", STREAM, frame_of(spark, rows))

    assert kept.count() == 2


def committed_changelog(spark, *events) -> str:
    """A changelog table holding ``events`` as an earlier window's rows."""
    table = "lake.dbz_repeats.changelog"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.dbz_repeats")
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    frame_of(spark, records(*events, window_id="w0")).writeTo(table).using("iceberg").create()
    return table


@pytest.mark.parametrize("repeated_ids_collected", [10_000, 0], ids=["ids-collected", "too-many-ids"])
def test_an_event_an_earlier_window_committed_is_dropped(spark, monkeypatch, repeated_ids_collected):
    import airflow_cdc.spark_jobs.sources.dedup as dedup

    monkeypatch.setattr(dedup, "REPEATED_IDS_COLLECTED", repeated_ids_collected)
    first = change("c", 1, T0 + timedelta(minutes=1), 100)
    second = change("c", 2, T0 + timedelta(minutes=2), 200)
    table = committed_changelog(spark, first)

    kept = drop_seen_event_ids(spark, table, STREAM, frame_of(spark, records(first, second)))

    assert [r.event_id for r in kept.collect()] == [next(records(second))[EVENT_ID]]


def test_a_later_window_without_events_the_changelog_holds_is_the_frame_read(spark):
    table = committed_changelog(spark, change("c", 1, T0 + timedelta(minutes=1), 100))
    frame = frame_of(spark, records(change("c", 2, T0 + timedelta(minutes=1), 200)))

    assert drop_seen_event_ids(spark, table, STREAM, frame) is frame


@pytest.mark.parametrize("repeated_ids_collected", [10_000, 0], ids=["ids-collected", "too-many-ids"])
def test_of_an_event_read_in_two_partitions_the_first_partitions_copy_is_kept(spark, monkeypatch, repeated_ids_collected):
    import airflow_cdc.spark_jobs.sources.dedup as dedup

    monkeypatch.setattr(dedup, "REPEATED_IDS_COLLECTED", repeated_ids_collected)
    event = change("c", 1, T0 + timedelta(minutes=1), 100)
    other = change("c", 2, T0 + timedelta(minutes=1), 200)
    [row] = records(event)
    copies = [tuple(f"{ORDERS}+{p}" if i == PARTITION_ID else v for i, v in enumerate(row)) for p in (2, 1, 3)]

    kept = drop_seen_event_ids(spark, "lake.dbz_repeats.none", STREAM, frame_of(spark, [*copies, *records(other)]))

    assert sorted((r.event_id, r.partition_id) for r in kept.collect()) == sorted(
        [(row[EVENT_ID], f"{ORDERS}+1"), (next(records(other))[EVENT_ID], f"{ORDERS}+0")])


@pytest.mark.parametrize("repeated_ids_collected", [10_000, 1, 0], ids=["ids-collected", "some-ids", "too-many-ids"])
def test_the_listed_ids_strategy_keeps_the_rows_the_rule_keeps(spark, monkeypatch, repeated_ids_collected):
    """The plain rule (first copy per event id, none the changelog holds) and the strategy
    that ranks and drops only the rows of listed ids keep the same rows."""
    import airflow_cdc.spark_jobs.sources.dedup as dedup

    monkeypatch.setattr(dedup, "REPEATED_IDS_COLLECTED", repeated_ids_collected)
    committed = change("c", 1, T0 + timedelta(minutes=1), 100)
    repeated = change("c", 2, T0 + timedelta(minutes=2), 200)
    twice = change("u", 3, T0 + timedelta(minutes=2), 300)
    table = committed_changelog(spark, committed)
    [row] = records(repeated)
    copies = [tuple(f"{ORDERS}+{p}" if i == PARTITION_ID else v for i, v in enumerate(row)) for p in (2, 1)]
    keyless = [tuple(None if i == EVENT_ID else v for i, v in enumerate(r))
               for r in records(change("c", 4, T0 + timedelta(minutes=3), 400))] * 2
    frame = frame_of(spark, [*records(committed, twice, twice), *copies, *keyless])

    def rows(kept):
        return sorted((tuple(r) for r in kept.select("event_id", "partition_id", "ordering_key").collect()),
                      key=repr)

    plain = deduplicated(frame, seen_event_ids(spark, table, STREAM, frame))
    assert rows(drop_seen_event_ids(spark, table, STREAM, frame)) == rows(plain)
    assert len(rows(plain)) == 4  # twice once, repeated once, the two rows without an id
