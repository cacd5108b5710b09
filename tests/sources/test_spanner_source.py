"""The Spanner adapter against the emulator through the real google-cloud-spanner client."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_cdc.model import Image, Op, PartitionPosition, Window
from airflow_cdc.pipeline.partition_lineage import WindowLineage, check_transactions, run_rounds
from airflow_cdc.sources.spanner.query import GOOGLE_SQL, INITIAL_PARTITION, POSTGRESQL, build_query
from airflow_cdc.sources.spanner.reader import SpannerConnection
from airflow_cdc.sources.spanner.source import SpannerChangeStreamSource
from airflow_cdc.model import InvalidIdentifierError


def source_for(emulator, history, dialect=GOOGLE_SQL, database="db"):
    connection = SpannerConnection(
        project="p", instance="i", database=database, emulator_host=emulator.emulator_host
    )
    return SpannerChangeStreamSource(
        connection, history.stream_name, dialect=dialect, heartbeat_milliseconds=1000,
        stream_id="s",
    )


def read_window(source, window, positions, pending=()):
    lineage = WindowLineage(positions, pending)
    rows = []

    def read_round(batch):
        results = []
        for position in batch:
            read = source.read_partition(window, position)
            rows.extend(read.rows)
            results.append((read.outcome, read.transactions))
        return results

    outcomes, tallies = run_rounds(lineage, read_round)
    return rows, outcomes, tallies, lineage


def first_window(history, minutes=20):
    start = history.created_at
    return Window("s", start, start + timedelta(minutes=minutes))


def test_stream_name_is_validated_before_any_sql_is_built():
    with pytest.raises(InvalidIdentifierError, match="change stream name 'a;b' is not an identifier"):
        build_query(GOOGLE_SQL, "a;b", first_window_start(), None, None, 1000)


def first_window_start():
    from datetime import datetime, timezone

    return datetime(2024, 1, 1, tzinfo=timezone.utc)


def test_queries_bind_every_value_as_a_parameter():
    query = build_query(POSTGRESQL, "Orders", first_window_start(), None, "tok", 1000)
    assert query.sql == 'SELECT * FROM "spanner"."read_json_Orders" ($1, $2, $3, $4, null)'
    assert query.params == {"p1": first_window_start(), "p2": None, "p3": "tok", "p4": 1000}
    google = build_query(GOOGLE_SQL, "Orders", first_window_start(), None, "Zq9-token", 1000)
    assert "@partition_token" in google.sql and "Zq9" not in google.sql
    assert google.params["partition_token"] == "Zq9-token"


def test_initial_query_finishes_with_the_root_partitions_as_children(emulator, history):
    window = first_window(history)
    source = source_for(emulator, history)
    initial = source.initial_positions(window)[0]
    read = source.read_partition(window, initial)
    assert read.outcome.finished and read.rows == ()
    roots = sorted(c.partition_id for c in read.outcome.children)
    assert roots == sorted(p.token for p in history.partitions_live_at(window.start))
    assert all(c.parent_ids == (INITIAL_PARTITION,) for c in read.outcome.children)


def test_one_window_reads_every_change_committed_inside_it_exactly_once(emulator, history):
    window = first_window(history)
    source = source_for(emulator, history)
    rows, outcomes, tallies, _ = read_window(source, window, source.initial_positions(window))
    expected = sum(
        len(txn.changes)
        for txn in history.transactions
        if window.start <= txn.commit_timestamp < window.end
    )
    assert len(rows) == expected
    assert len({r.event_id for r in rows}) == len(rows)
    assert check_transactions(tallies)


def test_both_dialects_give_identical_change_rows(emulator, history):
    window = first_window(history, minutes=10)
    google = read_window(
        source_for(emulator, history), window, [source_for(emulator, history).initial_positions(window)[0]]
    )[0]
    postgres_source = source_for(emulator, history, POSTGRESQL, database="pgdb")
    postgres = read_window(postgres_source, window, postgres_source.initial_positions(window))[0]
    assert google and sorted(google, key=lambda r: r.event_id) == sorted(
        postgres, key=lambda r: r.event_id
    )


def test_partial_capture_types_give_partial_update_images(emulator, history):
    window = Window("s", history.created_at, history.end)
    source = source_for(emulator, history)
    rows = read_window(source, window, source.initial_positions(window))[0]
    images = {
        (r.source_metadata["value_capture_type"], r.op, r.image) for r in rows if r.op is Op.UPDATE
    }
    assert ("NEW_VALUES", Op.UPDATE, Image.PARTIAL) in images
    assert ("OLD_AND_NEW_VALUES", Op.UPDATE, Image.PARTIAL) in images
    assert ("NEW_ROW", Op.UPDATE, Image.FULL) in images
    assert ("NEW_ROW_AND_OLD_VALUES", Op.UPDATE, Image.FULL) in images


def test_a_changes_ordering_keys_follow_commit_order_for_each_key(emulator, history):
    window = Window("s", history.created_at, history.end)
    source = source_for(emulator, history)
    rows = read_window(source, window, source.initial_positions(window))[0]
    by_key = {}
    for row in sorted(rows, key=lambda r: r.ordering_key):
        by_key.setdefault((row.source_table, tuple(sorted(row.keys.items()))), []).append(row)
    for changes in by_key.values():
        stamps = [r.commit_ts for r in changes]
        assert stamps == sorted(stamps)


def test_rejected_heartbeat_is_reported_with_the_allowed_range(emulator, history):
    with pytest.raises(ValueError, match="heartbeat_milliseconds 999 is out of range"):
        SpannerChangeStreamSource(
            SpannerConnection("p", "i", "db", emulator_host=emulator.emulator_host),
            history.stream_name,
            heartbeat_milliseconds=999,
        )


def test_records_decoded_from_protobuf_values_equal_those_parsed_from_the_clients_values(emulator, history):
    """The reader decodes GoogleSQL rows itself (``lazy_decode``, ``parse_protobuf_row``): on
    every row of every partition of a window, the records equal the client-decoded path's."""
    from airflow_cdc.sources.spanner.records import (
        DataChangeRecord,
        parse_protobuf_row,
        parse_result_row,
    )

    window = first_window(history, minutes=60)
    database = source_for(emulator, history).connection.open_database()
    tokens = [INITIAL_PARTITION] + [p.token for p in history.partitions_live_at(window.start)]
    data_changes = 0
    for token in tokens:
        query = build_query(GOOGLE_SQL, history.stream_name, window.start, window.inclusive_end, token, 1000)
        with database.snapshot() as snapshot:
            results = snapshot.execute_sql(query.sql, params=query.params,
                                           param_types=query.param_types, lazy_decode=True)
            for row in results:
                decoded = parse_protobuf_row(row, results, GOOGLE_SQL)
                assert decoded == parse_result_row(results.decode_row(row), results.fields, GOOGLE_SQL)
                data_changes += sum(isinstance(r, DataChangeRecord) for r in decoded)
    assert data_changes > 0


