"""The window's column declarations as the changelog commit records them, and when apply uses them.

Apply plans its targets from the record instead of aggregating the window's rows; a record
that does not describe the rows (rows deleted since, counts that differ) is not used.
"""

from __future__ import annotations

from dataclasses import replace

from airflow_cdc.model import CHANGELOG_COLUMNS, change_row_to_record

from .support import Changes, at, values_of, window

TYPES = {"id": "INT64", "name": "STRING", "balance": "INT64"}
W0, W1 = window(0), window(1)


def window_frame(lake, *changes: Changes, win):
    """The window's change rows as a changelog frame."""
    from airflow_cdc.spark_jobs.changelog import changelog_schema

    rows = [row for c in changes for row in c.rows if row.window_id == win.window_id]
    records = [change_row_to_record(row) for row in rows]
    return lake.spark.createDataFrame([tuple(r[name] for name, _ in CHANGELOG_COLUMNS) for r in records], changelog_schema())


def write_recorded(lake, *changes: Changes, win, declarations=None) -> None:
    """Commit the window's rows as the extract does: one tagged commit recording its declarations."""
    from airflow_cdc.spark_jobs.changelog import append_window, create_changelog_table, window_declarations

    frame = window_frame(lake, *changes, win=win)
    create_changelog_table(lake.spark, lake.changelog)
    recorded = window_declarations(frame) if declarations is None else declarations
    append_window(lake.spark, lake.changelog, win.window_id, frame, declarations=recorded)


def accounts_history() -> Changes:
    accounts = Changes("Accounts", TYPES)
    for key in range(1, 5):
        accounts.add(W0, "INSERT", key, {"name": f"n{key}", "balance": key}, when=at(0, key))
    # Window 1 declares a new column from its second change on.
    accounts.add(W1, "UPDATE", 1, {"balance": 10}, when=at(1, 1), image="PARTIAL")
    wider = {**TYPES, "note": "STRING"}
    accounts.add(W1, "UPDATE", 2, {"note": "x"}, when=at(1, 2), image="PARTIAL", column_types=wider)
    accounts.add(W1, "DELETE", 3, when=at(1, 3), column_types=wider)
    return accounts


def test_the_window_commit_records_its_declarations(lake):
    from airflow_cdc.spark_jobs.changelog import recorded_declarations, window_declarations

    accounts = accounts_history()
    write_recorded(lake, accounts, win=W1)
    [snapshot] = [s for s in lake.snapshots(f"{'orders'}_changelog")]
    recorded = recorded_declarations(snapshot["summary"])
    rows = lake.spark.table(lake.changelog)

    def key(d):
        return (d.source_table, d.column_types_json)

    assert sorted(recorded, key=key) == sorted(window_declarations(rows), key=key)
    assert sorted(d.rows for d in recorded) == [1, 2]


def test_a_window_applied_from_its_record_matches_one_applied_from_its_rows(lake, spark, warehouse):
    from .support import Lake

    accounts = accounts_history()
    plain = Lake(spark, warehouse, f"{lake.namespace}_plain")
    for win in (W0, W1):
        write_recorded(lake, accounts, win=win)
        plain.write(accounts, win=win)
        assert counts(lake.apply(win)) == counts(plain.apply(win))
    assert lake.rows("Accounts") == plain.rows("Accounts")
    assert values_of(lake.rows("Accounts"), "name", "balance", "note") == {
        1: ("n1", 10, None), 2: ("n2", 2, "x"), 4: ("n4", 4, None)
    }


def counts(result) -> list[dict]:
    """What apply reports of each table, but for the names and snapshot ids of its own tables."""
    mine = ("target_table", "target_snapshot_id", "tombstone_snapshot_id", "history_snapshot_id")
    return [{k: v for k, v in vars(t).items() if k not in mine} for t in result.tables]


def test_rows_deleted_from_the_changelog_after_its_commit_are_not_applied(lake):
    accounts = accounts_history()
    write_recorded(lake, accounts, win=W0)
    lake.spark.sql(f"DELETE FROM {lake.changelog} WHERE keys['id'] = '4'")
    result = lake.apply(W0)
    assert result.table("Accounts").changes == 3
    assert sorted(values_of(lake.rows("Accounts"), "name")) == [1, 2, 3]


