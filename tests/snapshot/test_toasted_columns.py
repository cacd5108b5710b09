"""A parallel snapshot of a table with a TOASTed column while its keys are updated (issue 64):
the target equals the table.

PostgreSQL with ``REPLICA IDENTITY DEFAULT`` leaves an unchanged TOASTed value out of an
update's WAL record, so Debezium writes its unavailable-value placeholder and each update
is a partial image (the body left out). A key updated while its batch was read then has only
partial changes after its READ row: the READ row must stay under them (at the batch's low
watermark), or the key has no row for the partial images to patch.

Real PostgreSQL, real Debezium (the ``airflow-cdc capture`` process), the snapshot job on the
suite's SparkSession, then one window's extract and apply. 120 keys with 10 KB bodies, a
writer updating a plain column about 60 times a second for the length of the snapshot.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from airflow_cdc.spark_jobs.snapshot import SnapshotSpec, run_snapshot
from tests.snapshot.toasted import (Writer, apply_one_window, create_docs, differences, drop_database,
                                    wait_for_heartbeat_after)

# A capture, a snapshot job and a window: minutes on the shared two cores. The rule it proves
# (a READ row kept under the partial images after it) is in make test as
# tests/snapshot/test_read_under_partial_images.py.
pytestmark = pytest.mark.long

DB = "cdc_toast_snap"
SLOT = "cdc_toast_snap_slot"
PREFIX = "tsnap"
KEYS = 120


@pytest.fixture(scope="module")
def snapshotted(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("toast_snapshot")
    sink = base / "sink"
    drop_database(DB, SLOT)
    create_docs(DB, KEYS)
    config_path = base / "capture.json"
    config_path.write_text(json.dumps({
        "output": str(sink), "flush_size": 100, "rotate_interval_ms": 200,
        "connector": {
            "name": "cdc-tsnap-test", "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": "pgoutput", "database.hostname": "127.0.0.1", "database.port": 5432,
            "database.user": "postgres", "database.dbname": DB, "topic.prefix": PREFIX,
            "table.include.list": "public.docs", "slot.name": SLOT,
            "publication.name": "cdc_tsnap_pub", "publication.autocreate.mode": "filtered",
            "heartbeat.interval.ms": 300, "snapshot.mode": "no_data",
            # The partial images are the case: the capture's reselect post-processor (which
            # would make them full images) is off.
            "post.processors": "",
        },
    }))
    spec = SnapshotSpec(
        snapshot_id="docs-1", stream_id="tsnap", source_table="public.docs", dialect="postgresql",
        host="127.0.0.1", port=5432, database=DB, user="postgres",
        sink={"prefix": str(sink), "topic_prefix": PREFIX}, chunk_size=30, chunks_per_batch=2,
        watermark_timeout_seconds=120, poll_seconds=0.2)
    writer = Writer(DB, KEYS)
    capture = subprocess.Popen(
        [sys.executable, "-m", "airflow_cdc.cli", "capture", "debezium", "--config",
         str(config_path), "--max-seconds", "300"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_heartbeat_after(sink, PREFIX, 0)
        writer.start()
        summary = run_snapshot(spark, spec)
        writer.finish()
        wait_for_heartbeat_after(sink, PREFIX, int(time.time() * 1000) + 1000)
    finally:
        writer.stop.set()
        capture.terminate()
        capture.wait(timeout=60)
    yield {"base": base, "sink": sink, "summary": summary, "updates": writer.updates}
    drop_database(DB, SLOT)


@pytest.fixture(scope="module")
def applied(snapshotted, spark):
    return apply_one_window(spark, snapshotted["base"], snapshotted["sink"], PREFIX)


def test_keys_updated_while_their_batch_was_read_were_updated_by_partial_images(snapshotted, applied, spark):
    # The case the next test is about: updates between a batch's watermarks, each one
    # leaving the TOASTed body out.
    assert snapshotted["summary"]["keys_changed_during_reads"] > 0
    images = {r.image for r in spark.sql(
        f"SELECT DISTINCT image FROM {applied['changelog']} WHERE op = 'UPDATE'").collect()}
    assert images == {"PARTIAL"}


def test_target_equals_a_table_whose_toasted_rows_were_updated_during_the_parallel_snapshot(applied, spark):
    assert (applied["outcome"], applied["reasons"]) == (0, [])
    assert differences(spark, DB, applied["target"]) == ([], [], [])
