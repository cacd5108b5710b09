"""Bigtable ReadChangeStream responses of any content end as records, never an error.

Responses are built as the service's protobuf messages (proto-plus wraps them as the client
hands them over), with every field drawn: chunk sizes and offsets that do not add up,
continuations of nothing, changes cut off by the next one, mutations this source does not
apply, timestamps no datetime can hold. :func:`stream_records` turns them into whole records
or :class:`MalformedChange` values (the reader dead-letters those whole); each data change's
change rows are checked to fit the changelog as its Spark task hands them over.
"""

from __future__ import annotations

from datetime import datetime, timezone

from google.cloud.bigtable_v2 import types as bt
from hypothesis import given
from hypothesis import strategies as st

from airflow_cdc.model import PartitionOutcome
from airflow_cdc.sources.base import PartitionRead
from airflow_cdc.sources.bigtable.mapping import change_rows
from airflow_cdc.sources.bigtable.records import (
    CloseStream,
    DataChange,
    Heartbeat,
    MalformedChange,
    stream_records,
)

from .strategies import ODD_TEXT
from .support import HALF, check_partition_read

Response = bt.ReadChangeStreamResponse
USER, GC, CONTINUATION = 1, 2, 3  # DataChange.Type numbers
STREAM, WINDOW_ID, PARTITION = "cells", "2025-01-06T08:00:00.000000Z/2025-01-06T09:00:00.000000Z", "p0"
WHEN = datetime(2025, 1, 6, 8, 1, tzinfo=timezone.utc)
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12) | st.sampled_from(
    [t for t in ODD_TEXT if t != "\ud800"])
# Seconds of a protobuf Timestamp: inside and far outside what a datetime holds.
seconds = st.integers(-62_135_596_800, 253_402_300_799) | st.integers(-(2**62), 2**62)


def _timestamp(message, draw) -> None:
    choice = draw(st.sampled_from(["unset", "valid", "any"]))
    if choice == "valid":
        message.seconds = int(WHEN.timestamp()) + draw(st.integers(0, 3600))
    elif choice == "any":
        message.seconds = draw(seconds)
        message.nanos = draw(st.integers(0, 999_999_999))


@st.composite
def mutation_chunks(draw, chunk):
    mutation = chunk.mutation
    kind = draw(st.sampled_from(["set_cell", "delete_from_column", "delete_from_family",
                                 "add_to_cell", "delete_from_row", "none"]))
    if kind == "set_cell":
        cell = mutation.set_cell
        cell.family_name = draw(texts)
        cell.column_qualifier = draw(st.binary(max_size=8))
        cell.timestamp_micros = draw(st.integers(-(2**63), 2**63 - 1))
        cell.value = draw(st.binary(max_size=16))
    elif kind == "delete_from_column":
        column = mutation.delete_from_column
        column.family_name = draw(texts)
        column.column_qualifier = draw(st.binary(max_size=8))
        column.time_range.start_timestamp_micros = draw(st.integers(-(2**63), 2**63 - 1))
        column.time_range.end_timestamp_micros = draw(st.integers(-(2**63), 2**63 - 1))
    elif kind == "delete_from_family":
        mutation.delete_from_family.family_name = draw(texts)
    elif kind == "add_to_cell":
        mutation.add_to_cell.family_name = draw(texts)
    elif kind == "delete_from_row":
        mutation.delete_from_row.SetInParent()
    if draw(st.booleans()):
        info = chunk.chunk_info
        info.chunked_value_size = draw(st.integers(0, 40))
        info.chunked_value_offset = draw(st.integers(0, 40))
        info.last_chunk = draw(st.booleans())
    return chunk


