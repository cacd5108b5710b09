"""The Bigtable change stream emulator, observed only through the real google-cloud-bigtable
GAPIC clients (``BigtableClient``, ``BigtableTableAdminClient``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from google.api_core import exceptions
from google.cloud.bigtable_v2 import types as bt

from airflow_cdc_emulators.bigtable import (
    GARBAGE_COLLECTION,
    BigtableEmulator,
    BigtableHistory,
    DeleteFromColumn,
    DeleteFromFamily,
    HistoryConfigError,
    RowRange,
    SetCell,
    generate_history,
    read_all,
    read_partition,
)
from airflow_cdc_emulators.bigtable.timeline import to_datetime, to_micros

START = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
HOURS = 1.0
END = START + timedelta(hours=HOURS)
US = timedelta(microseconds=1)


@pytest.fixture(scope="module")
def history() -> BigtableHistory:
    return generate_history(seed=7, start=START, hours=HOURS, commits_per_second=1.0)


@pytest.fixture(scope="module")
def emulator(history):
    with BigtableEmulator(history, now=END + timedelta(minutes=5)) as running:
        yield running


@pytest.fixture(scope="module")
def client(emulator):
    return emulator.client()


@pytest.fixture(scope="module")
def full_read(client, history):
    return read_all(client, history.table_name, start=START, end=END - US)


@pytest.fixture
def live():
    """An emulator over an empty table, for writes through the client."""
    with BigtableEmulator(BigtableHistory.empty(initial_partitions=2)) as running:
        yield running


def _ident(record) -> tuple:
    return (record.row_key, record.commit_us, record.tiebreaker)


def _expected(history, row_range: RowRange, from_us: int, to_us: int, reader="c1") -> list:
    """Seeded commits of the range visible to ``reader`` in [from, to], in stream order."""
    chosen = []
    for commit in history.commits:
        visible = history.visible_us(commit, reader)
        if row_range.contains(commit.row_key) and from_us <= visible <= to_us:
            key = (visible, commit.commit_us, commit.tiebreaker, commit.row_key.hex(), commit.seq)
            chosen.append((key, commit))
    return [(c.row_key, c.commit_us, c.tiebreaker) for _, c in sorted(chosen)]


def _apply(records, before_us: int) -> dict:
    state: dict = {}
    for record in sorted(records, key=lambda r: (r.commit_us, r.tiebreaker)):
        if record.commit_us >= before_us:
            continue
        row = state.setdefault(record.row_key, {})
        for m in record.mutations:
            if isinstance(m, SetCell):
                row.setdefault(m.family, {}).setdefault(m.qualifier, {})[m.timestamp_us] = m.value
            elif isinstance(m, DeleteFromColumn):
                cells = row.get(m.family, {}).get(m.qualifier, {})
                for ts in [t for t in cells if m.covers(t)]:
                    del cells[ts]
            else:
                row.pop(m.family, None)
        for family in list(row):
            for qualifier in [q for q, cells in row[family].items() if not cells]:
                del row[family][qualifier]
            if not row[family]:
                del row[family]
        if not row:
            del state[record.row_key]
    return dict(sorted(state.items()))


def _event(history, kind: str, parents: int):
    return next(
        e for e in history.timeline.events if e.kind == kind and len(e.parents) == parents
    )


# -- the history --------------------------------------------------------------------------------
def test_history_has_splits_two_and_three_parent_merges_gc_conflicts_and_chunked_values(history):
    stats = history.stats()
    assert stats["splits"] >= 3 and stats["merges"] >= 2
    assert sorted(len(e.parents) for e in history.timeline.merges) == [2, 3]
    assert stats["gc"] >= 1 and stats["conflicts"] >= 1 and stats["chunked"] >= 1
    assert stats["partitions"] == 4 + 2 * stats["splits"] + stats["merges"]
    assert history.drops and history.drops[0].rows


def test_live_partitions_tile_the_key_space_without_gaps_at_several_instants(history):
    with BigtableEmulator(history) as emulator:
        client = emulator.client()
        for minutes in (0, 10, 25, 31, 47, 59, 120):
            emulator.set_now(START + timedelta(minutes=minutes))
            ranges = [
                RowRange(r.partition.row_range.start_key_closed, r.partition.row_range.end_key_open)
                for r in client.generate_initial_change_stream_partitions(
                    request={"table_name": history.table_name}
                )
            ]
            assert ranges[0].start == b"" and ranges[-1].end == b""
            assert all(a.end == b.start for a, b in zip(ranges, ranges[1:])), minutes


def test_lag_episode_spans_a_thirty_minute_boundary(history):
    (episode,) = history.lag_episodes
    offset = episode.boundary - START
    assert offset in (timedelta(minutes=30), timedelta(minutes=60), timedelta(minutes=90))
    assert episode.boundary - episode.end == timedelta(seconds=20)
    assert episode.hold_until - episode.boundary == timedelta(seconds=75)
    low, high = episode.start_us - 1, episode.hold_until_us + 1
    assert not [e for e in history.timeline.events if low <= e.at_us <= high]


def test_a_longer_lag_hold_moves_only_when_the_lagging_cluster_catches_up():
    default = generate_history(seed=3, start=START, hours=HOURS, commits_per_second=0.2)
    longer = generate_history(seed=3, start=START, hours=HOURS, commits_per_second=0.2,
                              lag_hold_after_boundary=timedelta(minutes=10))
    (a,), (b,) = default.lag_episodes, longer.lag_episodes

    assert (b.start, b.end, b.boundary) == (a.start, a.end, a.boundary)
    assert b.hold_until - b.boundary == timedelta(minutes=10)


def test_a_lag_hold_that_is_not_positive_is_refused_naming_it():
    with pytest.raises(HistoryConfigError, match="lag_hold_after_boundary 0:00:00 must be positive"):
        generate_history(seed=3, start=START, hours=HOURS, lag_hold_after_boundary=timedelta(0))


# -- reading the seeded history -----------------------------------------------------------------
def test_reading_every_partition_reproduces_the_true_state(full_read, history):
    records = full_read.records
    assert not full_read.waiting
    idents = [_ident(r) for r in records]
    assert len(idents) == len(set(idents)), "a record was delivered twice"
    seeded = {(c.row_key, c.commit_us, c.tiebreaker) for c in history.commits}
    assert seeded <= set(idents), "a record was missed"
    assert _apply(records, to_micros(END)) == history.true_state(END)
    middle = START + timedelta(minutes=37)
    assert _apply(records, to_micros(middle)) == history.true_state(middle)


def test_every_mutation_and_record_type_is_delivered(full_read):
    records = full_read.records
    kinds = {type(m) for r in records for m in r.mutations}
    assert kinds == {SetCell, DeleteFromColumn, DeleteFromFamily}
    assert any(
        isinstance(m, DeleteFromColumn) and m.start_us and m.end_us
        for r in records
        for m in r.mutations
    ), "a DeleteFromColumn with a closed time range"
    gc = [r for r in records if r.type == GARBAGE_COLLECTION]
    assert gc and all(r.source_cluster_id == "" for r in gc)
    assert all(r.source_cluster_id in ("c1", "c2") for r in records if r.type == "USER")
    row_deletes = [
        r for r in records if len(r.mutations) >= 2
        and all(isinstance(m, DeleteFromFamily) for m in r.mutations)
    ]
    assert row_deletes, "a row delete as one DeleteFromFamily per family"


def test_drop_row_range_in_the_history_deletes_each_dropped_row_per_family(full_read, history):
    drop = history.drops[0]
    dropped = [r for r in full_read.records if r.commit_us == drop.at_us and r.row_key in drop.rows]
    assert sorted(r.row_key for r in dropped) == sorted(drop.rows)
    assert all(all(isinstance(m, DeleteFromFamily) for m in r.mutations) for r in dropped)
    after = history.true_state(to_datetime(drop.at_us + 1))
    assert not [row for row in after if row.startswith(drop.prefix)]


def test_chunked_values_reassemble_to_the_original_bytes(full_read, history):
    by_ident = {(c.row_key, c.commit_us, c.tiebreaker): c for c in history.commits}
    chunked = [r for r in full_read.records if r.chunked]
    assert chunked
    for record in chunked:
        assert tuple(record.mutations) == by_ident[_ident(record)].mutations
        assert any(len(m.value) > 1024 for m in record.mutations if isinstance(m, SetCell))


def test_conflicting_writes_share_the_commit_timestamp_with_different_tiebreakers(
    full_read, history
):
    delivered = {_ident(r): r for r in full_read.records}
    for first, second in history.conflicts:
        a, b = delivered[_ident(first)], delivered[_ident(second)]
        assert a.commit_us == b.commit_us and a.row_key == b.row_key
        assert a.tiebreaker != b.tiebreaker and {a.source_cluster_id, b.source_cluster_id} == {
            "c1",
            "c2",
        }
        winner = max((a, b), key=lambda r: r.tiebreaker).mutations[0]
        later = history.true_state(to_datetime(a.commit_us + 1))
        assert later[a.row_key]["cf"][b"status"][winner.timestamp_us] == winner.value


def test_records_longer_than_max_chunks_continue_in_continuation_messages(live):
    emulator = BigtableEmulator(live.history, chunk_size=16).start()
    try:
        client = emulator.client()
        begin = emulator.now
        value = bytes(range(100))  # 7 chunks of 16 bytes: 2 messages of at most 4 chunks
        client.mutate_row(
            table_name=live.history.table_name,
            row_key=b"user#0001",
            mutations=[bt.Mutation(set_cell=bt.Mutation.SetCell(
                family_name="cf", column_qualifier=b"payload", timestamp_micros=-1, value=value
            ))],
        )
        partition = RowRange(b"", live.history.partitions[0].range.end)
        request = bt.ReadChangeStreamRequest(
            table_name=live.history.table_name,
            partition=bt.StreamPartition(row_range=bt.RowRange(
                start_key_closed=partition.start, end_key_open=partition.end
            )),
            start_time=begin,
            end_time=emulator.now,
        )
        messages = [
            r.data_change for r in client.read_change_stream(request=request) if "data_change" in r
        ]
        Type = bt.ReadChangeStreamResponse.DataChange.Type
        assert [m.type_ for m in messages] == [Type.USER, Type.CONTINUATION]
        assert [m.done for m in messages] == [False, True]
        assert not messages[0].token and messages[1].token
        assert messages[0].row_key == b"user#0001" and not messages[1].row_key
        assert b"".join(c.mutation.set_cell.value for m in messages for c in m.chunks) == value
        read = read_partition(client, live.history.table_name, partition, start=begin,
                              end=emulator.now)
        assert read.records[0].mutations[0].value == value and read.records[0].messages == 2
    finally:
        emulator.stop()


def test_resuming_from_a_token_neither_repeats_nor_misses_a_record(client, history):
    partition = history.partitions[1]
    end = to_datetime(partition.end_us) + timedelta(minutes=1)
    whole = read_partition(client, history.table_name, partition.range, start=START, end=end)
    assert len(whole.records) > 20
    cut = whole.records[9]
    resumed = read_partition(
        client, history.table_name, partition.range, tokens=[(partition.range, cut.token)], end=end
    )
    assert [_ident(r) for r in resumed.records] == [_ident(r) for r in whole.records[10:]]
    assert resumed.close_code == whole.close_code == 11
    assert resumed.new_partitions == whole.new_partitions


def test_resuming_from_the_end_token_of_a_window_continues_the_next_window(client, history):
    middle = START + timedelta(minutes=23)
    first = read_all(client, history.table_name, start=START, end=middle - US)
    second = read_all(client, history.table_name, resume=first.end_tokens, end=END - US)
    both = [_ident(r) for r in first.records + second.records]
    assert len(both) == len(set(both))
    assert _apply(first.records + second.records, to_micros(END)) == history.true_state(END)


def test_split_closes_with_out_of_range_tokens_and_children_continue(client, history):
    split = _event(history, "split", 1)
    parent = history.timeline.partitions[split.parents[0]]
    children = [history.timeline.partitions[c] for c in split.children]
    end = to_datetime(split.at_us) + timedelta(minutes=5)
    read = read_partition(client, history.table_name, parent.range, start=parent.birth, end=end)
    assert read.close_code == 11
    assert read.new_partitions == [c.range for c in children]
    assert [r for r, _ in read.close_tokens] == [c.range for c in children]
    assert [_ident(r) for r in read.records] == _expected(
        history, parent.range, parent.birth_us, split.at_us - 1
    )
    for child, (token_range, token) in zip(children, read.close_tokens):
        continued = read_partition(
            client, history.table_name, child.range, tokens=[(token_range, token)], end=end
        )
        got = [_ident(r) for r in continued.records]
        want = _expected(history, child.range, split.at_us, to_micros(end))
        assert got[: len(want)] == want


@pytest.mark.parametrize("parents", [2, 3])
def test_merge_closes_each_parent_and_the_child_reads_from_all_tokens(client, history, parents):
    merge = _event(history, "merge", parents)
    child = history.timeline.partitions[merge.children[0]]
    end = to_datetime(merge.at_us) + timedelta(minutes=5)
    tokens = []
    for pid in merge.parents:
        parent = history.timeline.partitions[pid]
        read = read_partition(client, history.table_name, parent.range, start=parent.birth, end=end)
        assert read.close_code == 11 and read.new_partitions == [child.range]
        assert [r for r, _ in read.close_tokens] == [parent.range]
        tokens += read.close_tokens
    with pytest.raises(exceptions.InvalidArgument, match="gap|single token"):
        read_partition(client, history.table_name, child.range, tokens=tokens[:-1], end=end)
    continued = read_partition(client, history.table_name, child.range, tokens=tokens, end=end)
    want = _expected(history, child.range, merge.at_us, to_micros(end))
    assert [_ident(r) for r in continued.records][: len(want)] == want


def test_lag_episode_holds_the_partition_watermark_until_hold_until(client, history):
    (episode,) = history.lag_episodes
    window_end = episode.boundary - US
    read = read_partition(
        client, history.table_name, episode.row_range,
        start=episode.start - timedelta(minutes=1), end=window_end,
    )
    assert read.close_code == 0
    held = [r for r in read.records if r.source_cluster_id == "c2"
            and episode.start_us <= r.commit_us <= episode.end_us]
    first_held = read.records.index(held[0])
    assert held and all(r.commit_us < episode.boundary_us for r in held)
    before = read.records[:first_held]
    stuck = [r for r in before if r.commit_us > episode.start_us + 60_000_000]
    assert stuck and all(r.watermark_us <= held[0].commit_us for r in stuck)
    assert any(r.commit_us > episode.boundary_us for r in before), "newer records come first"
    final_watermark = read.heartbeats[-1][2]
    assert final_watermark > episode.boundary_us


def test_heartbeats_carry_the_position_token_and_the_watermark(live):
    client = live.client()
    partition = live.history.partitions[0].range
    begin = live.now
    read = read_partition(client, live.history.table_name, partition, start=begin,
                          heartbeat=timedelta(milliseconds=50), max_heartbeats=3)
    assert len(read.heartbeats) == 3
    for beat_range, token, watermark in read.heartbeats:
        assert beat_range == partition and token
        assert to_micros(begin) <= watermark <= to_micros(live.now)
    assert [w for _, _, w in read.heartbeats] == sorted(w for _, _, w in read.heartbeats)
    client.mutate_row(
        table_name=live.history.table_name, row_key=b"session#001",
        mutations=[bt.Mutation(set_cell=bt.Mutation.SetCell(
            family_name="cf", column_qualifier=b"name", timestamp_micros=-1, value=b"late"))],
    )
    resumed = read_partition(client, live.history.table_name, partition,
                             tokens=[(partition, read.heartbeats[-1][1])], end=live.now)
    assert [r.row_key for r in resumed.records] == [b"session#001"]


def test_start_time_older_than_retention_is_refused_with_out_of_range():
    history = generate_history(seed=3, start=START, hours=0.2, lag_episode=False,
                               retention=timedelta(hours=1))
    with BigtableEmulator(history, now=START + timedelta(hours=2)) as emulator:
        partition = history.partitions_live_at(START + timedelta(hours=2))[0]
        with pytest.raises(exceptions.OutOfRange, match="retention") as caught:
            read_partition(emulator.client(), history.table_name, partition.range,
                           start=START + timedelta(minutes=30), end=emulator.now)
        assert str(partition.range) in str(caught.value)


def test_a_range_that_is_not_a_partition_closes_with_the_live_partitions(client, history):
    read = read_partition(client, history.table_name, RowRange(b"", b""), start=START, end=END)
    initial = history.partitions_live_at(START)
    assert read.close_code == 11 and not read.records
    assert read.new_partitions == [p.range for p in initial]
    assert [r for r, _ in read.close_tokens] == [p.range for p in initial]


def test_unknown_table_and_app_profile_are_not_found(client, history):
    with pytest.raises(exceptions.NotFound, match="nope"):
        list(client.generate_initial_change_stream_partitions(
            request={"table_name": "projects/p/instances/i/tables/nope"}))
    with pytest.raises(exceptions.NotFound, match="ghost"):
        list(client.generate_initial_change_stream_partitions(
            request={"table_name": history.table_name, "app_profile_id": "ghost"}))


def test_c2_reader_sees_c1_writes_after_the_replication_lag(client, history):
    partition = history.partitions[2]
    end = to_datetime(partition.end_us) - US
    read = read_partition(client, history.table_name, partition.range, start=partition.birth,
                          end=end, app_profile_id="c2-reader")
    want = _expected(history, partition.range, partition.birth_us, partition.end_us - 1, "c2")
    assert [_ident(r) for r in read.records][: len(want)] == want


# -- writes through the client --------------------------------------------------------------
def _set(family, qualifier, value, ts=-1):
    return bt.Mutation(set_cell=bt.Mutation.SetCell(
        family_name=family, column_qualifier=qualifier, timestamp_micros=ts, value=value))


def test_writes_through_the_client_appear_in_the_stream_and_in_true_state(live):
    client, table = live.client(), live.history.table_name
    begin = live.now
    client.mutate_row(table_name=table, row_key=b"user#0100",
                      mutations=[_set("cf", b"name", b"ada"), _set("meta", b"tag", b"x")])
    client.mutate_row(table_name=table, row_key=b"user#0100",
                      mutations=[bt.Mutation(delete_from_row=bt.Mutation.DeleteFromRow())])
    list(client.mutate_rows(table_name=table, entries=[
        bt.MutateRowsRequest.Entry(row_key=b"user#0200", mutations=[_set("cf", b"n", b"1")]),
        bt.MutateRowsRequest.Entry(row_key=b"user#0300", mutations=[_set("cf", b"n", b"2")]),
    ]))
    matched = client.check_and_mutate_row(
        table_name=table, row_key=b"user#0200",
        predicate_filter=bt.RowFilter(column_qualifier_regex_filter=b"n"),
        true_mutations=[_set("cf", b"checked", b"yes")],
        false_mutations=[_set("cf", b"checked", b"no")],
    )
    assert matched.predicate_matched
    client.read_modify_write_row(table_name=table, row_key=b"user#0300", rules=[
        bt.ReadModifyWriteRule(family_name="cf", column_qualifier=b"count", increment_amount=5),
        bt.ReadModifyWriteRule(family_name="cf", column_qualifier=b"n", append_value=b"+"),
    ])
    result = read_all(client, table, start=begin, end=live.now)
    records = result.records
    assert sorted(r.row_key for r in records) == [
        b"user#0100", b"user#0100", b"user#0200", b"user#0200", b"user#0300", b"user#0300"
    ]
    assert all(r.source_cluster_id == "c1" and r.type == "USER" for r in records)
    delete = [r for r in records if r.row_key == b"user#0100"][1]
    assert delete.mutations == [DeleteFromFamily("cf"), DeleteFromFamily("meta")]
    assert all(r.mutations[0].timestamp_us % 1000 == 0
               for r in records if isinstance(r.mutations[0], SetCell))
    truth = live.true_state(live.now + US)
    assert b"user#0100" not in truth
    assert list(truth[b"user#0200"]["cf"][b"checked"].values()) == [b"yes"]
    assert list(truth[b"user#0300"]["cf"][b"count"].values()) == [(5).to_bytes(8, "big")]
    versions = truth[b"user#0300"]["cf"][b"n"]
    assert versions[max(versions)] == b"2+"
    assert _apply(records, to_micros(live.now) + 1) == truth
    rows = list(client.read_rows(
        request={"table_name": table, "rows": {"row_keys": [b"user#0200"]}}
    ))
    values = {c.value for r in rows for c in r.chunks}
    assert values == {b"1", b"yes"} and rows[-1].chunks[-1].commit_row


def test_drop_row_range_through_the_admin_client_deletes_rows_per_family(live):
    client, table = live.client(), live.history.table_name
    client.mutate_row(table_name=table, row_key=b"session#007",
                      mutations=[_set("cf", b"a", b"1"), _set("meta", b"b", b"2")])
    client.mutate_row(table_name=table, row_key=b"user#0007", mutations=[_set("cf", b"a", b"3")])
    begin = live.now
    live.admin_client().drop_row_range(request={"name": table, "row_key_prefix": b"session#"})
    records = read_all(client, table, start=begin, end=live.now).records
    assert [(r.row_key, r.mutations) for r in records] == [
        (b"session#007", [DeleteFromFamily("cf"), DeleteFromFamily("meta")])
    ]
    assert list(live.true_state(live.now + US)) == [b"user#0007"]
