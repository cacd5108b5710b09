"""The stream's dead-letter table: raw changelog rows apply could not apply, with the reason.

One Iceberg table per stream (``targets.dead_letter_table``). A row holds every changelog
column exactly as read (so it can be replayed once the cause is fixed), the ``reason``, and
the ``target_table`` it was meant for (NULL when the source table had no usable target). The
window is the row's own ``window_id``. All dead letters of a window are appended in one
commit tagged with the window, so a re-run never adds them twice (step 3 of apply:
:func:`commit_dead_letters`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_cdc.model import CHANGELOG_COLUMNS
from spark_jobs.apply.config import ApplyConfig, TableName
from spark_jobs.apply.faults import fault
from spark_jobs.apply.result import ApplyResult
from spark_jobs.commits import append_tagged, own_window_commit, window_commit, window_properties

if TYPE_CHECKING:
    from spark_jobs.apply.table_fold import TableWork

DEAD_LETTER_COLUMNS: tuple[tuple[str, str], ...] = (
    *CHANGELOG_COLUMNS,
    ("reason", "string"),
    ("target_table", "string"),
)


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


def commit_dead_letters(spark: SparkSession, config: ApplyConfig, works: list[TableWork], result: ApplyResult) -> None:
    """Append the dead letters of every table in one commit tagged with the window (unless the
    window's commit exists); their count and the commit's snapshot id go into ``result``."""
    result.dead_letter_rows = sum(w.result.dead_letter_rows for w in works)
    table = config.dead_letter_table
    existing = window_commit(spark, table.qualified, config.window_id)
    if existing is not None:
        result.dead_letter_snapshot_id = existing.snapshot_id
        return
    frames = [
        w.dead_letters.withColumn(
            "target_table", F.lit(None if w.plan.target is None else w.plan.target.qualified).cast("string")
        )
        for w in works
        if w.dead_letters is not None
    ]
    if not frames:
        return
    create_dead_letter_table(spark, table)
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    append_tagged(in_table_order(union), table.qualified, window_properties(config.window_id))
    committed = own_window_commit(spark, table.qualified, config.window_id)
    result.dead_letter_snapshot_id = None if committed is None else committed.snapshot_id
    fault(config, "after_dead_letter_commit")
