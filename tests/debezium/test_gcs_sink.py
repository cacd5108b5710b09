"""A Debezium sink on GCS: the Airflow side through GCSHook, the Spark side through
google-cloud-storage with the connection the Airflow side hands over, against a local
in-memory GCS server (gcp_storage_emulator) and an anonymous Airflow connection."""

from __future__ import annotations

import gzip
import json
import socket
from datetime import timedelta

import pytest

from airflow_cdc.hooks.debezium import DebeziumSinkHook
from airflow_cdc.model import Op, PartitionPosition
from airflow_cdc.sources.debezium.layout import (
    list_sink_files,
    local_lister,
    local_reader,
    read_sink_file,
)
from airflow_cdc.sources.debezium.storage import SinkStorageError, sink_access, split_gs_uri

from .test_source import HEARTBEATS, ORDERS, T0, WINDOW, change, millis

BUCKET = "cdc"
ROOT = f"gs://{BUCKET}/sink"
CONN_ID = "gcs_sink"
NOW = T0 + timedelta(hours=1)
STRAY = "topics/pg.public.orders/partition=0/notes.txt"


def _lines(values) -> bytes:
    return ("\n".join("null" if v is None else json.dumps(v) for v in values) + "\n").encode()


# The sink's files, relative to its root: orders in a plain and a gzip file, the heartbeat
# topic, and an object under topics/ that is not the layout's.
SINK_FILES = {
    f"topics/{ORDERS}/partition=0/{ORDERS}+0+0000000000.json": _lines([
        change("c", 1, T0 + timedelta(minutes=1), 100),
        change("c", 2, T0 + timedelta(minutes=2), 200),
        change("d", 1, T0 + timedelta(minutes=3), 300, before={"id": 1, "amount": "1.50"}),
        None]),
    f"topics/{ORDERS}/partition=0/{ORDERS}+0+0000000004.json.gz": gzip.compress(_lines([
        change("c", 3, T0 + timedelta(minutes=4), 400)])),
    f"topics/{HEARTBEATS}/partition=0/{HEARTBEATS}+0+0000000000.json": _lines([
        {"ts_ms": millis(T0 + timedelta(minutes=12))}]),
    STRAY: b"written by hand\n",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def gcs():
    """The sink in bucket ``cdc`` of a local GCS server; the server's address."""
    from gcp_storage_emulator.server import create_server

    port = _free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=BUCKET)
    server.start()
    host = f"http://127.0.0.1:{port}"
    patch = pytest.MonkeyPatch()
    patch.setenv("STORAGE_EMULATOR_HOST", host)
    patch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(
        {"conn_type": "google_cloud_platform", "extra": {"project": "demo", "is_anonymous": True}}))
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket = storage.Client(project="demo", credentials=AnonymousCredentials()).bucket(BUCKET)
    for name, data in SINK_FILES.items():
        bucket.blob(f"sink/{name}").upload_from_string(data)
    yield host
    patch.undo()
    server.stop()


@pytest.fixture(scope="module")
def local_sink(tmp_path_factory):
    """The same files in a local folder."""
    root = tmp_path_factory.mktemp("sink")
    for name, data in SINK_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def _records(reader, listing) -> dict:
    """{(topic, partition, start offset): [(offset, line), ...]} of every listed file."""
    return {(f.topic, f.partition, f.start_offset): list(read_sink_file(reader, f))
            for f in listing.files}


def test_the_hook_lists_exactly_the_layouts_files_and_reports_the_stray_object(gcs):
    lister, _ = DebeziumSinkHook(gcp_conn_id=CONN_ID).access(ROOT)

    listing = list_sink_files(lister, ROOT)

    assert sorted(f.path for f in listing.files) == sorted(
        f"{ROOT}/{name}" for name in SINK_FILES if name != STRAY)
    assert listing.unmatched == (f"{ROOT}/{STRAY}",)


