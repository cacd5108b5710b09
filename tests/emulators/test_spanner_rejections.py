"""Queries Spanner refuses are refused, with its status codes and a message naming the value."""

from __future__ import annotations

from datetime import timedelta

import pytest
from google.api_core.exceptions import InvalidArgument, OutOfRange
from google.cloud.spanner_v1.param_types import TIMESTAMP
from spanner_reading import ChangeStreamReader, spanner_database

from airflow_cdc_emulators.spanner import History, HistoryConfig, SpannerChangeStreamEmulator
from airflow_cdc.model import format_ts


@pytest.mark.parametrize("heartbeat_ms", [999, 300_001])
def test_heartbeat_outside_1000_to_300000_ms_is_rejected(reader, history, heartbeat_ms):
    with pytest.raises(OutOfRange) as refused:
        reader.query(history.created_at, heartbeat_ms=heartbeat_ms)

    message = refused.value.message
    assert "heartbeat_milliseconds must be within min 1000 and max 300000" in message
    assert f"Received heartbeat_milliseconds: {heartbeat_ms}" in message


def test_heartbeat_at_the_limits_is_accepted(reader, history):
    assert reader.query(history.created_at, heartbeat_ms=1000)
    assert reader.query(history.created_at, heartbeat_ms=300_000)


def test_start_after_now_is_rejected(reader, emulator):
    later = emulator.now + timedelta(seconds=1)

    with pytest.raises(OutOfRange) as refused:
        reader.query(later)

    message = refused.value.message
    assert "start_timestamp is too far in the future" in message
    assert f"current maximum start timestamp: {format_ts(emulator.now)}" in message
    assert f"Received start_timestamp: {format_ts(later)}" in message


def test_start_before_stream_creation_is_rejected(reader, history):
    earlier = history.created_at - timedelta(microseconds=1)

    with pytest.raises(OutOfRange) as refused:
        reader.query(earlier)

    message = refused.value.message
    assert "start_timestamp is too far in the past" in message
    assert f"earliest read timestamp: {format_ts(history.created_at)}" in message
    assert f"Received start_timestamp: {format_ts(earlier)}" in message
    assert f"change stream {history.stream_name} was created at" in message


def test_start_before_retention_is_rejected():
    short = History(
        HistoryConfig(
            seed=5,
            duration=timedelta(hours=1),
            changes_per_second=0.2,
            splits=1,
            merges=0,
            three_way_merges=0,
            quiet_periods=0,
            retention=timedelta(minutes=30),
        )
    )
    with SpannerChangeStreamEmulator(short) as emulator:
        reader = ChangeStreamReader(spanner_database(emulator.emulator_host), short.stream_name)
        earliest = short.end - timedelta(minutes=30)

        with pytest.raises(OutOfRange) as refused:
            reader.query(earliest - timedelta(seconds=1))
        accepted = reader.query(earliest)

    message = refused.value.message
    assert "start_timestamp is too far in the past" in message
    assert f"earliest read timestamp: {format_ts(earliest)}" in message
    assert "retention period 0:30:00" in message
    assert accepted


def test_end_before_start_is_rejected(reader, history):
    start = history.created_at + timedelta(minutes=5)
    end = start - timedelta(microseconds=1)

    with pytest.raises(InvalidArgument) as refused:
        reader.query(start, end=end)

    message = refused.value.message
    assert "start_timestamp must be <= end_timestamp" in message
    assert format_ts(start) in message and format_ts(end) in message


def test_unknown_partition_token_is_rejected(reader, history):
    with pytest.raises(InvalidArgument) as refused:
        reader.query(history.created_at, token="not-a-partition-token")

    assert "Specified partition_token is invalid" in refused.value.message
    assert "Received partition_token: not-a-partition-token" in refused.value.message


def test_start_before_the_partition_start_is_rejected(reader, history):
    child = history.partition(history.splits[0].children[0])
    early = child.start - timedelta(microseconds=1)

    with pytest.raises(OutOfRange) as refused:
        reader.query(early, token=child.token)

    message = refused.value.message
    assert "start_timestamp is invalid for the partition" in message
    assert f"within {format_ts(child.start)} and" in message
    assert f"Received start_timestamp: {format_ts(early)}" in message


def test_unknown_stream_name_is_rejected(reader, history):
    with pytest.raises(InvalidArgument) as refused:
        start = history.created_at.isoformat()
        reader.execute(f"SELECT ChangeRecord FROM READ_NoSuchStream('{start}', NULL, NULL, 10000)")

    assert "Table-valued function not found: READ_NoSuchStream" in refused.value.message
    assert history.stream_name in refused.value.message


def test_unknown_stream_name_is_rejected_in_postgresql(reader, history):
    with pytest.raises(InvalidArgument) as refused:
        start = history.created_at.isoformat()
        reader.execute(
            f'SELECT * FROM "spanner"."read_json_NoSuchStream"(\'{start}\', NULL, NULL, 10000, NULL)'
        )

    assert "function spanner.read_json_NoSuchStream does not exist" in refused.value.message


def test_a_query_in_a_multi_use_transaction_is_rejected(reader, history):
    sql = f"SELECT ChangeRecord FROM READ_{history.stream_name}(@start, NULL, NULL, 10000)"

    with pytest.raises(InvalidArgument) as refused:
        with reader.database.snapshot(multi_use=True) as snapshot:
            list(
                snapshot.execute_sql(
                    sql, params={"start": history.created_at}, param_types={"start": TIMESTAMP}
                )
            )

    assert "must be strong reads executed via single use transactions" in refused.value.message