def test_a_read_tasks_tuples_made_while_reading_equal_those_of_the_partitions_read(emulator, history):
    """``read_partition_tuples`` makes the changelog tuples as the stream delivers them: on
    every partition of a window, the same tuples, dead letters, outcome and tallies as
    ``read_tuples`` of ``read_partition``."""
    from airflow_cdc.sources.base import read_tuples

    window = first_window(history, minutes=60)
    source = source_for(emulator, history)
    positions = [source.initial_positions(window)[0]] + [
        PartitionPosition(p.token, window.start) for p in history.partitions_live_at(window.start)]
    tuples = 0
    for position in positions:
        read = source.read_partition(window, position)
        made, rows, dead = source.read_partition_tuples(window, position)
        assert (rows, dead) == read_tuples("s", window.window_id, read)
        assert (made.outcome, made.transactions, made.counts) == (read.outcome, read.transactions, read.counts)
        tuples += len(rows)
    assert tuples > 0


def test_a_source_checks_its_settings_without_loading_the_client_library():
    # The extract job's driver makes the source but never reads: loading google-cloud-spanner
    # there (about 1.5 s) delayed its read workers. A fresh interpreter, so other tests'
    # imports do not count.
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from airflow_cdc.sources.spanner.reader import SpannerConnection\n"
        "from airflow_cdc.sources.spanner.source import SpannerChangeStreamSource\n"
        "connection = SpannerConnection(project='p', instance='i', database='d')\n"
        "SpannerChangeStreamSource(connection, 'Orders', heartbeat_milliseconds=1000)\n"
        "try:\n"
        "    SpannerChangeStreamSource(connection, 'Orders', heartbeat_milliseconds=999)\n"
        "except ValueError as error:\n"
        "    print(error)\n"
        "print(sorted(m for m in sys.modules if m.startswith('google.cloud.spanner')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert "heartbeat_milliseconds 999 is out of range" in out
    assert out.splitlines()[-1] == "[]"
