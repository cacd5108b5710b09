"""Whole records out of ``ReadChangeStream`` responses, and values decoded for the rows table."""

from __future__ import annotations

import struct
from datetime import datetime, timezone

import pytest
from google.cloud.bigtable_v2 import types as bt

from airflow_cdc.sources.bigtable.types import decode_columns, decode_value
from airflow_cdc.sources.bigtable.records import DataChange, MalformedChange, stream_records

WHEN = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)


def change(chunks, type_=bt.ReadChangeStreamResponse.DataChange.Type.USER, done=True):
    return bt.ReadChangeStreamResponse(data_change=bt.ReadChangeStreamResponse.DataChange(
        type_=type_, source_cluster_id="c1", row_key=b"row#1", commit_timestamp=WHEN,
        tiebreaker=7, chunks=chunks, done=done, token="t1", estimated_low_watermark=WHEN))


def set_chunk(value: bytes, size=0, offset=0, last=False):
    chunk = bt.ReadChangeStreamResponse.MutationChunk(mutation=bt.Mutation(
        set_cell=bt.Mutation.SetCell(family_name="cf", column_qualifier=b"q",
                                     timestamp_micros=1000, value=value)))
    if size:
        chunk.chunk_info = bt.ReadChangeStreamResponse.MutationChunk.ChunkInfo(
            chunked_value_size=size, chunked_value_offset=offset, last_chunk=last)
    return chunk


def test_a_value_in_chunks_across_a_continuation_is_one_set_cell_with_the_whole_value():
    continuation = bt.ReadChangeStreamResponse.DataChange.Type.CONTINUATION
    responses = [
        change([set_chunk(b"abc", size=6, offset=0)], done=False),
        change([set_chunk(b"def", size=6, offset=3, last=True)], type_=continuation),
    ]

    [record] = list(stream_records(responses))

    assert isinstance(record, DataChange)
    assert [(m.kind, m.value) for m in record.mutations] == [("SET_CELL", b"abcdef")]
    assert record.chunked == 1 and record.token == "t1"


def test_a_chunk_at_the_wrong_offset_makes_the_record_malformed_naming_the_row():
    responses = [change([set_chunk(b"abc", size=6, offset=0), set_chunk(b"def", size=6, offset=4,
                                                                        last=True)])]

    [record] = list(stream_records(responses))

    assert isinstance(record, MalformedChange) and record.token == "t1"
    assert record.reason == "row b'row#1': chunk at offset 4 after 3 bytes"


def test_a_mutation_the_source_does_not_apply_marks_the_record_for_the_dead_letter_table():
    add = bt.ReadChangeStreamResponse.MutationChunk(mutation=bt.Mutation(
        add_to_cell=bt.Mutation.AddToCell(family_name="agg")))

    [record] = list(stream_records([change([add])]))

    assert record.unsupported == ["add_to_cell"]


def test_values_decode_as_bigtable_writes_them():
    assert decode_value(struct.pack(">q", -5), "int64") == -5
    assert decode_value(struct.pack(">d", 2.5), "double") == 2.5
    assert decode_value(b"\x01", "bool") is True
    assert decode_value("é".encode(), "string") == "é"


def test_a_value_of_the_wrong_width_does_not_decode():
    with pytest.raises(ValueError, match="3 bytes, not 8"):
        decode_value(b"abc", "int64")


def test_a_decode_entry_without_a_qualifier_is_refused_naming_it():
    with pytest.raises(ValueError, match="targets.decode entry 'cf' is not 'family:qualifier'"):
        decode_columns({"cf": "int64"})


def test_decoded_columns_are_named_after_family_and_qualifier():
    assert decode_columns({"cf:price-eur": "double"}) == [("cf_price_eur", "cf", b"price-eur", "double")]
