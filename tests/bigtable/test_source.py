"""The Bigtable source read window by window through the real client against the emulator,
with the protocol's own partition lineage (the rounds the extract job runs, without Spark)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc_emulators.bigtable import BigtableEmulator, generate_history
from airflow_cdc.model import PartitionPosition, Window
from airflow_cdc.pipeline.partition_lineage import WindowLineage, run_rounds
from airflow_cdc.sources.bigtable.partitions import KeySpaceError, PartitionName, RowRange
from airflow_cdc.sources.bigtable.reader import ChangeStreamReadError
from airflow_cdc.sources.bigtable.readiness import WatermarkStalledError
from airflow_cdc.sources.bigtable.source import BigtableChangeStreamSource
from airflow_cdc.sources.registry import build_source, source_spec

START = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
WINDOW = timedelta(minutes=15)
WINDOWS = 4
STREAM = "events"


@pytest.fixture(scope="module")
def history():
    return generate_history(seed=7, start=START, hours=1.0, commits_per_second=0.5)


@pytest.fixture(scope="module")
def emulator(history):
    with BigtableEmulator(history, now=START + timedelta(hours=1, minutes=5)) as running:
        yield running


def source_for(emulator, **settings) -> BigtableChangeStreamSource:
    spec = source_spec("bigtable_change_stream", STREAM, {
        "project": "demo-project", "instance": "demo-instance", "table": "events",
        "app_profile": "default",
        "settings": {"heartbeat_seconds": 0.2, "read_timeout_seconds": 20, **settings},
    })
    spec["connection"] = {"emulator_host": emulator.emulator_host}
    return build_source(spec)


def read_window(source, window, positions, pending=()):
    """One window's rounds, as the extract job runs them: (rows, outcomes, still pending)."""
    lineage = WindowLineage(positions, pending, source.resolve_child)
    rows = []

    def read_round(batch):
        results = []
        for position in batch:
            read = source.read_partition(window, position)
            rows.extend(read.rows)
            results.append((read.outcome, ()))
        return results

    outcomes, _ = run_rounds(lineage, read_round)
    source.check_partitions(outcomes, lineage.still_pending)
    return rows, outcomes, lineage


@pytest.fixture(scope="module")
def windows(emulator):
    """Every window of the hour in turn, each from the positions the previous one left."""
    source = source_for(emulator)
    positions = [PartitionPosition("initial", START)]
    pending = ()
    read = []
    for index in range(WINDOWS):
        window = Window(STREAM, START + WINDOW * index, START + WINDOW * (index + 1))
        rows, outcomes, lineage = read_window(source, window, positions, pending)
        read.append((window, rows, outcomes, lineage))
        positions = [PartitionPosition(o.partition_id, o.watermark, o.resume_position)
                     for o in outcomes if not o.finished]
        positions += [p for p in _ready(lineage)]
        pending = tuple(lineage.still_pending)
    return read


def _ready(lineage):
    return []  # children whose parents all reported were read in the same window


def commits_before(history, end: datetime) -> set[str]:
    micros = int(end.timestamp() * 1_000_000)
    return {
        f"{c.row_key.hex()}/{c.commit_us}/{c.tiebreaker}/{c.cluster or '-'}/{i}"
        for c in history.commits if c.commit_us < micros for i in range(len(c.mutations))
    }


def test_windows_together_read_every_mutation_before_their_end_exactly_once(windows, history):
    event_ids = [row.event_id for _, rows, _, _ in windows for row in rows]

    assert len(event_ids) == len(set(event_ids))
    assert set(event_ids) == commits_before(history, windows[-1][0].end)


def test_each_window_reads_only_mutations_committed_before_its_end(windows):
    for window, rows, _, _ in windows:
        assert all(row.commit_ts < window.end for row in rows)


def test_every_partition_not_finished_reached_the_window_end_with_its_watermark(windows):
    for window, _, outcomes, _ in windows:
        assert all(o.finished or o.watermark >= window.end for o in outcomes)


def test_a_split_reports_children_that_start_from_the_tokens_of_the_close(windows):
    children = [c for _, _, outcomes, _ in windows for o in outcomes for c in o.children
                if o.partition_id != "initial" and len(c.parent_ids) == 1]

    assert children and all(c.handover for c in children)


