"""Listing event files on GCS through GCSHook, against a local GCS-compatible server."""

from __future__ import annotations

import json
import socket
from datetime import timedelta

import pytest

from airflow_cdc.hooks.datastream import DatastreamFilesHook
from airflow_cdc.sources.datastream.discovery import settled_files


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    from gcp_storage_emulator.server import create_server

    port = _free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="landing")
    server.start()
    patch = pytest.MonkeyPatch()
    patch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    patch.setenv(
        "AIRFLOW_CONN_GCS_LOCAL",
        json.dumps({"conn_type": "google_cloud_platform",
                    "extra": {"project": "demo", "is_anonymous": True}}),
    )
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket = storage.Client(project="demo", credentials=AnonymousCredentials()).bucket("landing")
    for name in ("shop/orders/2030/01/01/00/a.jsonl", "shop/orders/2030/01/01/00/b.avro",
                 "shop/orders/_manifest.txt", "other/x.jsonl"):
        bucket.blob(name).upload_from_string(b'{"x": 1}\n')
    yield
    patch.undo()
    server.stop()


def test_gcs_prefix_lists_only_event_files_under_it(gcs):
    files = DatastreamFilesHook(gcp_conn_id="gcs_local").list_event_files("gs://landing/shop/")

    assert [(f.path, f.file_format) for f in files] == [
        ("gs://landing/shop/orders/2030/01/01/00/a.jsonl", "json"),
        ("gs://landing/shop/orders/2030/01/01/00/b.avro", "avro"),
    ]


def test_gcs_files_newer_than_the_settle_time_wait(gcs):
    files = DatastreamFilesHook(gcp_conn_id="gcs_local").list_event_files("gs://landing/shop/")
    newest = max(f.updated for f in files)

    assert settled_files(files, newest + timedelta(seconds=30), settle_seconds=60) == []
    assert len(settled_files(files, newest + timedelta(seconds=61), settle_seconds=60)) == 2
