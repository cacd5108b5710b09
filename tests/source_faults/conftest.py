"""The source-fault tests: emulators whose faults are injected mid-stream, streams run through
the real extract job (the session's Spark), the state store and the gate.

Each test gets its own stream id and state store; the emulators are shared by the folder and
every test clears the faults it injected (the ``spanner`` and ``bigtable`` fixtures).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from .support import BIGTABLE_START, Pipeline, new_pipeline


@pytest.fixture(scope="session")
def spanner_history():
    from airflow_cdc_emulators.spanner import generate_history

    # 40 minutes with splits and merges: the first window reads 2 root partitions, then children.
    return generate_history(seed=11, duration=timedelta(minutes=40), changes_per_second=2.0,
                            splits=2, merges=2, three_way_merges=1, quiet_periods=1)


@pytest.fixture(scope="session")
def spanner_server(spanner_history):
    from airflow_cdc_emulators.spanner import SpannerEmulator

    with SpannerEmulator(spanner_history) as running:
        yield running


@pytest.fixture
def spanner(spanner_server):
    """The Spanner emulator, its faults cleared after the test."""
    yield spanner_server
    spanner_server.faults.clear()


@pytest.fixture(scope="session")
def bigtable_server():
    from airflow_cdc_emulators.bigtable import BigtableEmulator, generate_history

    history = generate_history(seed=5, start=BIGTABLE_START, hours=1.0, commits_per_second=0.2)
    with BigtableEmulator(history, now=BIGTABLE_START + timedelta(hours=1, minutes=5)) as running:
        yield running


@pytest.fixture
def bigtable(bigtable_server):
    """The Bigtable emulator, its faults cleared after the test."""
    yield bigtable_server
    bigtable_server.faults.clear()


@pytest.fixture
def spanner_stream(spanner, spanner_history, tmp_path) -> Pipeline:
    return new_pipeline(tmp_path, "spanner_change_stream", {
        "stream_name": spanner_history.stream_name, "heartbeat_milliseconds": 1000,
        "connection": {"project": "p", "instance": "i", "database": "db"},
    }, {"project": "p", "instance": "i", "database": "db",
        "emulator_host": spanner.emulator_host})


