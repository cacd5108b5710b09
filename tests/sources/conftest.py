"""A small emulated change stream for the source adapter tests (one server per module)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_cdc_emulators.spanner import SpannerChangeStreamEmulator, generate_history


@pytest.fixture(scope="module")
def history():
    # 40 minutes, lively enough for splits and merges inside the first windows.
    return generate_history(
        seed=11,
        duration=timedelta(minutes=40),
        changes_per_second=2.0,
        splits=2,
        merges=2,
        three_way_merges=1,
        quiet_periods=1,
    )


@pytest.fixture(scope="module")
def emulator(history):
    server = SpannerChangeStreamEmulator(history, postgresql_databases=("pgdb",)).start()
    yield server
    server.stop()