def test_the_hook_reads_plain_and_gzip_files_as_the_local_reader_reads_them(gcs, local_sink):
    lister, reader = DebeziumSinkHook(gcp_conn_id=CONN_ID).access(ROOT)

    from_gcs = _records(reader, list_sink_files(lister, ROOT))
    on_disk = _records(local_reader, list_sink_files(local_lister, str(local_sink)))

    assert from_gcs == on_disk
    assert [offset for offset, _ in from_gcs[(ORDERS, 0, 4)]] == [4]  # the gzip file


def test_the_extract_connection_lets_spark_read_the_sink_without_airflow(
        gcs, local_sink, monkeypatch):
    connection = DebeziumSinkHook(gcp_conn_id=CONN_ID).extract_connection(ROOT)
    # Executors get the server's address from the connection, not from their environment.
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")

    lister, reader = sink_access(ROOT, connection)

    assert connection == {"project": "demo", "access_token": None, "emulator_host": gcs}
    assert _records(reader, list_sink_files(lister, ROOT)) == _records(
        local_reader, list_sink_files(local_lister, str(local_sink)))


def test_an_anonymous_connection_without_a_local_server_gives_spark_nothing_and_is_refused(
        gcs, monkeypatch):
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")

    with pytest.raises(SinkStorageError, match=f"connection '{CONN_ID}' is anonymous but "
                                               f"STORAGE_EMULATOR_HOST is not set"):
        DebeziumSinkHook(gcp_conn_id=CONN_ID).extract_connection(ROOT)


def test_a_local_prefix_needs_no_extract_connection(local_sink):
    assert DebeziumSinkHook(gcp_conn_id=CONN_ID).extract_connection(str(local_sink)) == {}
    assert sink_access(str(local_sink), {}) == (local_lister, local_reader)


@pytest.mark.parametrize("side", ["airflow", "spark"])
def test_a_bucket_that_does_not_exist_is_named_with_the_fix(gcs, side):
    prefix = "gs://no-such-bucket/sink"
    hook = DebeziumSinkHook(gcp_conn_id=CONN_ID)
    lister, _ = (hook.access(prefix) if side == "airflow"
                 else sink_access(prefix, hook.extract_connection(prefix)))

    with pytest.raises(SinkStorageError, match=r"bucket 'no-such-bucket' does not exist.*"
                                               r"gcs\.bucket\.name"):
        list_sink_files(lister, prefix)


def test_a_gs_prefix_without_bucket_is_refused_naming_the_form():
    with pytest.raises(SinkStorageError, match="names no bucket: write it as gs://<bucket>/<path>"):
        split_gs_uri("gs:///sink")


def test_the_source_plans_and_reads_a_window_from_gcs(gcs, monkeypatch):
    from airflow_cdc.hooks.source import source_hook
    from airflow_cdc.sources.debezium.source import DebeziumSource
    from airflow_cdc.sources.registry import build_source, source_spec

    spec = source_spec("debezium", "shop", {
        "prefix": ROOT, "topic_prefix": "pg", "key_columns": {"public.orders": ["id"]},
        "settings": {"flush_lateness_seconds": 60}})
    planner = build_source(spec)
    hook = source_hook(planner, {"gcp_conn_id": CONN_ID})

    assert planner.readiness(WINDOW, NOW, [], hook).ready
    found = planner.discover(WINDOW, NOW, hook)
    assert sorted(p.partition_id for p in found.partitions) == [f"{HEARTBEATS}+0", f"{ORDERS}+0"]
    options = planner.plan_options(None, NOW, hook, found.partitions)
    overrides = planner.extract_overrides(hook)
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")  # the executor's side: no Airflow, no env

    read = DebeziumSource.from_spec({**spec, **overrides}, options).read_partition(
        WINDOW, PartitionPosition(f"{ORDERS}+0", T0, "0"))

    assert [(r.source_table, r.op, r.keys["id"]) for r in read.rows] == [
        ("public_orders", Op.INSERT, 1), ("public_orders", Op.INSERT, 2),
        ("public_orders", Op.DELETE, 1), ("public_orders", Op.INSERT, 3)]
    assert read.counts["tombstones"] == 1
    assert read.outcome.resume_position == "5" and read.outcome.watermark == WINDOW.end
