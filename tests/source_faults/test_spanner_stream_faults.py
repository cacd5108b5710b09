"""Spanner change streams when the service misbehaves mid-stream, through the real client and
the extract job: the changelog holds every change of the window once, or the window fails
naming the fix, or the gate holds naming the partition that stopped."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from airflow_cdc.model import format_ts

from .support import WINDOW, first_window, spanner_truth


@pytest.fixture
def long_root(spanner_history) -> str:
    """A root partition live through the whole first window: its query there returns some
    1,800 records, so the faults below land mid-stream (and inside a batch of 200)."""
    end = spanner_history.created_us + int(WINDOW.total_seconds() * 1_000_000)
    return next(p.token for p in spanner_history.partitions_live_at(spanner_history.created_us)
                if p.end_us is None or p.end_us >= end)


def test_unavailable_mid_stream_is_resumed_and_the_changelog_holds_every_change_once(
        spark, spanner, spanner_history, spanner_stream, long_root):
    window = first_window(spanner_stream.config.stream_id, spanner_history.created_at)
    spanner.faults.inject("UNAVAILABLE", after_records=950, partition=long_root)

    result = spanner_stream.extract(spark, window)

    ids = spanner_stream.event_ids(spark)
    assert [(f.fault, f.records_sent) for f in spanner.faults.fired] == [("UNAVAILABLE", 950)]
    assert len(ids) == len(set(ids)) == result["counts"]["changes"]
    assert set(ids) == spanner_truth(spanner_history, window)


def test_deadline_exceeded_mid_stream_reads_the_partition_again_and_loses_and_doubles_nothing(
        spark, spanner, spanner_history, spanner_stream, long_root):
    window = first_window(spanner_stream.config.stream_id, spanner_history.created_at)
    spanner.faults.inject("DEADLINE_EXCEEDED", after_records=1_200, partition=long_root)

    spanner_stream.extract(spark, window)

    ids = spanner_stream.event_ids(spark)
    assert [f.fault for f in spanner.faults.fired] == ["DEADLINE_EXCEEDED"]
    assert len(ids) == len(set(ids))
    assert set(ids) == spanner_truth(spanner_history, window)


def test_resource_exhausted_is_retried_no_sooner_than_the_service_asks_and_loses_nothing(
        spark, spanner, spanner_history, spanner_stream, long_root):
    window = first_window(spanner_stream.config.stream_id, spanner_history.created_at)
    # Twice: the first read and its first retry are refused, the second retry reads.
    spanner.faults.inject("RESOURCE_EXHAUSTED", after_records=300, times=2, retry_delay=1.0,
                          partition=long_root)

    spanner_stream.extract(spark, window)

    ids = spanner_stream.event_ids(spark)
    fired = spanner.faults.fired
    assert [(f.fault, f.call) for f in fired] == [("RESOURCE_EXHAUSTED", 1),
                                                   ("RESOURCE_EXHAUSTED", 2)]
    # The retry waited at least the RetryInfo delay (backoff with jitter never goes below it).
    assert fired[1].monotonic - fired[0].monotonic >= 1.0
    assert len(ids) == len(set(ids))
    assert set(ids) == spanner_truth(spanner_history, window)


def test_a_partition_token_no_longer_accepted_fails_the_window_naming_the_partition_and_the_reset(
        spark, spanner, spanner_history, spanner_stream, long_root):
    window = first_window(spanner_stream.config.stream_id, spanner_history.created_at)
    spanner.faults.reject_token(long_root)

    with pytest.raises(Exception) as failure:
        spanner_stream.extract(spark, window)

    message = str(failure.value)
    assert f"Spanner no longer accepts the recorded position of partition {long_root}" in message
    assert f"for window {window.window_id} of stream {window.stream_id}" in message
    assert "Specified start_timestamp is too far in the past" in message
    assert f"`airflow-cdc reset-stream {window.stream_id}`" in message
    assert "from a snapshot" in message
    assert spanner_stream.changelog_commits(spark) == 0  # nothing of the window was written


def test_a_partition_whose_heartbeats_stop_holds_the_gate_naming_it_and_its_watermark(
        spark, spanner, spanner_history, spanner_stream, long_root, monkeypatch):
    from airflow_cdc.triggers.gate import CdcWindowCompleteTrigger

    window = first_window(spanner_stream.config.stream_id, spanner_history.created_at)
    stopped = window.start + timedelta(minutes=12)
    spanner.faults.stop_heartbeats(long_root, after=stopped)
    spanner_stream.extract(spark, window)
    spanner_stream.commit(window)
    spanner_stream.store.mark_applied(window, "run", {})
    monkeypatch.setenv("AIRFLOW_CDC_STATE_URL", spanner_stream.store.url)
    trigger = CdcWindowCompleteTrigger(
        stream_id=window.stream_id, window_start=format_ts(window.start),
        window_end=format_ts(window.end), poll_interval=0.05, source="spanner_change_stream",
        deadline=format_ts(window.end))  # long past: one poll, then the timeout event

    async def first_event():
        async for event in trigger.run():
            return event.payload

    event = asyncio.run(asyncio.wait_for(first_event(), 60))

    last_seen = max(
        t.commit_timestamp for t in spanner_history.transactions
        if window.start <= t.commit_timestamp <= stopped and long_root in t.partition_tokens)
    assert event["status"] == "timeout"
    assert [p["partition"] for p in event["lagging"]] == [long_root]
    watermark = event["lagging"][0]["watermark"]
    assert format_ts(last_seen) <= watermark <= format_ts(stopped + timedelta(microseconds=1))
    assert f"lowest {long_root} at {watermark}" in event["reason"]
    assert spanner.faults.fired[0].fault == "heartbeats stopped"


def test_once_heartbeats_return_the_next_window_reads_what_the_stall_held_back_exactly_once(
        spark, spanner, spanner_history, spanner_stream, long_root):
    from airflow_cdc.pipeline.protocol import gate_status
    from airflow_cdc.sources.registry import source_covers

    first = first_window(spanner_stream.config.stream_id, spanner_history.created_at)
    second = first_window(first.stream_id, first.end)
    spanner.faults.stop_heartbeats(long_root, after=first.start + timedelta(minutes=12))
    spanner_stream.extract(spark, first)
    spanner_stream.commit(first)
    held_back = spanner_truth(spanner_history, first) - set(spanner_stream.event_ids(spark))
    spanner.faults.clear()  # the partition reports progress again

    # Its part of transactions that other partitions gave the first window arrives now.
    spanner_stream.extract(spark, second)
    spanner_stream.commit(second)
    spanner_stream.store.mark_applied(first, "run", {})

    ids = spanner_stream.event_ids(spark)
    assert held_back  # the stall kept changes of the first window back ...
    assert len(ids) == len(set(ids))  # ... and the second window read them, once
    assert set(ids) == spanner_truth(spanner_history, first) | spanner_truth(spanner_history, second)
    assert gate_status(spanner_stream.store, first, source_covers("spanner_change_stream")).open
