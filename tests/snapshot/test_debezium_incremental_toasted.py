"""Debezium's own incremental snapshot of a table with a TOASTed column while its keys are
updated (issue 64): the target equals the table.

Debezium reads a chunk between an open and a close watermark and leaves out the READ row of
every key of the chunk that changed between them: the change stands for the key. Under
``REPLICA IDENTITY DEFAULT`` an update that leaves the TOASTed body alone is a partial image
(the body is Debezium's unavailable-value placeholder), so such a key would reach the
pipeline with partial images only and nothing for them to patch: the apply dead-letters it
and no re-run can fix it. The capture therefore runs Debezium's reselect post-processor for
PostgreSQL connectors (``airflow_cdc.capture.debezium``), which reads the unavailable
columns from the table and makes each such update a full image.

Real PostgreSQL, real Debezium (the ``airflow-cdc capture`` process, its defaults), the
execute-snapshot signal, then one window's extract and apply. 60 keys with 10 KB bodies read
5 at a time; an additional condition that sleeps 50 ms per row stands for a slow read, so each
chunk window lasts long enough for the writer (about 60 updates a second) to change keys
inside it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from airflow_cdc.sources.debezium.signals import SnapshotSignal, send_signal
from tests.snapshot.toasted import (Writer, apply_one_window, create_docs, differences, drop_database,
                                    topic_values, wait_for, wait_for_heartbeat_after)

# A capture, an incremental snapshot and a window: a minute or more on the shared two cores.
# The rule it proves (the capture reselects unavailable columns) is in make test as
# tests/debezium/test_capture_reselect.py.
pytestmark = pytest.mark.long

DB = "cdc_toast_incr"
SLOT = "cdc_toast_incr_slot"
PREFIX = "tincr"
NOTIFICATIONS = f"{PREFIX}.notifications"
SIGNAL_TABLE = "public.debezium_signal"
KEYS = 60
SLOW_READ = "(SELECT true FROM pg_sleep(0.05))"


@pytest.fixture(scope="module")
def snapshotted(tmp_path_factory):
    base = tmp_path_factory.mktemp("toast_incremental")
    sink = base / "sink"
    drop_database(DB, SLOT)
    create_docs(DB, KEYS, """
        ALTER TABLE docs REPLICA IDENTITY DEFAULT;
        CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL,
                                      data varchar(2048));""")
    config_path = base / "capture.json"
    config_path.write_text(json.dumps({
        "output": str(sink), "flush_size": 100, "rotate_interval_ms": 200,
        "connector": {
            "name": "cdc-tincr-test", "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": "pgoutput", "database.hostname": "127.0.0.1", "database.port": 5432,
            "database.user": "postgres", "database.dbname": DB, "topic.prefix": PREFIX,
            "table.include.list": f"public.docs,{SIGNAL_TABLE}", "slot.name": SLOT,
            "publication.name": "cdc_tincr_pub", "publication.autocreate.mode": "filtered",
            "snapshot.mode": "no_data", "signal.data.collection": SIGNAL_TABLE,
            "notification.enabled.channels": "sink", "notification.sink.topic.name": NOTIFICATIONS,
            "incremental.snapshot.chunk.size": 5, "heartbeat.interval.ms": 300,
        },
    }))
    signal = SnapshotSignal.execute_snapshot(["public.docs"], additional_conditions={"public.docs": SLOW_READ})
    writer = Writer(DB, KEYS)
    capture = subprocess.Popen(
        [sys.executable, "-m", "airflow_cdc.cli", "capture", "debezium", "--config",
         str(config_path), "--max-seconds", "300"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def completed():
        return any(n["id"] == signal.id and n["type"] == "COMPLETED"
                   for n in topic_values(sink, NOTIFICATIONS))

    try:
        wait_for_heartbeat_after(sink, PREFIX, 0)
        writer.start()
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname=DB)
        try:
            send_signal(conn, signal, SIGNAL_TABLE, dialect="postgresql")
        finally:
            conn.close()
        wait_for(completed, 180, "Debezium's COMPLETED notification")
        writer.finish()
        wait_for_heartbeat_after(sink, PREFIX, int(time.time() * 1000) + 1000)
    finally:
        writer.stop.set()
        capture.terminate()
        capture.wait(timeout=60)
    yield {"base": base, "sink": sink, "updates": writer.updates}
    drop_database(DB, SLOT)


@pytest.fixture(scope="module")
def applied(snapshotted, spark):
    return apply_one_window(spark, snapshotted["base"], snapshotted["sink"], PREFIX,
                            signal_table=SIGNAL_TABLE, notification_topic=NOTIFICATIONS)


def test_debezium_leaves_out_the_read_row_of_keys_changed_inside_their_chunk_window(snapshotted):
    # The case the next tests are about: keys whose only events in the snapshot are changes.
    read = {e["after"]["id"] for e in topic_values(snapshotted["sink"], f"{PREFIX}.public.docs")
            if e["op"] == "r"}
    assert 0 < KEYS - len(read) < KEYS


def test_updates_that_left_the_toasted_body_alone_arrive_as_full_images(applied, spark):
    images = {r.image for r in spark.sql(
        f"SELECT DISTINCT image FROM {applied['changelog']} WHERE op = 'UPDATE'").collect()}
    assert images == {"FULL"}


def test_target_equals_a_table_whose_toasted_rows_were_updated_during_debeziums_incremental_snapshot(
        applied, spark):
    assert (applied["outcome"], applied["reasons"]) == (0, [])
    assert differences(spark, DB, applied["target"]) == ([], [], [])
