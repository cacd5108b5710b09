"""Bigtable change streams when the service misbehaves mid-stream, through the real GAPIC
client and the extract job: the changelog holds every mutation of the window once, or the
window fails naming the fix, or the gate holds naming the partition that went quiet."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_cdc.model import PartitionPosition, format_ts
from airflow_cdc.pipeline.protocol import gate_status, plan_window
from airflow_cdc.sources.bigtable.partitions import PartitionName
from airflow_cdc.sources.registry import build_source, source_covers

from .support import BIGTABLE_START, bigtable_stream, bigtable_truth, first_window

# The first of the table's four partitions at the start: [<first key>, user#0070).
FIRST = PartitionName.parse("0:[,user#0070)")
PARTITION = (FIRST.rows.start, FIRST.rows.end)


def test_unavailable_mid_stream_reads_the_partition_again_and_the_changelog_holds_every_mutation_once(
        spark, bigtable, tmp_path):
    stream = bigtable_stream(bigtable, tmp_path)
    window = first_window(stream.config.stream_id, BIGTABLE_START)
    bigtable.faults.inject("UNAVAILABLE", after_records=40, partition=PARTITION)

    result = stream.extract(spark, window)

    ids = stream.event_ids(spark)
    assert [(f.fault, f.records_sent) for f in bigtable.faults.fired] == [("UNAVAILABLE", 40)]
    assert len(ids) == len(set(ids)) == result["counts"]["changes"]
    assert set(ids) == bigtable_truth(bigtable, window)


def test_deadline_exceeded_from_the_service_is_no_read_deadline_and_loses_and_doubles_nothing(
        spark, bigtable, tmp_path):
    stream = bigtable_stream(bigtable, tmp_path)
    window = first_window(stream.config.stream_id, BIGTABLE_START)
    bigtable.faults.inject("DEADLINE_EXCEEDED", after_records=40, partition=PARTITION)

    stream.extract(spark, window)
    stream.commit(window)

    ids = stream.event_ids(spark)
    assert [f.fault for f in bigtable.faults.fired] == ["DEADLINE_EXCEEDED"]
    assert len(ids) == len(set(ids))
    assert set(ids) == bigtable_truth(bigtable, window)
    # Read to the end, not cut at the service's DEADLINE_EXCEEDED: the partition covers the window.
    partition = next(p for p in stream.store.list_partitions(window.stream_id)
                     if p.partition_id == FIRST.partition_id)
    assert partition.watermark >= window.end


def test_resource_exhausted_is_retried_no_sooner_than_the_service_asks_and_loses_nothing(
        spark, bigtable, tmp_path):
    stream = bigtable_stream(bigtable, tmp_path)
    window = first_window(stream.config.stream_id, BIGTABLE_START)
    bigtable.faults.inject("RESOURCE_EXHAUSTED", after_records=0, times=2, retry_delay=1.0,
                           partition=PARTITION)

    stream.extract(spark, window)

    ids = stream.event_ids(spark)
    fired = bigtable.faults.fired
    assert [(f.fault, f.call) for f in fired] == [("RESOURCE_EXHAUSTED", 1),
                                                   ("RESOURCE_EXHAUSTED", 2)]
    assert fired[1].monotonic - fired[0].monotonic >= 1.0  # never sooner than RetryInfo says
    assert len(ids) == len(set(ids))
    assert set(ids) == bigtable_truth(bigtable, window)


def test_a_continuation_token_no_longer_accepted_fails_the_window_naming_the_partition_and_the_reset(
        spark, bigtable, tmp_path):
    stream = bigtable_stream(bigtable, tmp_path)
    first, second = (first_window(stream.config.stream_id, BIGTABLE_START + i * timedelta(minutes=20))
                     for i in range(2))
    # The continuation token the partition's read of the first window ends with ...
    read = build_source(stream.config.source_spec).read_partition(
        first, PartitionPosition(FIRST.partition_id, first.start))
    token = PartitionPosition(FIRST.partition_id, read.outcome.watermark, read.outcome.resume_position)
    plan = plan_window(stream.store, stream.config, second, "run", 600, [token], "lake")
    bigtable.faults.reject_token(PARTITION)  # ... is refused when the second window reads on

    with pytest.raises(Exception) as failure:
        stream.extract(spark, second, plan)

    message = str(failure.value)
    assert (f"Bigtable no longer accepts the recorded position of partition "
            f"{FIRST.partition_id} (its continuation token)") in message
    assert f"for window {second.window_id} of stream {second.stream_id}" in message
    assert "is older than the retention of" in message
    assert f"`airflow-cdc reset-stream {second.stream_id}`" in message
    assert "from a snapshot" in message
    assert stream.changelog_commits(spark) == 0  # the window wrote nothing


def test_a_partition_whose_heartbeats_stop_holds_the_gate_naming_it_and_its_watermark(
        spark, bigtable, tmp_path):
    stream = bigtable_stream(bigtable, tmp_path, read_timeout_seconds=2.0)
    window = first_window(stream.config.stream_id, BIGTABLE_START)
    stopped = window.start + timedelta(minutes=12)
    bigtable.faults.stop_heartbeats(PARTITION, after=stopped)
    stream.extract(spark, window)
    stream.commit(window)
    stream.store.mark_applied(window, "run", {})

    status = gate_status(stream.store, window, source_covers("bigtable_change_stream"))

    assert not status.open
    assert [p.partition_id for p in status.lagging] == [FIRST.partition_id]
    watermark = status.lagging[0].watermark
    assert window.start < watermark <= stopped
    assert (f"lowest {FIRST.partition_id} at {format_ts(watermark)}") in status.reason
    assert bigtable.faults.fired[0].fault == "heartbeats stopped"


def test_a_fault_the_emulators_do_not_inject_is_refused_naming_those_they_do(bigtable):
    with pytest.raises(ValueError, match=r"fault code 'ABORTED' is not one the emulators inject: "
                                         r"use one of \['UNAVAILABLE', 'DEADLINE_EXCEEDED', "
                                         r"'RESOURCE_EXHAUSTED'\]"):
        bigtable.faults.inject("ABORTED")
