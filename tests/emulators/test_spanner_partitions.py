"""Partitions as a reader meets them: initial query, splits, merges, ordering, heartbeats, ends."""

from __future__ import annotations

from datetime import timedelta

from airflow_cdc_emulators.spanner.timeline import to_datetime

US = timedelta(microseconds=1)


def child_records(records: list[dict]) -> list[dict]:
    return [r for r in records if r["kind"] == "child_partitions_record"]


def test_initial_query_returns_one_child_record_per_partition_live_at_its_start(reader, history):
    after_first_split = history.splits[0].at + timedelta(seconds=1)

    records = reader.query(after_first_split)

    assert [r["kind"] for r in records] == ["child_partitions_record"] * len(records)
    assert {child["token"] for r in records for child in r["child_partitions"]} == {
        p.token for p in history.partitions_live_at(after_first_split)
    }
    assert {r["start_timestamp"] for r in records} == {after_first_split}
    assert all(
        child["parent_partition_tokens"] == [] for r in records for child in r["child_partitions"]
    )
    assert len({r["record_sequence"] for r in records}) == len(records)


def test_initial_query_at_stream_creation_returns_the_root_partitions(reader, history):
    records = reader.query(history.created_at)

    tokens = [child["token"] for r in records for child in r["child_partitions"]]
    assert sorted(tokens) == sorted(p.token for p in history.lineage.roots)


def test_split_parent_ends_with_one_child_record_naming_it_as_only_parent(reader, history):
    split = history.splits[0]
    (parent,) = split.parents

    records = reader.query(history.partition(parent).start, token=parent)

    (child_record,) = child_records(records)
    assert records[-1] == child_record
    assert child_record["start_timestamp"] == split.at
    assert [c["token"] for c in child_record["child_partitions"]] == list(split.children)
    assert all(c["parent_partition_tokens"] == [parent] for c in child_record["child_partitions"])
    assert all(
        r["commit_timestamp"] < split.at for r in records if r["kind"] == "data_change_record"
    )


def test_a_child_partition_is_readable_from_its_start(reader, history):
    split = history.splits[0]

    records = reader.query(split.at, token=split.children[0])

    data = [r for r in records if r["kind"] == "data_change_record"]
    assert data and all(r["commit_timestamp"] >= split.at for r in data)


def merge_with_parents(history, count: int):
    return next(event for event in history.merges if len(event.parents) == count)


def test_merge_of_two_parents_returns_the_same_child_record_from_each(reader, history):
    merge = merge_with_parents(history, 2)

    reported = [
        child_records(reader.query(history.partition(p).start, token=p)) for p in merge.parents
    ]

    assert reported[0] == reported[1]
    (record,) = reported[0]
    assert record["start_timestamp"] == merge.at
    assert record["child_partitions"] == [
        {"token": merge.children[0], "parent_partition_tokens": list(merge.parents)}
    ]


def test_merge_of_three_parents_returns_the_same_child_record_from_each(reader, history):
    merge = merge_with_parents(history, 3)

    reported = [
        child_records(reader.query(history.partition(p).start, token=p)) for p in merge.parents
    ]

    assert reported[0] == reported[1] == reported[2]
    (record,) = reported[0]
    assert record["start_timestamp"] == merge.at
    assert record["child_partitions"][0]["parent_partition_tokens"] == list(merge.parents)


def test_merged_parents_all_end_at_the_child_start(history):
    for merge in history.merges:
        assert {history.partition(p).end for p in merge.parents} == {merge.at}
        assert history.partition(merge.children[0]).start == merge.at


def test_a_partition_returns_its_records_in_commit_timestamp_order(reader, history):
    busiest = max(history.partitions, key=lambda p: len(history.records(p.token)))

    records = reader.query(busiest.start, token=busiest.token)

    data = [r for r in records if r["kind"] == "data_change_record"]
    order = [
        (r["commit_timestamp"], r["server_transaction_id"], r["record_sequence"]) for r in data
    ]
    assert len(data) == len(history.records(busiest.token)) > 100
    assert order == sorted(order)
    stamps = [
        r.get("commit_timestamp") or r.get("timestamp") or r["start_timestamp"] for r in records
    ]
    assert stamps == sorted(stamps)


