"""Fold partitioning: how many tasks sort and fold one table's changes and guard rows.

Saves the task that runs alone when adaptive execution coalesces equal partitions into one
fewer than the cores can take in even waves (bench/apply.py's second window).

:func:`guard_rows_for` and :func:`fold_partitions_for` are all the fold step asks;
``fold.ordered_changes`` takes the number (None: Spark decides) as the size of its one
exchange.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession

from airflow_cdc.spark_jobs.apply.schema import TablePlan
from airflow_cdc.spark_jobs.commits import current_summary


def guard_rows_for(
    spark: SparkSession, plan: TablePlan, target_summary: Mapping[str, str] | None, tombstones_exist: bool
) -> int:
    """An estimate of the table's guard rows: one per key of the target and of its tombstones,
    from their current snapshots' record counts."""
    guard_rows = _total_records(target_summary)
    if tombstones_exist:
        guard_rows += _total_records(current_summary(spark, plan.tombstones.qualified))
    return guard_rows


def fold_partitions_for(spark: SparkSession, plan: TablePlan, guard_rows: int, rows_per_task: int) -> int | None:
    """:func:`fold_partitions` for the table's changes plus ``guard_rows`` guard rows."""
    return fold_partitions(plan.rows + guard_rows, spark.sparkContext.defaultParallelism, rows_per_task)


def fold_partitions(rows: int, parallelism: int, rows_per_task: int) -> int | None:
    """How many tasks sort and fold ``rows`` rows (changes and guard rows) on ``parallelism``
    cores: a multiple of ``parallelism``, with at most about ``rows_per_task`` rows per task.
    None (Spark decides) when each core would get less than a fifth of ``rows_per_task``.

    Left to adaptive execution, the shuffle is coalesced by bytes: four equal partitions on
    two cores became three when two of them came to a few bytes over half of the total, and
    the third task then ran alone (a third of the stage's time). Guard rows are a few bytes
    each but cost the sort and the window pass as much as changes, so bytes are a poor
    measure anyway. A small window is left to Spark, which folds it in few tasks: each task
    writes one file of a target's first commit.
    """
    parallelism = max(1, parallelism)
    rows_per_task = max(1, rows_per_task)
    if rows < parallelism * (rows_per_task // 5):
        return None
    waves = -(-rows // (parallelism * rows_per_task))
    return parallelism * waves


def _total_records(summary: Mapping[str, str] | None) -> int:
    """A snapshot summary's ``total-records`` (0 when it does not say): an estimate of rows."""
    try:
        return int((summary or {}).get("total-records", 0))
    except ValueError:
        return 0
