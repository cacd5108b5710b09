"""Windows over the emulated stream through the state store: lineage across windows (SQLite)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from airflow_cdc.model import PartitionState, Window
from airflow_cdc.pipeline.files import WindowOutcomeFile
from airflow_cdc.pipeline.partition_lineage import WindowLineage, check_transactions, run_rounds
from airflow_cdc.pipeline.protocol import StreamConfig, commit_window, plan_window
from airflow_cdc.sources.spanner.reader import SpannerConnection
from airflow_cdc.sources.spanner.source import SpannerChangeStreamSource
from airflow_cdc.state import StateStore

STEP = timedelta(minutes=10)


@pytest.fixture(scope="module")
def replay(emulator, history, tmp_path_factory):
    """Every 10-minute window of the history, planned, read and committed in order."""
    root = tmp_path_factory.mktemp("spanner-windows")
    store = StateStore(f"sqlite:///{root / 'state.db'}")
    store.migrate()
    connection = SpannerConnection("p", "i", "db", emulator_host=emulator.emulator_host)
    source = SpannerChangeStreamSource(
        connection, history.stream_name, heartbeat_milliseconds=1000, stream_id="s"
    )
    config = StreamConfig("s", source.kind, {"stream_name": history.stream_name}, work_root=str(root))
    windows, rows_by_window, outcomes_by_window = [], {}, {}
    start = history.created_at
    while start < history.end:
        window = Window("s", start, min(start + STEP, history.end))
        plan = plan_window(store, config, window, "run", 600, source.initial_positions(window), "lake")
        lineage = WindowLineage(plan.positions, plan.pending_children)
        rows = []

        def read_round(batch):
            reads = [source.read_partition(window, p) for p in batch]
            for read in reads:
                rows.extend(read.rows)
            return [(r.outcome, r.transactions) for r in reads]

        outcomes, tallies = run_rounds(lineage, read_round)
        check_transactions(tallies)
        config.outcome_path(window).write_text(
            WindowOutcomeFile(window.window_id, tuple(outcomes), tuple(lineage.still_pending),
                              {"changes": len(rows)}).to_json()
        )
        store.mark_extracted(window, "run", len(windows) + 1)
        commit_window(store, config, window, "run")
        windows.append(window)
        rows_by_window[window] = rows
        outcomes_by_window[window] = outcomes
        start = window.end
    return store, windows, rows_by_window, outcomes_by_window


def test_every_change_lands_in_exactly_one_window(replay, history):
    _, windows, rows_by_window, _ = replay
    seen = Counter(r.event_id for rows in rows_by_window.values() for r in rows)
    assert sum(seen.values()) == history.change_count
    assert set(seen.values()) == {1}


def test_each_change_lands_in_the_window_of_its_commit_timestamp(replay):
    _, windows, rows_by_window, _ = replay
    for window in windows:
        assert all(window.start <= r.commit_ts < window.end for r in rows_by_window[window])


def test_split_and_merge_children_are_read_in_the_window_that_births_them(replay, history):
    store, windows, _, outcomes_by_window = replay
    read_in = {}
    for window in windows:
        for outcome in outcomes_by_window[window]:
            read_in.setdefault(outcome.partition_id, window)
    born_later = [p for p in history.partitions if p.start > history.created_at]
    assert born_later, "the history should split or merge partitions"
    for partition in born_later:
        window = read_in[partition.token]
        assert window.start <= partition.start < window.end


def test_a_partition_living_across_three_windows_continues_from_each_window_end(replay):
    store, windows, _, outcomes_by_window = replay
    continued = Counter(
        o.partition_id for outcomes in outcomes_by_window.values() for o in outcomes if not o.finished
    )
    long_lived = [p for p, n in continued.items() if n >= 3]
    assert long_lived, "the history should keep some partition alive for three windows"
    token = long_lived[0]
    starts = [
        next(wp.start for wp in store.window_partitions(w) if wp.partition_id == token)
        for w in windows
        if any(wp.partition_id == token for wp in store.window_partitions(w))
    ]
    assert starts[1:] == sorted(starts[1:]) and all(
        s in {w.start for w in windows} for s in starts[1:]
    )


def test_merged_child_is_read_once_in_its_window_after_every_parent_finished(replay, history):
    _, windows, _, outcomes_by_window = replay
    assert history.merges, "the history should merge partitions"
    for merge in history.merges:
        window = next(w for w in windows if w.start <= merge.at < w.end)
        outcomes = outcomes_by_window[window]
        reads = Counter(o.partition_id for o in outcomes)
        assert reads[merge.children[0]] == 1
        finished = {o.partition_id for o in outcomes if o.finished}
        assert set(merge.parents) <= finished


def test_finished_partitions_are_exactly_those_that_returned_children(replay):
    store, windows, _, outcomes_by_window = replay
    finished = {
        o.partition_id for outcomes in outcomes_by_window.values() for o in outcomes if o.finished
    }
    stored = {p.partition_id for p in store.list_partitions("s", states=[PartitionState.FINISHED])}
    assert stored == finished
    assert all(
        o.children for outcomes in outcomes_by_window.values() for o in outcomes if o.finished
    )
