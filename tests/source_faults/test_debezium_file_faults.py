"""Debezium's Kafka Connect sink files (the object-storage sink layout) that arrive damaged,
vanish, or cannot be listed for a moment: a damaged line is a dead letter with its reason and
the rest lands; a vanished file fails the window naming it and the fix; a listing that fails
once is retried and the plan holds every file."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from airflow_cdc.model import Window

from .flaky_http import flaky_gcs
from .support import (
    DEBEZIUM_HEARTBEATS,
    DEBEZIUM_TOPIC,
    FILES_START,
    debezium_change,
    debezium_sink_file,
    debezium_stream,
)

WINDOW = timedelta(minutes=20)
HEARTBEAT = json.dumps({"ts_ms": int((FILES_START + timedelta(minutes=25)).timestamp() * 1000)})


def window_of(stream) -> Window:
    return Window(stream.config.stream_id, FILES_START, FILES_START + WINDOW)


def test_a_truncated_json_line_is_a_dead_letter_with_its_reason_and_the_rest_of_the_file_lands(
        spark, tmp_path):
    sink = tmp_path / "sink"
    lines = [json.dumps(debezium_change(i, 100 * i)) for i in range(1, 7)]
    cut = lines[2][: len(lines[2]) // 2]  # offset 2, cut mid-object
    debezium_sink_file(sink, DEBEZIUM_TOPIC, 0, lines[:2] + [cut] + lines[3:])
    debezium_sink_file(sink, DEBEZIUM_HEARTBEATS, 0, [HEARTBEAT])
    stream = debezium_stream(tmp_path, sink)

    stream.extract(spark, window_of(stream))

    dead = stream.dead_letters(spark)
    keys = sorted(r.keys["id"] for r in spark.table(stream.changelog).select("keys").collect())
    assert keys == ["1", "2", "4", "5", "6"]
    assert [(d.partition_id, d.event_id) for d in dead] == [
        (f"{DEBEZIUM_TOPIC}+0", f"{DEBEZIUM_TOPIC}+0@2")]
    assert dead[0].reason.startswith("extract: ") and "JSON" in dead[0].reason
    assert json.loads(dead[0].source_metadata_json)["raw"] == cut


def test_a_sink_file_gone_between_plan_and_extract_fails_the_window_naming_the_file_and_the_fix(
        spark, tmp_path):
    sink = tmp_path / "sink"
    debezium_sink_file(sink, DEBEZIUM_TOPIC, 0, [json.dumps(debezium_change(1, 100))])
    gone = debezium_sink_file(sink, DEBEZIUM_TOPIC, 1, [json.dumps(debezium_change(2, 200))])
    debezium_sink_file(sink, DEBEZIUM_HEARTBEATS, 0, [HEARTBEAT])
    stream = debezium_stream(tmp_path, sink)
    window = window_of(stream)
    plan = stream.plan(window)
    gone.unlink()

    with pytest.raises(Exception) as failure:
        stream.extract(spark, window, plan)

    message = str(failure.value)
    assert (f"1 file(s) planned for window {window.window_id} of stream {window.stream_id} "
            f"are gone since the plan (deleted or moved): {gone}") in message
    assert "put the file(s) back at that path" in message
    assert f"`airflow-cdc reset-stream {window.stream_id}`" in message
    assert stream.changelog_commits(spark) == 0


@pytest.fixture
def gcs(monkeypatch):
    """A local GCS server (bucket ``sink``) behind a hop that fails the first object listing."""
    with flaky_gcs("sink") as hop:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", hop.url)
        monkeypatch.setenv("AIRFLOW_CONN_GCS_LOCAL", json.dumps(
            {"conn_type": "google_cloud_platform",
             "extra": {"project": "demo", "is_anonymous": True}}))
        yield hop


def test_a_gcs_listing_that_fails_once_is_retried_and_the_plan_holds_every_file(tmp_path, gcs):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from airflow_cdc.hooks.debezium import DebeziumSinkHook

    bucket = storage.Client(project="demo", credentials=AnonymousCredentials()).bucket("sink")
    files = {f"topics/{DEBEZIUM_TOPIC}/partition=0/{DEBEZIUM_TOPIC}+0+{start:010d}.json":
             json.dumps(debezium_change(start + 1, 100 * (start + 1))) for start in (0, 1, 2)}
    files[f"topics/{DEBEZIUM_HEARTBEATS}/partition=0/{DEBEZIUM_HEARTBEATS}+0+0000000000.json"] = HEARTBEAT
    for name, line in files.items():
        bucket.blob(name).upload_from_string(line + "\n")
    stream = debezium_stream(tmp_path, "gs://sink")
    window = window_of(stream)

    plan = stream.plan(window, DebeziumSinkHook(gcp_conn_id="gcs_local"))

    planned = plan.options["files"]
    assert len(gcs.failed) == 1 and gcs.failed[0].startswith("GET /storage/v1/b/sink/o")
    assert sorted(f for names in planned.values() for f in names) == sorted(files)
    assert sorted(planned) == [f"{DEBEZIUM_HEARTBEATS}+0", f"{DEBEZIUM_TOPIC}+0"]


def test_a_local_sink_folder_that_cannot_be_listed_fails_the_listing_naming_it_and_the_fix(tmp_path):
    from .support import list_unlistable_folder

    ran, hidden = list_unlistable_folder(
        tmp_path / "sink", "from airflow_cdc.sources.debezium.layout import local_lister\n"
        "print(local_lister('{root}/'))")

    assert ran.returncode != 0
    assert "FolderListingError" in ran.stderr and f"folder '{hidden}'" in ran.stderr
