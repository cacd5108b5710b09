"""Folding a window per key: partial and full images, revives, deletes, clashes, dead letters.

One window (hour 1) is applied onto a target built by hour 0; each key of it exercises one rule
and each test below checks one key's outcome.
"""

from __future__ import annotations

import pytest

from .support import Changes, at, normalized, seq, values_of, window

TYPES = {"id": "INT64", "name": "STRING", "balance": "INT64", "note": "STRING"}
W0, W1 = window(0), window(1)


@pytest.fixture(scope="module")
def applied(module_lake):
    lake = module_lake
    accounts = Changes("Accounts", TYPES)
    for key in range(1, 7):
        accounts.add(W0, "INSERT", key, {"name": f"n{key}", "balance": key * 10, "note": "old"}, when=at(0, key))
    lake.write(accounts, win=W0)
    lake.apply(W0)

    accounts.rows.clear()
    # key 1: two partial images (Spanner NEW_VALUES): balance changes, then note is set to NULL.
    accounts.add(W1, "UPDATE", 1, {"balance": 200}, when=at(1, 1), image="PARTIAL")
    accounts.add(W1, "UPDATE", 1, {"note": None}, when=at(1, 2), image="PARTIAL")
    # key 2: a full image (NEW_ROW) without note: note becomes NULL.
    accounts.add(W1, "UPDATE", 2, {"name": "b2", "balance": 5}, when=at(1, 1))
    # key 3: deleted, then inserted again.
    accounts.add(W1, "DELETE", 3, when=at(1, 1))
    accounts.add(W1, "INSERT", 3, {"name": "c-new", "balance": 1, "note": "x"}, when=at(1, 2))
    # key 4: updated, then deleted.
    accounts.add(W1, "UPDATE", 4, {"balance": 44}, when=at(1, 1), image="PARTIAL")
    accounts.add(W1, "DELETE", 4, when=at(1, 2))
    # key 5: deleted, then a partial image: the row's other columns are gone.
    accounts.add(W1, "DELETE", 5, when=at(1, 1))
    accounts.add(W1, "UPDATE", 5, {"balance": 55}, when=at(1, 2), image="PARTIAL")
    # key 6: two different changes with one ordering key (a source bug).
    accounts.add(W1, "UPDATE", 6, {"balance": 61}, when=at(1, 1), image="PARTIAL", ordering_key=seq(at(1, 1)))
    accounts.add(W1, "UPDATE", 6, {"balance": 62}, when=at(1, 1), image="PARTIAL", ordering_key=seq(at(1, 1)))
    # key 7: a partial image for a key the target never had.
    accounts.add(W1, "UPDATE", 7, {"balance": 77}, when=at(1, 1), image="PARTIAL")
    # key 8: arrives newest first; insert then partial image.
    accounts.add(W1, "UPDATE", 8, {"balance": 9}, when=at(1, 2), image="PARTIAL")
    accounts.add(W1, "INSERT", 8, {"name": "h", "balance": 8, "note": "n"}, when=at(1, 1))
    # key 9: the same insert delivered twice (at-least-once delivery).
    accounts.add(W1, "INSERT", 9, {"name": "i", "balance": 90, "note": None}, when=at(1, 3))
    accounts.add(W1, "INSERT", 9, {"name": "i", "balance": 90, "note": None}, when=at(1, 3))
    lake.write(accounts, win=W1)
    result = lake.apply(W1, policies={"on_dead_letter": "continue"})
    return lake, result


def target(applied) -> dict:
    lake, _ = applied
    return values_of(lake.rows("Accounts"), "name", "balance", "note")


def dead_letters(applied) -> dict:
    lake, _ = applied
    rows = lake.rows(f"{'orders'}_dead_letters", order_by="to_json(keys),ordering_key")
    found: dict = {}
    for row in rows:
        found.setdefault(tuple(sorted(row["keys"].items())), []).append(row["reason"])
    return found


def test_partial_images_merge_column_by_column_and_null_differs_from_absent(applied):
    assert target(applied)[1] == ("n1", 200, None)


