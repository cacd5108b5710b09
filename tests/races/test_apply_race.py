"""Two applies of the same window at once, on the same Iceberg tables, end as one apply.

Two threads of the suite's SparkSession run :func:`airflow_cdc.spark_jobs.apply.apply_window` for the
same window against the same Hadoop-catalog tables, as an orphaned spark-submit and the
task's retry would. A barrier holds each job before its dead-letter commit and before each
table's commits until the other got there too, so both have searched for the window's
commits (and found none) and folded the window from the same pre-window snapshots before
either commits: the worst interleaving, every time. Iceberg's optimistic concurrency then
lets one commit of each table through; the other job's commit conflicts (a MERGE by Iceberg's
own check, an append by the check ``append_tagged(read_at=...)`` asks for), and that job
takes the winner's tagged commit as its own. The same windows applied once, one after the
other, into another namespace are the reference.
"""

from __future__ import annotations

import threading

import pytest

from airflow_cdc.model import WINDOW_SNAPSHOT_PROPERTY
from tests.apply.support import Changes, Lake, at, window

W0, W1 = window(0), window(1)
TYPES = {"id": "INT64", "v": "STRING", "n": "INT64"}
TABLES = ("Items", "Items__tombstones", "Items__history", "orders_dead_letters")
OPTIONS = {"targets": {"history": True}, "policies": {"on_dead_letter": "continue"}}


def history() -> Changes:
    items = Changes("Items", TYPES)
    for key in range(1, 7):
        items.add(W0, "INSERT", key, {"v": f"a{key}", "n": key}, when=at(0, key))
    items.add(W0, "DELETE", 6, when=at(0, 30))
    items.add(W0, "UPDATE", 9, {"n": 9}, when=at(0, 31), image="PARTIAL")  # a dead letter
    items.add(W1, "UPDATE", 1, {"n": 10}, when=at(1, 1), image="PARTIAL")
    items.add(W1, "UPDATE", 2, {"v": "b2", "n": 20}, when=at(1, 2))
    items.add(W1, "DELETE", 3, when=at(1, 3))
    items.add(W1, "INSERT", 6, {"v": "again", "n": 60}, when=at(1, 4))
    items.add(W1, "INSERT", 7, {"v": "a7", "n": 7}, when=at(1, 5))
    items.add(W1, "UPDATE", 8, {"n": 8}, when=at(1, 6), image="PARTIAL")  # a dead letter
    return items


def contents(lake: Lake) -> dict:
    """Every table's rows, in a stable order, as text comparable across namespaces (a dead
    letter names its target table)."""
    return {
        table: sorted(repr(sorted(row.asDict(recursive=True).items())).replace(lake.namespace, "<ns>")
                      for row in lake.spark.table(lake.table(table)).collect())
        for table in TABLES
    }


def tagged(lake: Lake, table: str, win) -> int:
    return sum(s["summary"].get(WINDOW_SNAPSHOT_PROPERTY) == win.window_id for s in lake.snapshots(table))