@pytest.mark.parametrize("parents", [2, 3])
def test_a_merge_child_names_all_its_parents_and_is_read_once(windows, parents):
    merged = {c.partition_id: c for _, _, outcomes, _ in windows for o in outcomes
              for c in o.children if len(c.parent_ids) == parents}
    finished = {o.partition_id: index for index, (_, _, outcomes, _) in enumerate(windows)
                for o in outcomes if o.finished}

    assert merged, f"no merge of {parents} partitions in the hour"
    for child_id, child in merged.items():
        rows = PartitionName.parse(child_id).rows
        assert all(PartitionName.parse(p).rows.overlaps(rows) for p in child.parent_ids)
        first_read = min(index for index, (_, _, outcomes, _) in enumerate(windows)
                         if any(o.partition_id == child_id for o in outcomes))
        assert first_read >= max(finished[p] for p in child.parent_ids)
        for _, _, outcomes, _ in windows:
            assert [o.partition_id for o in outcomes].count(child_id) <= 1


def test_a_partition_id_carries_its_generation_above_its_parents(windows):
    for _, _, outcomes, _ in windows:
        for o in outcomes:
            for c in o.children:
                if o.partition_id != "initial":
                    assert PartitionName.parse(c.partition_id).generation > max(
                        PartitionName.parse(p).generation for p in c.parent_ids)


def test_live_partitions_with_a_gap_in_the_key_space_are_an_error_naming_it(emulator):
    from airflow_cdc.model import PartitionOutcome

    source = source_for(emulator)
    outcomes = [PartitionOutcome("0:[,b)", False, START), PartitionOutcome("0:[c,)", False, START)]

    with pytest.raises(KeySpaceError, match=r"a gap in the key space between 0:\[,b\) and 0:\[c,\)"):
        source.check_partitions(outcomes, ())


def test_a_start_older_than_the_retention_is_refused_naming_the_partition_and_the_fix(
        emulator, history):
    source = source_for(emulator)
    old = START - timedelta(days=3)
    partition = history.partitions_live_at(START)[0]
    rows = RowRange(partition.range.start, partition.range.end)
    pid = PartitionName(0, rows).partition_id
    window = Window(STREAM, old, old + WINDOW)

    with pytest.raises(ChangeStreamReadError, match=r"retention.*Reset the stream's state"):
        source.read_partition(window, PartitionPosition(pid, old))


# --- the lag episode: readiness and the stall policies ---------------------------------------
@pytest.fixture(scope="module")
def lag(history):
    episode = history.lag_episodes[0]
    boundary = episode.boundary
    return Window(STREAM, boundary - WINDOW, boundary), episode


def test_readiness_waits_while_a_partition_lags_naming_it_and_since_when(emulator, lag):
    window, episode = lag
    emulator.set_now(window.end + timedelta(seconds=5))
    source = source_for(emulator, evidence_delay_seconds=1)

    status = source.readiness(window, window.end + timedelta(seconds=5), [], None)

    assert not status.ready
    assert "holds the low watermark" in status.reason and RowRange(episode.row_range.start, episode.row_range.end).text() in status.reason
    assert "waiting since" in status.reason


def test_readiness_opens_once_the_lagging_cluster_caught_up(emulator, lag):
    window, episode = lag
    emulator.set_now(episode.hold_until + timedelta(seconds=2))

    status = source_for(emulator, evidence_delay_seconds=1).readiness(
        window, window.end + timedelta(minutes=5), [], None)

    assert status.ready


def test_the_fail_policy_fails_a_stalled_window_after_its_minutes(emulator, lag):
    window, _ = lag
    emulator.set_now(window.end + timedelta(seconds=5))
    source = source_for(emulator, evidence_delay_seconds=1,
                        stall={"policy": "fail", "after_minutes": 0})

    with pytest.raises(WatermarkStalledError, match="the stall policy fails a window"):
        source.readiness(window, window.end + timedelta(seconds=5), [], None)


def test_the_open_policy_reads_a_stalled_window_flagged_unconfirmed(emulator, lag):
    window, _ = lag
    emulator.set_now(window.end + timedelta(seconds=5))
    source = source_for(emulator, evidence_delay_seconds=1,
                        stall={"policy": "open", "after_minutes": 0})

    status = source.readiness(window, window.end + timedelta(seconds=5), [], None)

    assert status.ready and status.reason.startswith("unconfirmed")
    assert BigtableChangeStreamSource.completeness_note({"unconfirmed": 1})[0] == "unconfirmed"
    assert status.options["unconfirmed"]


def test_the_wait_policy_keeps_waiting_however_long_the_stall(emulator, lag):
    window, _ = lag
    emulator.set_now(window.end + timedelta(seconds=5))

    status = source_for(emulator, evidence_delay_seconds=1).readiness(
        window, window.end + timedelta(hours=5), [], None)

    assert not status.ready


def test_an_unknown_stall_policy_is_refused_when_the_dag_is_parsed():
    with pytest.raises(ValueError, match="stall policy 'skip' of stream 'events' is unknown"):
        source_spec("bigtable_change_stream", STREAM, {
            "instance": "i", "table": "t", "settings": {"stall": {"policy": "skip"}}})
