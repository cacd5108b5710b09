"""Step 2 of apply: each source table of the window planned and folded into one outcome per key.

Per table (:func:`fold_tables`, then :func:`fold_planned_table` for each):

1. Plan it (``schema.plan_tables``): target, key columns, typed columns, the declarations
   whose rows are dead letters. A table with no usable plan is dead-lettered whole.
2. Find the window's earlier commits (a re-run). A table whose target commit and every commit
   that commit announced are present is done: its recorded counts are its result.
3. Read the target and tombstones *as they were before the window* (the tagged commit's
   parent, or the current snapshot when untagged: a fixed snapshot, so nothing computed
   here changes when the job then commits).
4. Fold its changes per key (``fold.py``) into a checkpointed frame of one outcome per key;
   the counts are observed as the checkpoint is computed.

Performance strategies, each with its switch in ``strategies.py``: the tables folded side by
side (:func:`fold_side_by_side`); a small window's guard rows read for its own keys only
(``guard_keys.py``); a new target's keys guessed from any one change (the section *New target
keys* below); steps 1-5 as one statement (``fold.folded_changes``). Tuning, not a switch: the
fold's number of tasks (``partitioning.py``); the frames released when the job ends
(:func:`release`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from functools import partial
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from airflow_cdc.spark_jobs.apply.commit_threads import side_by_side
from airflow_cdc.spark_jobs.apply.config import ApplyConfig
from airflow_cdc.spark_jobs.apply.fold import dead_letter_rows, fold_table, folded_changes, ordered_changes, parse_changes
from airflow_cdc.spark_jobs.apply.guard_keys import guard_keys_only
from airflow_cdc.spark_jobs.apply.partitioning import fold_partitions_for, guard_rows_for
from airflow_cdc.spark_jobs.apply.result import TableResult
from airflow_cdc.spark_jobs.apply.schema import Declaration, TablePlan, plan_tables
from airflow_cdc.spark_jobs.apply.truncates import Truncation, after_guard, table_guard
from airflow_cdc.spark_jobs.checkpoints import release_checkpoint
from airflow_cdc.spark_jobs.commits import WindowCommit, current_summary, table_before, window_commit


@dataclass
class TableWork:
    """One source table's part of the window, from its plan to its commits."""

    plan: TablePlan
    result: TableResult
    commits: dict[str, WindowCommit | None] = field(default_factory=dict)
    folded: DataFrame | None = None
    changes: DataFrame | None = None  # the ordered changes, checkpointed (with history only)
    target_before: DataFrame | None = None
    tombstones_before: DataFrame | None = None
    dead_letters: DataFrame | None = None
    purge_due: bool = False
    deletes_in_target: int = 0
    revives: int = 0
    updates_in_target: int = 0  # upserts and patches of keys the target holds
    target_summary: dict[str, str] | None = None  # the target's current snapshot (read by the fold unless re-run)
    other_key_groups: int = 0  # folded groups of changes whose key columns are not the plan's
    declarations_disagree: bool = False  # the table's rows are not what the recorded declarations say