def test_full_image_replaces_the_whole_row(applied):
    assert target(applied)[2] == ("b2", 5, None)


def test_insert_after_delete_revives_the_key(applied):
    assert target(applied)[3] == ("c-new", 1, "x")


def test_delete_wins_over_earlier_changes_and_leaves_a_tombstone(applied):
    lake, _ = applied
    assert 4 not in target(applied)
    tombstones = lake.rows("Accounts__tombstones")
    assert [row["id"] for row in tombstones] == [4]
    assert tombstones[0]["_cdc_seq"] == seq(at(1, 2))


def test_partial_image_after_a_delete_in_the_window_is_dead_lettered(applied):
    assert target(applied)[5] == ("n5", 50, "old")
    reasons = dead_letters(applied)[(("id", "5"),)]
    assert len(reasons) == 2 and all("after a delete" in r for r in reasons)


def test_equal_ordering_keys_for_one_key_are_reported_never_resolved(applied):
    _, result = applied
    assert target(applied)[6] == ("n6", 60, "old")
    reasons = dead_letters(applied)[(("id", "6"),)]
    assert len(reasons) == 2 and all("same ordering key" in r for r in reasons)
    assert result.table("Accounts").clashing_keys == 1


def test_partial_image_for_a_key_the_target_does_not_hold_is_dead_lettered(applied):
    assert 7 not in target(applied)
    (reason,) = dead_letters(applied)[(("id", "7"),)]
    assert "does not hold" in reason


def test_changes_fold_in_ordering_key_order_not_arrival_order(applied):
    assert target(applied)[8] == ("h", 9, "n")


def test_a_redelivered_identical_change_is_applied_once(applied):
    assert target(applied)[9] == ("i", 90, None)
    assert '{"id":9}' not in dead_letters(applied)


def test_dead_letters_keep_the_raw_row_and_the_window(applied):
    lake, _ = applied
    rows = lake.rows("orders_dead_letters", order_by="to_json(keys),ordering_key")
    assert {row["window_id"] for row in rows} == {W1.window_id}
    assert {row["target_table"] for row in rows} == {lake.table("Accounts")}
    partial = next(row for row in rows if row["keys"] == {"id": "7"})
    assert (partial["op"], partial["image"], partial["new_values"]) == ("UPDATE", "PARTIAL", {"balance": "77"})


def test_counts_report_each_outcome(applied):
    _, result = applied
    table = result.table("Accounts")
    assert (table.upserts, table.patches, table.deletes, table.dead_keys) == (4, 1, 1, 3)
    assert table.dead_letter_rows == 5 and result.dead_letter_rows == 5


def test_pyiceberg_reads_the_same_target_as_spark(applied):
    lake, _ = applied
    assert normalized(lake.pyiceberg_rows("Accounts")) == normalized(lake.rows("Accounts"))


@pytest.mark.long
def test_a_table_wider_than_one_packed_flag_word_folds_every_column(lake):
    # 70 value columns: their touched flags, with bad/delete/reset, take two 62-bit words.
    columns = [f"c{i:02d}" for i in range(70)]
    wide = Changes("Wide", {"id": "INT64", **{c: "INT64" for c in columns}})
    wide.add(W0, "INSERT", 1, {c: i for i, c in enumerate(columns)}, when=at(0, 1))
    lake.write(wide, win=W0)
    lake.apply(W0)
    wide.rows.clear()
    wide.add(W1, "UPDATE", 1, {"c01": -1, "c60": -60}, when=at(1, 1), image="PARTIAL")
    wide.add(W1, "UPDATE", 1, {"c69": None}, when=at(1, 2), image="PARTIAL")
    lake.write(wide, win=W1)
    lake.apply(W1)
    [row] = lake.rows("Wide")
    expected = {c: i for i, c in enumerate(columns)} | {"c01": -1, "c60": -60, "c69": None}
    assert {c: row[c] for c in columns} == expected