def test_heartbeats_are_spaced_by_the_interval_while_a_partition_is_idle(reader, history):
    quiet_start, quiet_end = (to_datetime(us) for us in history.quiet_periods[0])
    partition, *_ = [
        p for p in history.partitions_live_at(quiet_start) if p.live_at(history.quiet_periods[0][1])
    ]

    records = reader.query(quiet_start, end=quiet_end, token=partition.token, heartbeat_ms=10_000)

    assert {r["kind"] for r in records} == {"heartbeat_record"}
    stamps = [quiet_start] + [r["timestamp"] for r in records]
    gaps = {b - a for a, b in zip(stamps, stamps[1:-1])}
    assert gaps == {timedelta(seconds=10)}
    assert stamps[-1] == quiet_end
    assert len(records) >= 17  # three idle minutes at 10 s


def test_a_heartbeat_precedes_a_record_after_an_idle_interval(reader, history):
    quiet_start, quiet_end = (to_datetime(us) for us in history.quiet_periods[0])
    partition = next(p for p in history.partitions_live_at(quiet_end) if p.start <= quiet_start)

    records = reader.query(
        quiet_start,
        end=quiet_end + timedelta(minutes=1),
        token=partition.token,
        heartbeat_ms=60_000,
    )

    first_data = next(i for i, r in enumerate(records) if r["kind"] == "data_change_record")
    assert records[first_data - 1]["kind"] == "heartbeat_record"
    assert records[first_data - 1]["timestamp"] < records[first_data]["commit_timestamp"]


def test_a_query_ending_before_the_partition_end_returns_up_to_its_end_without_children(
    reader, history
):
    split = history.splits[0]
    (parent,) = split.parents
    start = history.partition(parent).start
    end = start + (split.at - start) / 2

    records = reader.query(start, end=end, token=parent)

    assert not child_records(records)
    assert all(r["commit_timestamp"] <= end for r in records if r["kind"] == "data_change_record")
    last = records[-1]
    assert last.get("timestamp", last.get("commit_timestamp")) == end


def test_a_query_whose_end_is_the_partition_end_returns_its_child_record(reader, history):
    split = history.splits[0]
    (parent,) = split.parents

    records = reader.query(split.at - timedelta(seconds=30), end=split.at, token=parent)

    assert child_records(records)[0]["start_timestamp"] == split.at


def test_a_query_without_end_returns_up_to_now_and_finishes(reader, history, emulator):
    live = history.partitions_live_at(history.end_us - 1)[0]

    records = reader.query(live.start, token=live.token)

    assert not child_records(records)
    assert records[-1] == {"kind": "heartbeat_record", "timestamp": emulator.now}


def test_moving_now_back_hides_later_records_and_partition_ends(reader, history, emulator):
    split = history.splits[0]
    (parent,) = split.parents
    earlier = split.at - timedelta(minutes=1)
    emulator.now = earlier
    try:
        records = reader.query(history.partition(parent).start, token=parent)
    finally:
        emulator.now = history.end

    assert not child_records(records)
    assert records[-1] == {"kind": "heartbeat_record", "timestamp": earlier}
    assert all(
        r["commit_timestamp"] <= earlier for r in records if r["kind"] == "data_change_record"
    )


def test_a_query_starting_at_the_partition_end_returns_only_its_child_record(reader, history):
    split = history.splits[0]
    (parent,) = split.parents

    records = reader.query(split.at, token=parent)

    assert [r["kind"] for r in records] == ["child_partitions_record"]
    assert records[0]["start_timestamp"] == split.at


def test_start_and_end_timestamps_are_inclusive(reader, history):
    partition = history.partitions[0]
    commit = history.records(partition.token)[20].commit_timestamp

    records = reader.query(commit, end=commit, token=partition.token)

    assert records and {r["commit_timestamp"] for r in records} == {commit}
    assert {r["kind"] for r in records} == {"data_change_record"}
