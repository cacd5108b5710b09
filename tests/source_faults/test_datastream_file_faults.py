"""Datastream event files that arrive damaged, vanish, or cannot be listed for a moment: the
plan and extract steps dead-letter what is damaged (with the reason) and land the rest, fail
naming the file and the fix, or retry, and the changelog holds every readable event once."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest

from airflow_cdc.model import Window
from airflow_cdc.sources.datastream.writer import write_avro_events, write_json_events

from .flaky_http import flaky_gcs
from .support import FILES_START, datastream_event, datastream_stream

WINDOW = timedelta(minutes=20)


def window_of(stream) -> Window:
    return Window(stream.config.stream_id, FILES_START, FILES_START + WINDOW)


def uuids(events) -> set[str]:
    return {e["uuid"] for e in events}


def test_a_truncated_json_line_is_a_dead_letter_with_its_reason_and_the_rest_of_the_file_lands(
        spark, tmp_path):
    events = [datastream_event(i, 100 * i) for i in range(1, 7)]
    whole = write_json_events(tmp_path / "files" / "orders" / "a.jsonl", events)
    lines = whole.read_text().splitlines()
    cut = lines[2][: len(lines[2]) // 2]  # the third event, cut mid-object
    whole.write_text("\n".join(lines[:2] + [cut] + lines[3:]) + "\n")
    stream = datastream_stream(tmp_path, tmp_path / "files")
    window = window_of(stream)

    stream.extract(spark, window)

    dead = stream.dead_letters(spark)
    assert set(stream.event_ids(spark)) == uuids(events[:2] + events[3:])
    assert [(d.partition_id, d.reason) for d in dead] == [
        (str(whole), "extract: line is not a JSON object")]
    assert json.loads(dead[0].source_metadata_json)["raw"] == cut


def rewrite_in_blocks(path, codec: str = "deflate") -> list:
    """The Avro file rewritten one record per block; the blocks' (offset, size)."""
    import fastavro

    with path.open("rb") as handle:
        reader = fastavro.reader(handle)
        schema, records = reader.writer_schema, list(reader)
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(schema), records, codec=codec, sync_interval=1)
    path.write_bytes(buffer.getvalue())
    return [(b.offset, b.size) for b in fastavro.block_reader(io.BytesIO(buffer.getvalue()))]


def test_a_corrupt_avro_block_is_a_dead_letter_naming_file_and_block_and_the_other_blocks_land(
        spark, tmp_path):
    events = [datastream_event(i, 100 * i) for i in range(1, 7)]
    path = write_avro_events(tmp_path / "files" / "orders" / "b.avro", events)
    blocks = rewrite_in_blocks(path)
    offset, size = blocks[2]  # the third block (the third event): damage its compressed bytes
    content = bytearray(path.read_bytes())
    content[offset + 4: offset + 8] = b"\x00\xff\x00\xff"
    path.write_bytes(bytes(content))
    stream = datastream_stream(tmp_path, tmp_path / "files")

    stream.extract(spark, window_of(stream))

    dead = stream.dead_letters(spark)
    assert set(stream.event_ids(spark)) == uuids(events[:2] + events[3:])
    assert len(dead) == 1 and dead[0].partition_id == str(path)
    assert dead[0].reason.startswith(
        f"extract: Avro block 2 of file {path} (bytes {offset}-{offset + size}) is corrupt (")
    kept = json.loads(json.loads(dead[0].source_metadata_json)["raw"])
    assert (kept["file"], kept["bytes"]) == (str(path), [offset, offset + size])


def test_a_file_gone_between_plan_and_extract_fails_the_window_naming_the_file_and_the_fix(
        spark, tmp_path):
    files = tmp_path / "files" / "orders"
    first = write_json_events(files / "a.jsonl", [datastream_event(1, 100)])
    gone = write_json_events(files / "b.jsonl", [datastream_event(2, 200)])
    stream = datastream_stream(tmp_path, tmp_path / "files")
    window = window_of(stream)
    plan = stream.plan(window)
    gone.unlink()  # a lifecycle rule, or someone tidying the bucket

    with pytest.raises(Exception) as failure:
        stream.extract(spark, window, plan)

    message = str(failure.value)
    assert sorted(p.partition_id for p in plan.positions if p.resume_position) == [
        str(first), str(gone)]
    assert (f"1 file(s) planned for window {window.window_id} of stream {window.stream_id} "
            f"are gone since the plan (deleted or moved): {gone}") in message
    assert "put the file(s) back at that path" in message
    assert f"`airflow-cdc reset-stream {window.stream_id}`" in message
    assert stream.changelog_commits(spark) == 0


@pytest.fixture
def gcs(monkeypatch):
    """A local GCS server (bucket ``landing``) behind a hop that fails the first object listing."""
    with flaky_gcs("landing") as hop:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", hop.url)
        monkeypatch.setenv("AIRFLOW_CONN_GCS_LOCAL", json.dumps(
            {"conn_type": "google_cloud_platform",
             "extra": {"project": "demo", "is_anonymous": True}}))
        yield hop


def test_a_gcs_listing_that_fails_once_is_retried_and_the_plan_holds_every_file(tmp_path, gcs):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from airflow_cdc.hooks.datastream import DatastreamSourceHook

    bucket = storage.Client(project="demo", credentials=AnonymousCredentials()).bucket("landing")
    names = [f"shop/orders/2030/01/01/00/{name}" for name in ("a.jsonl", "b.jsonl", "c.avro")]
    for name in names:
        bucket.blob(name).upload_from_string(b'{"x": 1}\n')
    stream = datastream_stream(tmp_path, "gs://landing/shop")
    window = window_of(stream)

    plan = stream.plan(window, DatastreamSourceHook(gcp_conn_id="gcs_local"))

    assert len(gcs.failed) == 1 and gcs.failed[0].startswith("GET /storage/v1/b/landing/o")
    assert sorted(p.partition_id for p in plan.positions if p.resume_position) == [
        f"gs://landing/{name}" for name in names]
    assert {p.partition_id for p in stream.store.window_partitions(window)} >= {
        f"gs://landing/{name}" for name in names}


def test_a_local_folder_that_cannot_be_listed_fails_the_listing_naming_it_and_the_fix(tmp_path):
    from .support import list_unlistable_folder

    ran, hidden = list_unlistable_folder(
        tmp_path / "events", "from airflow_cdc.sources.datastream.discovery import list_local_files\n"
        "print(list_local_files('{root}'))")

    assert ran.returncode != 0
    assert "FolderListingError" in ran.stderr and f"folder '{hidden}'" in ran.stderr
    assert "read and execute permission" in ran.stderr
