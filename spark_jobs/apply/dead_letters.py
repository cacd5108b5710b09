"""The stream's dead-letter table: raw changelog rows apply could not apply, with the reason.

One Iceberg table per stream (``targets.dead_letter_table``). A row holds every changelog
column exactly as read (so it can be replayed once the cause is fixed), the ``reason``, and
the ``target_table`` it was meant for (NULL when the source table had no usable target). The
window is the row's own ``window_id``. All dead letters of a window are appended in one
commit tagged with the window, so a re-run never adds them twice, nor does a second apply
of the window running at the same time (step 3 of apply: :func:`commit_dead_letters`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_cdc.model import CHANGELOG_COLUMNS, CdcError
from airflow_cdc.spark_jobs.apply.config import ApplyConfig, TableName
from airflow_cdc.spark_jobs.apply.faults import fault
from airflow_cdc.spark_jobs.apply.result import ApplyResult
from airflow_cdc.spark_jobs.commits import (
    append_tagged,
    current_snapshot_id,
    is_commit_conflict,
    own_window_commit,
    window_commit,
    window_properties,
)

if TYPE_CHECKING:
    from airflow_cdc.spark_jobs.apply.table_fold import TableWork

DEAD_LETTER_COLUMNS: tuple[tuple[str, str], ...] = (
    *CHANGELOG_COLUMNS,
    ("reason", "string"),
    ("target_table", "string"),
)


class DeadLetterCommitError(CdcError):
    """The window's dead letters lost every race to other commits of the dead-letter table."""


def create_dead_letter_table(spark: SparkSession, table: TableName) -> None:
    columns = ", ".join(f"`{name}` {kind}" for name, kind in DEAD_LETTER_COLUMNS)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{table.catalog}`.`{table.namespace}`")
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table.sql} ({columns}) USING iceberg "
        f"TBLPROPERTIES ('format-version' = '2')"
    )


def in_table_order(frame: DataFrame) -> DataFrame:
    """``frame`` with exactly the dead-letter columns, in order."""
    return frame.select(*[frame[name].cast(kind).alias(name) for name, kind in DEAD_LETTER_COLUMNS])


# Appends of the window's dead letters tried before giving up on a table other jobs keep
# writing (each lost race means another commit landed since the search for the window's).
APPEND_ATTEMPTS = 5


def commit_dead_letters(spark: SparkSession, config: ApplyConfig, works: list[TableWork], result: ApplyResult) -> None:
    """Append the dead letters of every table in one commit tagged with the window (unless the
    window's commit exists); their count and the commit's snapshot id go into ``result``.

    The append is made only if nothing was committed to the table since the search for the
    window's commit: when something was (another apply of this window, or another window's
    extract writing its own dead letters), the search runs again, and either finds the
    window's commit or appends again.
    """
    result.dead_letter_rows = sum(w.result.dead_letter_rows for w in works)
    table = config.dead_letter_table
    frames = [
        w.dead_letters.withColumn(
            "target_table", F.lit(None if w.plan.target is None else w.plan.target.qualified).cast("string")
        )
        for w in works
        if w.dead_letters is not None
    ]
    if not frames:
        existing = window_commit(spark, table.qualified, config.window_id)
        result.dead_letter_snapshot_id = None if existing is None else existing.snapshot_id
        return
    create_dead_letter_table(spark, table)
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    for _ in range(APPEND_ATTEMPTS):
        read_at = current_snapshot_id(spark, table.qualified)  # first: a commit after it conflicts
        existing = window_commit(spark, table.qualified, config.window_id)
        if existing is not None:
            result.dead_letter_snapshot_id = existing.snapshot_id
            return
        try:
            append_tagged(in_table_order(union), table.qualified, window_properties(config.window_id), read_at)
        except Exception as error:
            if is_commit_conflict(error):
                continue
            raise
        committed = own_window_commit(spark, table.qualified, config.window_id)
        result.dead_letter_snapshot_id = None if committed is None else committed.snapshot_id
        fault(config, "after_dead_letter_commit")
        return
    raise DeadLetterCommitError(
        f"the dead letters of window {config.window_id!r} could not be appended to {table}: "
        f"another job committed to it before each of {APPEND_ATTEMPTS} attempts; run the "
        f"window's apply again"
    )
