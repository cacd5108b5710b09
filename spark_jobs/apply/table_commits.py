"""Step 4 of apply: a table's missing window commits, each guarded by the ordering key.

Per table (:func:`commit_table`): create or evolve its tables (``schema.prepare_target``),
then make whichever of its three commits is due and missing (target MERGE, tombstone MERGE
with the purge, history MERGE; ``targets.py``), each tagged with the window. A target
without rows yet is appended to instead of merged (its first window, often an initial
snapshot, is the largest). A crash leaves any subset of these commits made; the re-run
recomputes the same outcome from the same pre-window state and makes only the missing ones.
Two applies of the window at once make each commit once: the one that loses a commit's race
takes the winner's tagged commit as its own. It loses it in one of two ways. Its MERGE read
the table before the winner's commit: Iceberg refuses its commit as a conflict. Or the
winner committed first (an orphaned job that folded the window long ago, the retry that
caught up): a MERGE reading the table after that commit conflicts with nothing, so each
commit looks for the window's commit once more right before its MERGE, and finds it.
Between that look and the MERGE's read a race remains, milliseconds wide; a MERGE in it
changes no row, as every MERGE here skips what is not newer than the table (``targets.py``),
and only adds a second snapshot tagged with the window (the oldest is the window's).

Performance strategies, each with its switch in ``strategies.py``: the tables' commits run
side by side (:func:`commit_tables`), and a target MERGE that rewrites nearly every file skips
the search for the files to rewrite (``targets.file_search``). A table's own commits run side
by side too (``commit_threads.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from pyspark.sql import SparkSession

from airflow_cdc.faults import crash_point
from airflow_cdc.spark_jobs.apply.commit_threads import side_by_side
from airflow_cdc.spark_jobs.apply.config import ApplyConfig, TableName
from airflow_cdc.spark_jobs.apply.faults import fault
from airflow_cdc.spark_jobs.apply.schema import create_namespaces, prepare_target
from airflow_cdc.spark_jobs.apply.table_fold import TableWork, record_snapshots
from airflow_cdc.spark_jobs.apply.targets import (
    append_target,
    append_tombstones,
    file_search,
    merge_history,
    merge_target,
    merge_tombstones,
    rewrites_nearly_every_file,
)
from airflow_cdc.spark_jobs.commits import commit_once, own_window_commit, window_properties

_FAULT_NAMES = {"target": "target", "tombstones": "tombstone", "history": "history"}
_COUNTS = (
    "changes", "upserts", "patches", "deletes", "superseded_changes", "dead_letter_rows", "dead_keys", "clashing_keys",
)


def commit_tables(spark: SparkSession, config: ApplyConfig, works: list[TableWork]) -> None:
    """Every table's missing commits (:func:`commit_table`), the tables side by side.

    A performance strategy (switch ``Strategies.tables_side_by_side``; off, the tables are
    committed one after another). Saves: the cores left idle while each table's MERGEs are
    planned and committed on the driver (bench/window.py). The tables are independent (each
    commit writes its own table, from its own fold). The file search is a session setting,
    so the tables that skip it are committed together, apart from the others. A failed table
    stops no other table, of its group or of the other; once all are done, the first group's
    first failure (in the order of ``works``) is raised.
    """
    create_namespaces(spark, [
        table for work in works if _commits_pending(work)
        for table in (work.plan.target, work.plan.tombstones, work.plan.history_table if work.plan.history else None)
        if table is not None
    ])
    groups: dict[bool, list[TableWork]] = {}
    for work in works:
        groups.setdefault(config.strategies.file_search_skipped and _skips_file_search(work), []).append(work)
    failures: list[Exception] = []
    for skip, group in groups.items():
        with file_search(spark, skip):
            commits = [partial(commit_table, spark, config, work) for work in group]
            try:
                side_by_side(commits, name="cdc-apply-table", parallel=config.strategies.tables_side_by_side)
            except Exception as error:  # noqa: BLE001 - raised once the other group is done
                failures.append(error)
    if failures:
        raise failures[0]


def commit_table(spark: SparkSession, config: ApplyConfig, work: TableWork) -> None:
    """Make the table's missing commits (target, tombstones, history).

    A failed commit does not stop the others; once all are done, the first failure (in
    target, tombstones, history order) is raised.
    """
    if not _commits_pending(work):
        return
    plan, result = work.plan, work.result
    prepare_target(spark, plan, config.stream, config.write_mode)
    tombstones_due = bool(result.deletes or work.revives) or work.purge_due
    history_due = plan.history and bool(result.upserts + result.patches + result.deletes)
    target_due = _target_due(work)
    window_id = config.window_id

    def commit_target() -> None:
        counts = {name: getattr(result, name) for name in _COUNTS}
        announced = {"tombstones": tombstones_due, "history": history_due, "counts": counts}
        if work.target_before is None:  # no rows yet: nothing to match
            append_target(plan, work.folded, window_id, window_properties(window_id, announced))
        else:
            merge_target(plan, work.folded, window_id, window_properties(window_id, announced))

    def commit_tombstones() -> None:
        if work.tombstones_before is None:  # no tombstones yet: nothing to match or purge
            append_tombstones(plan, work.folded, window_id, window_properties(window_id))
        else:
            cutoff = config.tombstone_cutoff if work.purge_due else None
            merge_tombstones(plan, work.folded, window_id, cutoff, window_properties(window_id))

    def commit_history() -> None:
        merge_history(plan, work.changes, work.folded, work.target_before, window_id, window_properties(window_id))

    due = {
        "target": (target_due, plan.target, commit_target),
        "tombstones": (tombstones_due, plan.tombstones, commit_tombstones),
        "history": (history_due, plan.history_table, commit_history),
    }
    missing = [
        (role, table, run) for role, (wanted, table, run) in due.items() if wanted and work.commits[role] is None
    ]

    def commit(role: str, table: TableName, run: Callable[[], None]) -> None:
        fault(config, f"fail_{_FAULT_NAMES[role]}_commit")
        # Another apply of the window (an orphaned job, the task's retry) may have made this
        # commit since the fold read the table: its commit is the window's (module doc).
        other = commit_once(spark, table.qualified, window_id, run)
        if other is not None:
            work.commits[role] = other
            return
        work.commits[role] = own_window_commit(spark, table.qualified, window_id)
        if role == "target":
            crash_point("apply.after_target_commit")

    try:
        side_by_side([lambda m=m: commit(*m) for m in missing])
    finally:
        record_snapshots(work)


def _commits_pending(work: TableWork) -> bool:
    """Whether the table may still have commits to make: it is not dead-lettered (no plan
    reason) and its window's commits are not all made already."""
    return work.plan.reason is None and not work.result.already_applied


def _target_due(work: TableWork) -> bool:
    """Whether the window changes the table's target (rows to write or to delete)."""
    result = work.result
    return bool(result.upserts + result.patches + work.deletes_in_target)


def _skips_file_search(work: TableWork) -> bool:
    """Whether the table's commits include a target MERGE that skips the file search."""
    if not _commits_pending(work) or work.commits["target"] is not None:
        return False
    if not _target_due(work) or work.target_before is None:  # no target MERGE
        return False
    return rewrites_nearly_every_file(work.target_summary, work.updates_in_target + work.deletes_in_target)