def test_a_record_whose_table_counts_differ_from_the_rows_is_not_used(lake):
    from airflow_cdc.spark_jobs.changelog import window_declarations

    accounts = accounts_history()
    singers = Changes("Singers", {"id": "INT64", "name": "STRING"})
    singers.add(W0, "INSERT", 1, {"name": "s"}, when=at(0, 9))
    rows = window_frame(lake, accounts, singers, win=W0)
    # The same total as the commit's rows, split otherwise: Accounts 3 (has 4), Singers 2 (has 1).
    wrong = [replace(d, rows=3 if d.source_table == "Accounts" else 2) for d in window_declarations(rows)]
    write_recorded(lake, accounts, singers, win=W0, declarations=wrong)
    result = lake.apply(W0)
    assert (result.table("Accounts").changes, result.table("Singers").changes) == (4, 1)
    assert sorted(values_of(lake.rows("Accounts"), "name")) == [1, 2, 3, 4]
    assert values_of(lake.rows("Singers"), "name") == {1: ("s",)}


def test_a_record_that_does_not_account_for_the_commit_is_not_used():
    from airflow_cdc.spark_jobs.changelog import DECLARATIONS_PROPERTY, recorded_declarations

    record = '[["Accounts","{\\"id\\":\\"INT64\\"}",2,"2024-05-01T10:00:01.000000Z"]]'
    [declaration] = recorded_declarations({DECLARATIONS_PROPERTY: record, "added-records": "2"})
    assert (declaration.source_table, declaration.rows) == ("Accounts", 2)
    assert recorded_declarations({DECLARATIONS_PROPERTY: record, "added-records": "3"}) is None
    assert recorded_declarations({DECLARATIONS_PROPERTY: "[[1,2]]", "added-records": "2"}) is None
    assert recorded_declarations({"added-records": "2"}) is None


def test_a_record_past_the_size_limit_is_left_out_of_the_summary():
    from airflow_cdc.spark_jobs.changelog import DECLARATIONS_LIMIT, Declaration, declarations_properties

    wide = Declaration("Wide", "x" * DECLARATIONS_LIMIT, 1, None)
    assert declarations_properties([wide]) == {}
    assert declarations_properties([replace(wide, column_types_json="{}")]) != {}


def test_a_window_with_a_record_is_planned_without_aggregating_its_rows(lake, monkeypatch):
    import airflow_cdc.spark_jobs.apply.declarations as job

    def aggregate(rows):
        raise AssertionError("the window's rows were aggregated although its commit records its declarations")

    monkeypatch.setattr(job, "window_declarations", aggregate)
    accounts = accounts_history()
    write_recorded(lake, accounts, win=W0)
    assert lake.apply(W0).table("Accounts").upserts == 4


def test_a_second_commit_of_the_window_makes_apply_aggregate_its_rows(lake):
    # Two racing extract attempts both committed the window: the first (oldest) found no rows.
    accounts = accounts_history()
    write_recorded(lake, Changes("Accounts", TYPES), win=W0)
    write_recorded(lake, accounts, win=W0)
    result = lake.apply(W0)
    assert result.table("Accounts").upserts == 4
    assert sorted(values_of(lake.rows("Accounts"), "name")) == [1, 2, 3, 4]


def test_a_table_the_record_would_dead_letter_whole_is_checked_against_its_rows(lake):
    # The record leaves out the declaration that types the key column: planned from it, the
    # table would be dead-lettered whole with "no type"; its rows say otherwise.
    from airflow_cdc.spark_jobs.changelog import window_declarations

    accounts = accounts_history()
    frame = window_frame(lake, accounts, win=W0)
    untyped = [replace(d, column_types_json='{"name":"STRING","balance":"INT64"}') for d in window_declarations(frame)]
    write_recorded(lake, accounts, win=W0, declarations=untyped)
    result = lake.apply(W0)
    assert (result.table("Accounts").upserts, result.dead_letter_rows) == (4, 0)