@pytest.mark.parametrize(
    ("rows", "parallelism", "rows_per_task", "tasks"),
    [
        (616_781, 2, 500_000, 2),  # the bench's second window on two cores: one task per core
        (2_000_001, 2, 500_000, 6),  # more rows than one wave holds: whole waves of tasks
        (400_000, 4, 500_000, 4),
        (399_999, 4, 500_000, None),  # under a fifth of a task's rows per core: left to Spark
        (10, 1, 500_000, None),
    ],
)
def test_fold_tasks_are_whole_waves_of_the_cores_with_bounded_rows(rows, parallelism, rows_per_task, tasks):
    from airflow_cdc.spark_jobs.apply.partitioning import fold_partitions

    assert fold_partitions(rows, parallelism, rows_per_task) == tasks


def test_a_window_folded_in_many_tasks_gives_the_same_target(lake):
    # 6,000 changes of 3,000 keys, 1,000 rows per task, at the suite's parallelism of four:
    # two waves of four tasks, each writing one file of the target's first commit.
    accounts = Changes("Accounts", TYPES)
    for key in range(3000):
        accounts.add(W0, "INSERT", key, {"name": f"n{key}", "balance": key}, when=at(0, key % 600))
        accounts.add(W0, "UPDATE", key, {"balance": -key}, when=at(0, 600 + key % 600), image="PARTIAL")
    lake.write(accounts, win=W0)
    lake.apply(W0, fold_rows_per_task=1000)
    assert lake.spark.sparkContext.defaultParallelism == 4
    [snapshot] = lake.snapshots("Accounts")
    assert int(snapshot["summary"]["added-data-files"]) == 8
    assert values_of(lake.rows("Accounts"), "name", "balance") == {k: (f"n{k}", -k) for k in range(3000)}


def test_one_statement_folds_a_table_as_its_two_statements_do(applied):
    # A table without history folds in one statement (fold.folded_changes); the same window
    # folded as ordered_changes then fold_table (the history's two statements, the switch
    # fold_in_one_statement off) gives the same row per key: guard, redelivery, clash, stale,
    # partial and full images alike.
    lake, _ = applied
    w2 = window(2)
    accounts = Changes("Accounts", TYPES)
    accounts.add(w2, "UPDATE", 1, {"balance": 300}, when=at(2, 1), image="PARTIAL")
    accounts.add(w2, "UPDATE", 2, {"name": "late", "balance": 0}, when=at(0, 30))  # older than the target's
    accounts.add(w2, "DELETE", 3, when=at(2, 1))
    accounts.add(w2, "INSERT", 4, {"name": "zombie", "balance": 4}, when=at(1, 1))  # older than its tombstone
    accounts.add(w2, "INSERT", 10, {"name": "j", "balance": 10, "note": "new"}, when=at(2, 1))
    accounts.add(w2, "UPDATE", 10, {"note": None}, when=at(2, 2), image="PARTIAL")
    accounts.add(w2, "UPDATE", 11, {"balance": 1}, when=at(2, 1), image="PARTIAL", ordering_key=seq(at(2, 1)))
    accounts.add(w2, "UPDATE", 11, {"balance": 2}, when=at(2, 1), image="PARTIAL", ordering_key=seq(at(2, 1)))
    accounts.add(w2, "INSERT", 12, {"name": "l", "balance": 12}, when=at(2, 3))
    accounts.add(w2, "INSERT", 12, {"name": "l", "balance": 12}, when=at(2, 3))
    lake.write(accounts, win=w2)
    one_statement = _folded_rows(lake, w2)
    assert _folded_rows(lake, w2, strategies={"fold_in_one_statement": False}) == one_statement
    actions = {row["__key"]: row["__action"] for row in one_statement}
    assert actions == {"v1": "PATCH", "v2": "STALE", "v3": "DELETE", "v4": "STALE", "v10": "UPSERT",
                       "v11": "DEAD", "v12": "UPSERT"}


def _folded_rows(lake, win, **overrides) -> list[dict]:
    """The folded rows of ``win`` (folded, not applied), one dict per key in key order."""
    with lake.folded(win, policies={"on_dead_letter": "continue"}, **overrides) as works:
        [work] = works
        return [row.asDict(recursive=True) for row in work.folded.orderBy("__key").collect()]