def at_once(run, keys: list) -> None:
    """``run(key)`` for each of ``keys`` in a thread of its own (named after the key), at once."""
    threads = [threading.Thread(target=run, args=(key,), name=str(key)) for key in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def race(lake: Lake, win, monkeypatch) -> list:
    """Two applies of ``win`` in two threads, held together before each commit step."""
    import airflow_cdc.spark_jobs.apply.job as job
    import airflow_cdc.spark_jobs.apply.table_commits as table_commits

    barrier = threading.Barrier(2, timeout=300)

    def held(step):
        def run(*args, **kwargs):
            barrier.wait()
            return step(*args, **kwargs)

        return run

    with monkeypatch.context() as patched:
        patched.setattr(job, "commit_dead_letters", held(job.commit_dead_letters))
        patched.setattr(table_commits, "commit_table", held(table_commits.commit_table))
        outcomes: list = [None, None]

        def apply(index: int) -> None:
            try:
                outcomes[index] = lake.apply(win, **OPTIONS)
            except BaseException as error:  # reported below, with the other thread's outcome
                barrier.abort()
                outcomes[index] = error

        at_once(apply, [0, 1])
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert not errors, "\n".join(str(e) for e in errors)  # a Py4JJavaError's str holds the Java error
    return outcomes


@pytest.fixture(scope="module")
def applied(spark, warehouse):
    with pytest.MonkeyPatch.context() as monkeypatch:
        once = Lake(spark, warehouse, "races_apply_once")
        raced = Lake(spark, warehouse, "races_apply_raced")
        for lake in (once, raced):
            lake.write(history())
        state = {"once": once, "raced": raced}
        state["W0 once"] = once.apply(W0, **OPTIONS)
        state["W0 raced"] = race(raced, W0, monkeypatch)
        state["after W0"] = (contents(once), contents(raced))
        state["W0 tags"] = {table: tagged(raced, table, W0) for table in TABLES}
        once.apply(W1, **OPTIONS)
        state["W1 raced"] = race(raced, W1, monkeypatch)
        state["after W1"] = (contents(once), contents(raced))
        yield state


def test_two_applies_of_a_tables_first_window_at_once_append_it_once(applied):
    once, raced = applied["after W0"]
    assert raced == once
    assert applied["W0 tags"] == {table: 1 for table in TABLES}


def test_both_racing_applies_of_a_first_window_succeed_and_report_the_one_commit(applied):
    first, second = applied["W0 raced"]
    assert first.status == second.status == "applied"
    assert first.to_json() == second.to_json()
    [table] = first.tables
    assert (table.upserts, table.deletes, first.dead_letter_rows) == (5, 1, 1)


def test_two_applies_of_a_later_window_at_once_merge_it_as_one_apply(applied):
    once, raced = applied["after W1"]
    assert raced == once
    first, second = applied["W1 raced"]
    assert first.status == second.status == "applied"
    assert first.dead_letter_snapshot_id == second.dead_letter_snapshot_id


# --- an orphaned apply committing after the retry compacted ----------------------------------
MERGE_ON_READ = {**OPTIONS, "targets": {"history": True, "write_mode": "merge-on-read", "compact_delete_files": 1}}


def orphan_after_compaction(lake: Lake, win, monkeypatch, look_again: bool = True) -> dict:
    """An orphaned apply of ``win`` folds the window and waits, before its commits, until the
    task's retry has applied the window whole, its compaction included; then it commits.
    ``look_again=False``: the orphan's last look for the window's commits, right before each
    MERGE, finds none (the retry's commit landed just after it). Returns both results."""
    import airflow_cdc.spark_jobs.apply.table_commits as table_commits

    folded, retried = threading.Event(), threading.Event()
    commit_table = table_commits.commit_table

    def held(*args, **kwargs):
        if threading.current_thread().name == "orphan":
            folded.set()
            assert retried.wait(300), "the retry never finished"
        else:
            assert folded.wait(300), "the orphan never folded the window"
        return commit_table(*args, **kwargs)

    outcomes: dict = {}

    def apply(name: str) -> None:
        try:
            outcomes[name] = lake.apply(win, **MERGE_ON_READ)
        except BaseException as error:  # reported below
            outcomes[name] = error
        finally:
            if name == "retry":
                retried.set()
            else:
                folded.set()

    from airflow_cdc.spark_jobs.commits import commit_once, commit_or_take

    def look(*args, **kwargs):  # the orphan without its last look: it makes the commit or conflicts
        if not look_again and threading.current_thread().name == "orphan":
            return commit_or_take(*args, **kwargs)
        return commit_once(*args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(table_commits, "commit_table", held)
        patched.setattr(table_commits, "commit_once", look)
        at_once(apply, ["orphan", "retry"])
    errors = {name: o for name, o in outcomes.items() if isinstance(o, BaseException)}
    assert not errors, errors
    return outcomes


@pytest.fixture(scope="module")
def compacted(spark, warehouse):
    with pytest.MonkeyPatch.context() as monkeypatch:
        once = Lake(spark, warehouse, "races_compact_once")
        raced = Lake(spark, warehouse, "races_compact_raced")
        for lake in (once, raced):
            lake.write(history())
            lake.apply(W0, **MERGE_ON_READ)
        once.apply(W1, **MERGE_ON_READ)
        outcomes = orphan_after_compaction(raced, W1, monkeypatch)
        late = Lake(spark, warehouse, "races_compact_late")
        late.write(history())
        late.apply(W0, **MERGE_ON_READ)
        late_outcomes = orphan_after_compaction(late, W1, monkeypatch, look_again=False)
        yield {"once": contents(once), "raced": contents(raced), "outcomes": outcomes,
               "W1 tags": {table: tagged(raced, table, W1) for table in TABLES},
               "late": contents(late), "late outcomes": late_outcomes}


@pytest.mark.long
def test_an_orphaned_apply_committing_after_the_retrys_compaction_leaves_every_table_as_one_apply(compacted):
    assert compacted["raced"] == compacted["once"]
    assert compacted["W1 tags"] == {table: 1 for table in TABLES}


@pytest.mark.long
def test_the_retry_compacts_and_the_orphan_takes_its_commits_both_applied_without_compaction_errors(compacted):
    retry, orphan = compacted["outcomes"]["retry"], compacted["outcomes"]["orphan"]
    assert retry.status == orphan.status == "applied"
    [retried], [orphaned] = retry.tables, orphan.tables
    assert retried.compacted_tables and not retried.compaction_errors
    assert not orphaned.compaction_errors
    assert (orphaned.upserts, orphaned.deletes) == (retried.upserts, retried.deletes)


@pytest.mark.long
def test_an_orphaned_merge_reading_the_table_after_the_retrys_commit_changes_no_row(compacted):
    assert compacted["late"] == compacted["once"]
    assert {name: r.status for name, r in compacted["late outcomes"].items()} == {"orphan": "applied", "retry": "applied"}