@st.composite
def responses(draw):
    raw = Response.pb()()
    kind = draw(st.sampled_from(["data_change"] * 4 + ["heartbeat", "close_stream"]))
    if kind == "data_change":
        change = raw.data_change
        change.type_ = draw(st.sampled_from([USER, GC, CONTINUATION, 0]))
        change.source_cluster_id = draw(texts)
        change.row_key = draw(st.binary(max_size=10))
        _timestamp(change.commit_timestamp, draw)
        change.tiebreaker = draw(st.integers(-(2**31), 2**31 - 1))
        for _ in range(draw(st.integers(0, 3))):
            draw(mutation_chunks(change.chunks.add()))
        change.done = draw(st.booleans())
        change.token = draw(texts)
        _timestamp(change.estimated_low_watermark, draw)
    elif kind == "heartbeat":
        beat = raw.heartbeat
        beat.continuation_token.partition.row_range.start_key_closed = draw(st.binary(max_size=6))
        beat.continuation_token.token = draw(texts)
        _timestamp(beat.estimated_low_watermark, draw)
    else:
        close = raw.close_stream
        close.status.code = draw(st.integers(0, 16))
        close.status.message = draw(texts)
        token = close.continuation_tokens.add()
        token.token = draw(texts)
        close.new_partitions.add().row_range.end_key_open = draw(st.binary(max_size=6))
    return Response.wrap(raw)


def good_change(row_key: bytes):
    return Response(data_change=Response.DataChange(
        type_=Response.DataChange.Type.USER, source_cluster_id="c1", row_key=row_key,
        commit_timestamp=WHEN, tiebreaker=7, done=True, token="t-good", estimated_low_watermark=WHEN,
        chunks=[Response.MutationChunk(mutation=bt.Mutation(set_cell=bt.Mutation.SetCell(
            family_name="cf", column_qualifier=b"q", timestamp_micros=1000, value=b"v")))]))


def check_records(records) -> list:
    rows, malformed = [], []
    for record in records:
        assert isinstance(record, (DataChange, MalformedChange, Heartbeat, CloseStream)), record
        if isinstance(record, DataChange) and not record.unsupported:
            rows += change_rows(record, "cells", STREAM, WINDOW_ID, PARTITION)
        if isinstance(record, MalformedChange):
            assert record.reason.startswith("row ") and record.raw
            malformed.append(record)
    read = PartitionRead(rows=tuple(rows), outcome=PartitionOutcome(PARTITION, False, WHEN))
    landed, dead = check_partition_read(STREAM, WINDOW_ID, read)
    assert dead == []
    return landed


@given(st.lists(responses(), max_size=8))
def test_any_responses_become_whole_records_or_malformed_changes_never_an_error(stream):
    check_records(stream_records(stream))


@HALF
@given(st.lists(responses(), max_size=6), st.lists(responses(), max_size=6))
def test_a_good_data_change_after_and_before_hostile_responses_becomes_its_change_rows(before, after):
    records = list(stream_records([*before, good_change(b"good#1"), *after]))

    landed = check_records(records)

    assert any(isinstance(r, DataChange) and r.row_key == b"good#1" and r.token == "t-good" for r in records)
    assert any(r["keys"]["row_key"] == "Z29vZCMx" for r in landed)  # base64 of good#1


def test_a_data_change_without_a_commit_timestamp_is_malformed_naming_the_row():
    raw = good_change(b"r#1")
    del raw.data_change.commit_timestamp

    [record] = list(stream_records([raw]))

    assert isinstance(record, MalformedChange) and record.token == "t-good"
    assert record.reason == "row b'r#1': the data change has no commit_timestamp of the years 1 to 9999"


def test_a_continuation_of_nothing_is_malformed_and_the_next_change_is_read():
    orphan = good_change(b"r#0")
    orphan.data_change.type_ = Response.DataChange.Type.CONTINUATION

    first, second = list(stream_records([orphan, good_change(b"r#1")]))

    assert isinstance(first, MalformedChange)
    assert first.reason == "row b'r#0': a CONTINUATION data change continues nothing"
    assert isinstance(second, DataChange) and second.row_key == b"r#1"