def fold_tables(
    spark: SparkSession,
    config: ApplyConfig,
    rows: DataFrame,
    declarations: list[Declaration],
    check: bool,
    truncations: Mapping[str, Truncation] | None = None,
) -> list[TableWork]:
    """Plan every source table of the window from ``declarations`` and fold each.

    With ``check`` (declarations recorded by the changelog commit), a table whose fold read
    another number of rows than its declarations count is marked (``declarations_disagree``),
    and so is one the declarations would dead-letter whole (no fold checks its rows); the
    caller then starts again from an aggregate of the rows (``declarations.py``).
    ``truncations`` are the window's truncates per table (``truncates.py``): ``rows`` hold
    none of them, and each table's fold reads its changes after its guard only.
    """
    truncations = truncations or {}
    guessed: dict[str | None, tuple[str, ...] | None] = {}

    def some_keys(table: str | None) -> tuple[str, ...] | None:
        guessed[table] = _some_keys(rows, table)
        return guessed[table]

    new_target_keys = some_keys if config.strategies.new_target_keys_guessed else partial(_first_keys, rows)
    plans = plan_tables(spark, config, declarations, new_target_keys)
    folded = fold_side_by_side(
        [partial(fold_planned_table, spark, config, plan, rows, check, truncations.get(plan.source_table))
         for plan in plans],
        parallel=config.strategies.tables_side_by_side,
    )
    works: list[TableWork] = []
    try:
        while folded:
            work = folded.pop(0)
            works.append(work)
            plan = work.plan
            if plan.source_table in guessed and (work.other_key_groups or plan.reason is not None):
                # A new target's keys were guessed from any one change; only when some change
                # names other key columns can the table's first change name others.
                table = plan.source_table
                first = _first_keys(rows, table)
                if first != guessed[table]:
                    release(works.pop())
                    mine = [d for d in declarations if d.source_table == table]
                    replanned = plan_tables(spark, config, mine, lambda _: first)[0]
                    work = fold_planned_table(spark, config, replanned, rows, check, truncations.get(table))
                    works.append(work)
            if check and work.plan.reason is not None and not work.result.already_applied:
                # Dead-lettered whole, from what the declarations say (types, keys), and with
                # their count: no fold reads these rows to check them, so the rows decide.
                work.declarations_disagree = True
            if work.declarations_disagree:
                break
    except BaseException:
        for work in works:
            release(work)
        raise
    finally:
        for work in folded:  # folded beside a table that disagrees: not needed
            release(work)
    return works


def fold_side_by_side(folds: list[Callable[[], TableWork]], parallel: bool = True) -> list[TableWork]:
    """The tables' folds run in parallel threads; their works in the order of ``folds``.

    A performance strategy (switch ``Strategies.tables_side_by_side``; without ``parallel``
    the folds run one after another). Saves: a small window's folds are chains of short Spark
    jobs (reads, joins, two local checkpoints) whose driver-side planning leaves the cores
    idle (bench/window.py). The folds are independent: each reads its own table's rows and
    tables and sets no session setting. If one fails, the others' frames are released and
    the first failure is raised.
    """
    works: list[TableWork | None] = [None] * len(folds)

    def fold(index: int) -> None:
        works[index] = folds[index]()

    try:
        side_by_side([partial(fold, index) for index in range(len(folds))], name="cdc-apply-fold", parallel=parallel)
    except BaseException:
        for work in works:
            if work is not None:
                release(work)
        raise
    return [work for work in works if work is not None]


def fold_planned_table(
    spark: SparkSession,
    config: ApplyConfig,
    plan: TablePlan,
    rows: DataFrame,
    check: bool = False,
    truncation: Truncation | None = None,
) -> TableWork:
    """Steps 2-4 of the module doc for one planned table (``truncation``: its truncate in
    the window; with ``check``, the recorded declarations counted its truncate rows)."""
    result = TableResult(
        source_table=plan.source_table,
        target_table=None if plan.target is None else plan.target.qualified,
        changes=plan.rows,
    )
    work = TableWork(plan=plan, result=result)
    table_rows = _table_rows(rows, plan.source_table)
    truncated = truncation.count if (check and truncation) else 0  # rows no fold reads
    if plan.reason is not None:
        work.dead_letters = table_rows.select("*", F.lit(plan.reason).alias("reason"))
        result.dead_letter_rows = plan.rows
        return work
    result.added_columns = sorted(plan.added_columns)
    result.widened_columns = sorted(plan.widened_columns)
    work.commits = {
        "target": window_commit(spark, plan.target.qualified, config.window_id),
        "tombstones": window_commit(spark, plan.tombstones.qualified, config.window_id),
        "history": window_commit(spark, plan.history_table.qualified, config.window_id) if plan.history else None,
    }
    if _already_applied(work):
        _take_recorded_counts(work)
        return work
    # Changes ordered before the table's truncate lost to it (``truncates.py``).
    table_rows, late = after_guard(table_rows, table_guard(plan.target_properties, truncation))
    expired = _read_before_window(spark, config, work)
    rows_read = _fold_checkpointed(spark, config, work, table_rows)
    result.superseded_changes += late
    # With ``check``, plan.rows is what the recorded declarations say; the fold counted the rows.
    work.declarations_disagree = check and rows_read + late + truncated != plan.rows
    if result.dead_letter_rows:
        work.dead_letters = dead_letter_rows(parse_changes(table_rows, plan), work.folded)
    work.purge_due = expired is not None and bool(expired.get["expired"])
    return work


