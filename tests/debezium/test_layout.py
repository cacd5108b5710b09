"""The Kafka Connect sink layout, read: parsing file paths, listing, choosing a window's files,
reading lines with their offsets."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from airflow_cdc.sources.debezium.layout import (
    SinkFile,
    SinkLayoutError,
    files_from,
    list_sink_files,
    local_lister,
    local_reader,
    parse_partition_id,
    parse_sink_path,
    partition_id,
    read_sink_file,
)

TOPIC = "pg.public.orders"


def write(root: Path, relative: str, lines: list[str], gz: bool = False) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def sink_path(topic: str, partition: int, offset: int, suffix: str = ".json") -> str:
    return f"topics/{topic}/partition={partition}/{topic}+{partition}+{offset:010d}{suffix}"


def files(*offsets: int, partition: int = 0) -> list[SinkFile]:
    return [SinkFile(TOPIC, partition, o, f"/x/{sink_path(TOPIC, partition, o)}") for o in offsets]


# --- paths ---------------------------------------------------------------------------------------
def test_a_sink_path_gives_topic_partition_and_start_offset():
    parsed = parse_sink_path(f"gs://bucket/cdc/{sink_path(TOPIC, 2, 120)}")

    assert (parsed.topic, parsed.partition, parsed.start_offset, parsed.compressed) == (TOPIC, 2, 120, False)


def test_a_gzip_sink_path_is_compressed():
    assert parse_sink_path(f"/data/{sink_path(TOPIC, 0, 0, '.json.gz')}").compressed


@pytest.mark.parametrize(
    "path",
    [
        f"/data/topics/{TOPIC}/partition=0/{TOPIC}+0+12.avro",
        f"/data/topics/{TOPIC}/partition=1/{TOPIC}+0+12.json",  # folder partition differs
        f"/data/topics/other/partition=0/{TOPIC}+0+12.json",  # folder topic differs
        f"/data/topics/{TOPIC}/{TOPIC}+0+12.json",  # no partition folder
        f"/data/topics/{TOPIC}/partition=0/README",
    ],
)
def test_a_path_off_the_layout_is_not_a_sink_file(path):
    assert parse_sink_path(path) is None


def test_a_partition_id_is_topic_plus_partition_and_reads_back():
    assert partition_id(TOPIC, 3) == "pg.public.orders+3"
    assert parse_partition_id("pg.public.orders+3") == (TOPIC, 3)
    with pytest.raises(SinkLayoutError, match="<topic>\\+<partition>"):
        parse_partition_id("pg.public.orders")


# --- listing -------------------------------------------------------------------------------------
def test_listing_a_folder_finds_the_files_in_offset_order_and_reports_strangers(tmp_path):
    write(tmp_path, sink_path(TOPIC, 0, 100), ["null"])
    write(tmp_path, sink_path(TOPIC, 0, 0), ["null"])
    write(tmp_path, sink_path("__debezium-heartbeat.pg", 0, 0, ".json.gz"), ['{"ts_ms":1}'], gz=True)
    write(tmp_path, f"topics/{TOPIC}/partition=0/notes.txt", ["x"])
    write(tmp_path, "_offsets/pg.public.orders/partition=0.json", ["{}"])  # not under topics/

    listing = list_sink_files(local_lister, str(tmp_path))

    assert [(f.topic, f.start_offset) for f in listing.files] == [
        ("__debezium-heartbeat.pg", 0), (TOPIC, 0), (TOPIC, 100),
    ]
    assert listing.unmatched == (f"{tmp_path}/topics/{TOPIC}/partition=0/notes.txt",)
    assert listing.topic_partitions() == [("__debezium-heartbeat.pg", 0), (TOPIC, 0)]


def test_listing_keeps_a_file_url_prefix(tmp_path):
    write(tmp_path, sink_path(TOPIC, 0, 0), ["null"])

    listing = list_sink_files(local_lister, f"file://{tmp_path}")

    assert [f.path for f in listing.files] == [f"file://{tmp_path}/{sink_path(TOPIC, 0, 0)}"]
    assert listing.unmatched == ()


def test_listing_a_missing_folder_finds_nothing(tmp_path):
    assert list_sink_files(local_lister, str(tmp_path / "absent")).files == ()


def test_an_injected_lister_serves_object_names():
    names = {"gs://b/cdc/topics/": [f"gs://b/cdc/{sink_path(TOPIC, 0, 0)}", "gs://b/cdc/topics/_SUCCESS"]}

    listing = list_sink_files(lambda prefix: names[prefix], "gs://b/cdc")

    assert [f.start_offset for f in listing.files] == [0]
    assert listing.unmatched == ("gs://b/cdc/topics/_SUCCESS",)


def test_two_files_with_one_start_offset_are_refused(tmp_path):
    write(tmp_path, sink_path(TOPIC, 0, 5), ["null"])
    write(tmp_path, sink_path(TOPIC, 0, 5, ".json.gz"), ["null"], gz=True)

    with pytest.raises(SinkLayoutError, match="two files starting at offset 5"):
        list_sink_files(local_lister, str(tmp_path))


# --- choosing a window's files -------------------------------------------------------------------
def test_a_window_reads_the_file_holding_the_resume_offset_and_all_later_ones():
    chosen = files_from(files(0, 100, 200), TOPIC, 0, 150)

    assert [f.start_offset for f in chosen.files] == [100, 200]
    assert chosen.gap is None


def test_a_resume_offset_at_a_file_start_begins_with_that_file():
    assert [f.start_offset for f in files_from(files(0, 100, 200), TOPIC, 0, 100).files] == [100, 200]


def test_a_resume_offset_past_the_last_start_reads_the_last_file():
    assert [f.start_offset for f in files_from(files(0, 100), TOPIC, 0, 180).files] == [100]


def test_files_before_the_first_listed_offset_leave_a_gap_that_is_reported():
    chosen = files_from(files(50, 100), TOPIC, 0, 10)

    assert [f.start_offset for f in chosen.files] == [50, 100]
    assert chosen.gap == (10, 50)


def test_only_the_asked_topic_partition_is_chosen():
    mixed = files(0, 100) + files(0, 7, partition=1)

    assert [(f.partition, f.start_offset) for f in files_from(mixed, TOPIC, 1, 3).files] == [(1, 0), (1, 7)]


def test_no_files_means_nothing_to_read():
    assert files_from([], TOPIC, 0, 0).files == ()


# --- reading -------------------------------------------------------------------------------------
def test_lines_carry_the_file_start_offset_plus_their_index(tmp_path):
    path = write(tmp_path, sink_path(TOPIC, 0, 40), ['{"a":1}', "null", '{"a":2}'])
    sink_file = parse_sink_path(str(path))

    assert list(read_sink_file(local_reader, sink_file)) == [(40, '{"a":1}'), (41, "null"), (42, '{"a":2}')]


def test_reading_from_a_resume_offset_skips_the_lines_before_it(tmp_path):
    path = write(tmp_path, sink_path(TOPIC, 0, 40, ".json.gz"), ["a", "b", "c"], gz=True)

    assert list(read_sink_file(local_reader, parse_sink_path(str(path)), from_offset=41)) == [(41, "b"), (42, "c")]


def test_an_empty_line_inside_a_file_is_a_record_so_offsets_never_shift(tmp_path):
    path = tmp_path / sink_path(TOPIC, 0, 0)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"a\r\n\nc\n")

    assert list(read_sink_file(local_reader, parse_sink_path(str(path)))) == [(0, "a"), (1, ""), (2, "c")]


def test_a_damaged_gzip_file_is_refused_naming_it(tmp_path):
    path = tmp_path / sink_path(TOPIC, 0, 0, ".json.gz")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not gzip")

    with pytest.raises(SinkLayoutError, match="is not gzip data"):
        list(read_sink_file(local_reader, parse_sink_path(str(path))))
