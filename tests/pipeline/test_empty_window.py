"""The empty-window rule: a window the source proves empty is read in the worker, without Spark.

The probe reads the emulated Spanner change stream through the real client (no Spark): a
history whose changes stop at ``END`` leaves every later window empty.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc.model import PartitionOutcome, PartitionPosition, Window
from airflow_cdc.pipeline.empty_window import (
    mark_spark_extract,
    probe_empty_window,
    spark_extract_started,
    worth_probing,
)
from airflow_cdc.pipeline.protocol import StreamConfig, commit_window, plan_window
from airflow_cdc.sources.registry import build_source
from airflow_cdc.sources.spanner.query import INITIAL_PARTITION
from airflow_cdc.state import StateStore

START = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
END = START + timedelta(minutes=10)  # the history's end: no change after it
QUIET = Window("orders", END, END + timedelta(minutes=10))


@pytest.fixture(scope="module")
def emulator():
    from airflow_cdc_emulators.spanner import SpannerChangeStreamEmulator, generate_history

    history = generate_history(seed=27, start=START, duration=END - START, changes_per_second=1.0,
                               initial_partitions=3, splits=0, merges=0, three_way_merges=0,
                               quiet_periods=0)
    with SpannerChangeStreamEmulator(history, now=QUIET.end) as server:
        yield server


@pytest.fixture
def stream(emulator, tmp_path):
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.migrate()
    config = StreamConfig(
        "orders", "spanner_change_stream",
        {"kind": "spanner_change_stream", "stream_id": "orders", "stream_name": "AllChanges",
         "dialect": "GOOGLE_STANDARD_SQL", "heartbeat_milliseconds": 1000,
         "connection": {"project": "p", "instance": "i", "database": "db",
                        "emulator_host": emulator.emulator_host}},
        work_root=str(tmp_path / "work"),
    )
    return store, config


def planned(store, config, window):
    plan = plan_window(store, config, window, "run", 600,
                       [PartitionPosition(INITIAL_PARTITION, window.start)], "lake")
    return plan, build_source(plan.source, plan.options)


def test_a_window_without_changes_is_proven_empty_with_every_partition_continuing_at_its_end(stream):
    store, config = stream
    plan, source = planned(store, config, QUIET)

    outcome = probe_empty_window(source, plan)

    assert outcome is not None and outcome.counts["changes"] == 0
    # The first window reads the initial partition, which hands over to the stream's three.
    finished = [o for o in outcome.outcomes if o.finished]
    live = [o for o in outcome.outcomes if not o.finished]
    assert len(finished) == 1 and len(finished[0].children) == 3
    assert len(live) == 3 and {o.watermark for o in live} == {QUIET.end}


def test_a_window_with_changes_is_not_proven_empty(stream):
    store, config = stream
    busy = Window("orders", START, END)
    plan, source = planned(store, config, busy)

    assert probe_empty_window(source, plan) is None


def test_the_probed_outcome_commits_like_an_extract_outcome(stream):
    from airflow_cdc.pipeline.files import write_private

    store, config = stream
    plan, source = planned(store, config, QUIET)
    outcome = probe_empty_window(source, plan)
    write_private(config.outcome_path(QUIET), outcome.to_json())

    store.mark_extracted(QUIET, "run", None)
    record = commit_window(store, config, QUIET, "run")

    assert record.changelog_snapshot_id is None
    assert (record.counts["changes"], record.low_watermark) == (0, QUIET.end)


def window_committed(store, window, changes):
    store.plan_window(window, "run", 600, [PartitionPosition("a", window.start)])
    store.mark_extracted(window, "run", 1)
    store.commit_window(window, "run", [PartitionOutcome("a", False, window.end)],
                        {"changes": changes})


@pytest.fixture
def store(tmp_path):
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.migrate()
    store.register_stream("orders", "test", "f")
    return store


W1 = Window("orders", START, START + timedelta(hours=1))
W2 = Window("orders", W1.end, W1.end + timedelta(hours=1))


def test_a_stream_s_first_window_is_not_probed(store):
    assert not worth_probing(store, W1, 10_000)


@pytest.mark.parametrize(("previous", "limit", "probed"), [
    (0, 10_000, True), (10_000, 10_000, True), (10_001, 10_000, False), (0, -1, False),
])
def test_a_window_is_probed_only_after_a_window_of_at_most_the_limit(store, previous, limit, probed):
    window_committed(store, W1, previous)

    assert worth_probing(store, W2, limit) is probed


def test_a_window_a_spark_extract_was_submitted_for_is_marked(tmp_path):
    folder = tmp_path / "window"
    folder.mkdir()
    assert not spark_extract_started(folder)

    mark_spark_extract(folder)

    assert spark_extract_started(folder)
