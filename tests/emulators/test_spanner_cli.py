"""``python -m airflow_cdc_emulators.spanner`` runs on its own and answers the real client."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from spanner_reading import ChangeStreamReader, spanner_database

from airflow_cdc_emulators.spanner import (
    DEFAULT_START,
    SpannerChangeStreamEmulator,
    generate_history,
)
from airflow_cdc_emulators.spanner.server import EmulatorStartError

ROOT = Path(__file__).resolve().parents[2]


def test_the_command_line_serves_a_history_until_killed():
    command = [
        sys.executable,
        "-m",
        "airflow_cdc_emulators.spanner",
        "--port",
        "0",
        "--seed",
        "4",
        "--hours",
        "0.25",
        "--changes-per-second",
        "1",
        "--splits",
        "2",
        "--merges",
        "1",
        "--three-way-merges",
        "0",
        "--stream",
        "CliStream",
    ]
    server = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        host_line = server.stdout.readline().strip()
        assert host_line.startswith("SPANNER_EMULATOR_HOST=127.0.0.1:"), server.stderr.read()
        summary = json.loads(server.stdout.readline())
        reader = ChangeStreamReader(spanner_database(host_line.split("=", 1)[1]), "CliStream")

        records = reader.query(DEFAULT_START)
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stdout.close()
        server.stderr.close()

    expected = generate_history(
        seed=4,
        duration=timedelta(hours=0.25),
        changes_per_second=1,
        splits=2,
        merges=1,
        three_way_merges=0,
        stream_name="CliStream",
    )
    assert summary["stream"] == "CliStream" and summary["splits"] == 2
    assert [c["token"] for r in records for c in r["child_partitions"]] == [
        p.token for p in expected.lineage.roots
    ]


def test_starting_on_a_busy_port_fails_with_a_clear_message(emulator, history):
    second = SpannerChangeStreamEmulator(history, port=emulator.port)

    with pytest.raises(EmulatorStartError, match=f"cannot listen on 127.0.0.1:{emulator.port}"):
        second.start()