def _take_recorded_counts(work: TableWork) -> None:
    """Step 2's end for a table whose window commits are all made: the counts its target
    commit recorded, and its snapshots, are its result."""
    result = work.result
    recorded = work.commits["target"].apply_properties().get("counts", {})
    for name, value in recorded.items():
        if hasattr(result, name) and name not in ("added_columns", "widened_columns"):
            setattr(result, name, value)
    result.already_applied = True
    record_snapshots(work)


def _read_before_window(spark: SparkSession, config: ApplyConfig, work: TableWork) -> Observation | None:
    """Step 3: the target and tombstones as they were before the window, into ``work``.

    Returns the observation that counts the tombstones past the horizon (None: no
    tombstones yet). They are counted as the fold's job reads the tombstones (no job of its
    own): the tombstone MERGE purges them in the same commit, only when one exists, since
    the purge makes the MERGE rewrite every tombstone file.
    """
    plan = work.plan
    work.target_before = table_before(spark, plan.target.qualified, work.commits["target"])
    if work.target_before is not None:
        work.target_summary = current_summary(spark, plan.target.qualified)
    tombstones_before = table_before(spark, plan.tombstones.qualified, work.commits["tombstones"])
    expired = None
    if tombstones_before is not None:
        expired = Observation(f"cdc_expired_{uuid.uuid4().hex}")
        tombstones_before = tombstones_before.observe(
            expired, F.count_if(F.col("_cdc_commit_ts") < F.lit(config.tombstone_cutoff)).alias("expired")
        )
    work.tombstones_before = tombstones_before
    return expired


def _fold_checkpointed(spark: SparkSession, config: ApplyConfig, work: TableWork, table_rows: DataFrame) -> int:
    """Step 4: the table's changes folded per key into ``work.folded`` (with history, its
    ordered changes into ``work.changes``), checkpointed, and the counts recorded. Returns
    the number of change rows the fold read."""
    plan, strategies = work.plan, config.strategies
    guard_rows = guard_rows_for(spark, plan, work.target_summary, work.tombstones_before is not None)
    keys_only = strategies.guard_rows_of_window_keys and guard_keys_only(
        plan.rows, guard_rows, config.guard_filter_max_rows
    )
    if keys_only:  # at most one target and one tombstone row per changed key
        guard_rows = min(guard_rows, 2 * plan.rows)
    partitions = fold_partitions_for(spark, plan, guard_rows, config.fold_rows_per_task)
    guarded = (table_rows, plan, work.target_before, work.tombstones_before)
    if plan.history or not strategies.fold_in_one_statement:
        changes = ordered_changes(
            *guarded, check_values=plan.history, partitions=partitions, guard_keys_only=keys_only,
            packed_flags=strategies.packed_flags,
        )
        if plan.history:  # the history reads every change again; computed once, here
            changes = work.changes = changes.localCheckpoint(eager=True)
        folded = fold_table(changes, plan)
    else:
        folded = folded_changes(*guarded, partitions, keys_only, strategies.packed_flags)
    # Checkpointed, not only cached: the MERGEs embed this frame in plans Iceberg rewrites,
    # where a cache is not always recognised, and a cache is dropped when a table it read is
    # written; a checkpoint is never recomputed. The counts are observed as the checkpoint is
    # computed, so they cost no job of their own.
    counts = Observation(f"cdc_counts_{uuid.uuid4().hex}")
    work.folded = folded.observe(counts, *_count_metrics()).localCheckpoint(eager=True)
    observed = {name: int(value or 0) for name, value in counts.get.items()}
    _record_counts(work, observed)
    return observed["rows_read"]


def record_snapshots(work: TableWork) -> None:
    """The snapshot ids of the table's window commits, into its result."""
    for role, attribute in (
        ("target", "target_snapshot_id"),
        ("tombstones", "tombstone_snapshot_id"),
        ("history", "history_snapshot_id"),
    ):
        commit = work.commits.get(role)
        if commit is not None:
            setattr(work.result, attribute, commit.snapshot_id)


