"""The capture completes PostgreSQL updates that leave a TOASTed column unchanged (issue 64).

Under ``REPLICA IDENTITY DEFAULT`` such an update reaches Debezium without the TOASTed value,
and a key whose READ row Debezium's incremental snapshot left out (it changed inside its
chunk window) would have nothing else to take the value from. A PostgreSQL capture runs
Debezium's reselect post-processor unless ``post.processors`` is given, so the update event
holds the value, read from the table. Against the real PostgreSQL and Debezium (the
``airflow-cdc capture`` process with its defaults): an update of the plain column carries the
body. The whole case, an incremental snapshot under writes applied to a target, is
``tests/snapshot/test_debezium_incremental_toasted.py`` (long).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airflow_cdc.capture.debezium import RESELECT_UNAVAILABLE_DEFAULTS, CaptureConfig
from airflow_cdc.sources.debezium.records import DEFAULT_PLACEHOLDER
from tests.snapshot.toasted import create_docs, drop_database, execute, topic_values, wait_for

DB = "cdc_reselect_test"
SLOT = "cdc_reselect_slot"
PREFIX = "resel"
POSTGRES = "io.debezium.connector.postgresql.PostgresConnector"


def properties(tmp_path, **connector) -> dict:
    return CaptureConfig.from_dict({"output": str(tmp_path), "connector": {
        "connector.class": POSTGRES, "topic.prefix": "p", **connector}}).engine_properties()


def test_post_processors_given_are_passed_on_as_given_with_their_own_settings(tmp_path):
    props = properties(tmp_path, **{"post.processors": "mine", "mine.type": "com.example.Mine"})

    assert props["post.processors"] == "mine"
    assert not any(key.startswith("reselector.") for key in props)


def test_reselector_settings_given_override_the_defaults(tmp_path):
    props = properties(tmp_path, **{"reselector.reselect.null.values": True})

    assert props["post.processors"] == "reselector"
    assert props["reselector.reselect.null.values"] == "true"


def test_empty_post_processors_runs_none(tmp_path):
    props = properties(tmp_path, **{"post.processors": ""})

    assert "post.processors" not in props and "reselector.type" not in props


def test_a_connector_other_than_postgresql_gets_no_post_processor(tmp_path):
    props = CaptureConfig.from_dict({"output": str(tmp_path), "connector": {
        "connector.class": "io.debezium.connector.mysql.MySqlConnector", "topic.prefix": "p"}}).engine_properties()

    assert not set(RESELECT_UNAVAILABLE_DEFAULTS) & set(props)


@pytest.fixture
def toasted_database():
    drop_database(DB, SLOT)
    create_docs(DB, 2, "ALTER TABLE docs REPLICA IDENTITY DEFAULT;")
    yield DB
    drop_database(DB, SLOT)


def test_an_update_that_leaves_a_toasted_column_unchanged_carries_its_value(toasted_database, tmp_path):
    sink = tmp_path / "sink"
    config = tmp_path / "capture.json"
    config.write_text(json.dumps({
        "output": str(sink), "flush_size": 100, "rotate_interval_ms": 200,
        "connector": {
            "name": "cdc-reselect-test", "connector.class": POSTGRES, "plugin.name": "pgoutput",
            "database.hostname": "127.0.0.1", "database.port": 5432, "database.user": "postgres",
            "database.dbname": DB, "topic.prefix": PREFIX, "table.include.list": "public.docs",
            "slot.name": SLOT, "publication.name": "cdc_reselect_pub",
            "publication.autocreate.mode": "filtered", "snapshot.mode": "no_data",
            "heartbeat.interval.ms": 300,
        },
    }))
    capture = subprocess.Popen(
        [sys.executable, "-m", "airflow_cdc.cli", "capture", "debezium", "--config", str(config),
         "--max-seconds", "120"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: topic_values(sink, f"__debezium-heartbeat.{PREFIX}") or capture.poll() is not None,
                 90, "the capture to stream (a heartbeat)")
        assert capture.poll() is None, capture.stderr.read()
        execute("UPDATE docs SET n = 7 WHERE id = 1", DB)
        wait_for(lambda: topic_values(sink, f"{PREFIX}.public.docs") or capture.poll() is not None,
                 60, "the update event")
    finally:
        capture.terminate()
        capture.wait(timeout=60)
    body = execute("SELECT body FROM docs WHERE id = 1", DB)[0][0]

    [update] = topic_values(sink, f"{PREFIX}.public.docs")
    assert (update["op"], update["after"]["n"]) == ("u", 7)
    assert update["after"]["body"] != DEFAULT_PLACEHOLDER
    assert update["after"]["body"] == body
