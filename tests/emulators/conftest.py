"""Fixtures of the Spanner change stream emulator tests: one small history, one server, a reader."""

from __future__ import annotations

import pytest
from spanner_reading import PG_DATABASE, SMALL_HISTORY, ChangeStreamReader, spanner_database

from airflow_cdc_emulators.spanner import History, SpannerChangeStreamEmulator


@pytest.fixture(scope="session")
def history() -> History:
    return History(SMALL_HISTORY)


@pytest.fixture(scope="session")
def emulator(history):
    with SpannerChangeStreamEmulator(history, postgresql_databases=(PG_DATABASE,)) as running:
        yield running


@pytest.fixture(scope="session")
def reader(emulator, history) -> ChangeStreamReader:
    return ChangeStreamReader(spanner_database(emulator.emulator_host), history.stream_name)


@pytest.fixture(scope="session")
def whole_stream(reader, history) -> dict[str, list]:
    """The whole history read through the client, GoogleSQL: token -> records."""
    return reader.read_all(history.created_at)


@pytest.fixture(scope="session")
def data_records(whole_stream) -> list[tuple[str, dict]]:
    """Every data change record read, with the partition that returned it."""
    return [
        (token, record)
        for token, records in whole_stream.items()
        for record in records
        if record["kind"] == "data_change_record"
    ]