def release(work: TableWork) -> None:
    """Free the memory of the table's checkpointed frames now, not at a later JVM GC.

    A local checkpoint keeps its blocks (the folded keys: tens of MB per window) until the
    checkpointed RDD is garbage collected; a session that applies window after window would
    carry them into the next window's fold.
    """
    for frame in (work.folded, work.changes):  # changes: with history only
        if frame is not None:
            release_checkpoint(frame)
    work.folded = work.changes = None


def _table_rows(rows: DataFrame, source_table: str | None) -> DataFrame:
    if source_table is None:
        return rows.where(F.col("source_table").isNull())
    return rows.where(F.col("source_table") == F.lit(source_table))


def _already_applied(work: TableWork) -> bool:
    target = work.commits.get("target")
    if target is None:
        return False
    announced = target.apply_properties()
    if announced.get("tombstones") and work.commits.get("tombstones") is None:
        return False
    if announced.get("history") and work.commits.get("history") is None:
        return False
    return True


def _count_metrics() -> list[Column]:
    """The window's counts per table, as aggregates over the folded keys (see _record_counts)."""
    applied = "__action IN ('UPSERT', 'PATCH')"
    metrics = {
        "clashing_keys": "count_if(__clash)",
        "dead_keys": "count_if(__action = 'DEAD')",
        "dead_letter_rows": "sum(CASE WHEN __action = 'DEAD' THEN __changes END)",
        "superseded_changes": "sum(CASE WHEN __action != 'DEAD' THEN __not_live END)",
        "upserts": "count_if(__action = 'UPSERT')",
        "patches": "count_if(__action = 'PATCH')",
        "deletes": "count_if(__action = 'DELETE')",
        "deletes_in_target": "count_if(__action = 'DELETE' AND __in_target)",
        "revives": f"count_if({applied} AND __tombstoned)",
        "updates_in_target": f"count_if({applied} AND __in_target)",
        "other_key_groups": "count_if(startswith(__key, '!'))",
        "rows_read": "sum(__changes)",
    }
    return [F.expr(f"{text} AS {name}") for name, text in metrics.items()]


def _record_counts(work: TableWork, counts: Mapping[str, int]) -> None:
    result = work.result
    result.clashing_keys += counts["clashing_keys"]
    result.dead_keys += counts["dead_keys"]
    result.dead_letter_rows += counts["dead_letter_rows"]
    result.superseded_changes += counts["superseded_changes"]
    result.upserts += counts["upserts"]
    result.patches += counts["patches"]
    result.deletes += counts["deletes"]
    work.deletes_in_target += counts["deletes_in_target"]
    work.revives += counts["revives"]
    work.updates_in_target += counts["updates_in_target"]
    work.other_key_groups += counts["other_key_groups"]


# --- New target keys ------------------------------------------------------------------------
# A performance strategy (switch ``Strategies.new_target_keys_guessed``; :func:`_first_keys` is
# the plain path): a new target's key columns are guessed from any one change (a limit-1
# read), and the table's first change is read only when some change names other key columns
# (:func:`fold_tables` then folds the table again). Saves a read of the window's key maps per
# new target (bench/window.py).


def _some_keys(rows: DataFrame, source_table: str | None) -> tuple[str, ...] | None:
    """The key-column names of one change of the table that names keys (None: no change does).

    The cheap first answer for a new target's keys: Spark stops reading at the first such
    row. :func:`fold_tables` keeps it only when every change of the table names these same
    key columns (then the first change does too); otherwise it asks :func:`_first_keys`.
    """
    with_keys = _table_rows(rows, source_table).where(F.size("keys") > 0)
    found = with_keys.select(F.map_keys("keys").alias("names")).limit(1).collect()
    return tuple(sorted(found[0].names)) if found else None


def _first_keys(rows: DataFrame, source_table: str | None) -> tuple[str, ...] | None:
    """The key-column names of the table's first change in the window that names keys.

    Read only when :func:`_some_keys` cannot stand for it (some change names other key
    columns): one aggregate over the table's rows.
    """
    first_change = F.struct("commit_ts", "ordering_key")
    with_keys = _table_rows(rows, source_table).where(F.size("keys") > 0)
    found = with_keys.agg(F.min_by(F.map_keys("keys"), first_change).alias("names")).first()
    if found is None or not found.names:
        return None
    # Sorted here, once, rather than per row (code-point order: Spark's order of UTF-8 text).
    return tuple(sorted(found.names))
