"""Truncates: a table-level change (``Op.TRUNCATE``, Debezium's op ``t``) empties a target at
its position in the source's log, and guards it against older changes that arrive later.

A truncate changelog row names a source table and an ordering key ``T``, and no key: every
row of the table ordered before ``T`` is gone. Apply acts on it in three places:

1. **The guard** (:func:`table_guard`): a table's guard is the greatest ``T`` of its
   truncates: this window's and earlier windows' (kept as the target's table property
   :data:`TRUNCATED_BEFORE_PROPERTY`). The fold reads only the table's changes ordered
   after the guard (:func:`after_guard`); the others lost to the truncate and count as
   superseded. So a change ordered before a truncate never reaches the target, whether it
   is in the truncate's window or arrives in a later one (topic-partitions flush
   independently): the table-level tombstone of I3.
2. **The truncate commit** (:func:`commit_truncates`), after the table's other commits:
   ``DELETE FROM target WHERE _cdc_seq < T``, which removes exactly the rows written before
   the truncate (everything this window wrote is ordered after the guard); with SCD history
   on, the open versions ordered before ``T`` are closed at the truncate's commit time. Each
   statement is tagged :data:`TRUNCATE_WINDOW_PROPERTY` = window (not the window tag, which
   names the window's target MERGE) and is idempotent, so a re-run after a crash anywhere
   here ends as one clean run (I1).
3. **The table property** ``airflow-cdc.truncated-before`` = the guard (hex), set after the
   DELETE, only ever raised.

Interface: :func:`window_truncates` (once per window), :func:`table_guard`,
:func:`after_guard`, :func:`commit_truncates`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_cdc.model import InvalidIdentifierError, Op, format_ts
from airflow_cdc.spark_jobs.apply.config import ApplyConfig, TableName
from airflow_cdc.spark_jobs.apply.result import ApplyResult, TableResult
from airflow_cdc.spark_jobs.apply.schema import table_properties
from airflow_cdc.spark_jobs.apply.sql import string
from airflow_cdc.spark_jobs.commits import sql_tagged, summary_with

TRUNCATE = Op.TRUNCATE.value
#: Target table property: hex of the greatest truncate ordering key applied to the table.
TRUNCATED_BEFORE_PROPERTY = "airflow-cdc.truncated-before"
#: Snapshot property of a truncate's DELETE (and history close): the window that made it.
TRUNCATE_WINDOW_PROPERTY = "airflow-cdc.truncate-window-id"


@dataclass(frozen=True)
class Truncation:
    """The latest truncate of one source table in one window."""

    source_table: str
    ordering_key: bytes
    commit_ts: datetime
    count: int  # truncate rows of the table in the window


def window_truncates(rows: DataFrame, recorded: list | None = None) -> dict[str, Truncation]:
    """The window's truncates per source table (one small aggregate over ``rows``' op column).

    A performance strategy (switch ``Strategies.truncates_from_declarations``; off, the
    caller passes no ``recorded``): with the changelog commit's ``recorded`` declarations (a list of
    ``Declaration``), a window none of whose declarations is ``{}`` (what a truncate row
    declares: no columns) has no truncate, and the aggregate is not run. Saves one Spark job
    per applied window (bench/window.py).
    """
    if recorded is not None and not any(d.column_types_json == "{}" for d in recorded):
        return {}
    found = (
        rows.where(F.col("op") == F.lit(TRUNCATE))
        .groupBy("source_table")
        .agg(
            F.max_by(F.struct("ordering_key", "commit_ts"), "ordering_key").alias("last"),
            F.count(F.lit(1)).alias("count"),
        )
        .collect()
    )
    return {
        row.source_table: Truncation(
            row.source_table, bytes(row["last"].ordering_key),
            row["last"].commit_ts.astimezone(timezone.utc), int(row["count"]),
        )
        for row in found
    }


def without_truncates(rows: DataFrame) -> DataFrame:
    """The window's row changes: what the fold and the declarations read."""
    return rows.where(F.col("op") != F.lit(TRUNCATE))


def recorded_guard(properties: Mapping[str, str]) -> bytes | None:
    """The guard an earlier window's truncate left in a target's ``properties`` (None: never
    truncated, or a value that is not hex, which is then ignored)."""
    value = properties.get(TRUNCATED_BEFORE_PROPERTY)
    try:
        return bytes.fromhex(value) if value else None
    except ValueError:
        return None


def table_guard(properties: Mapping[str, str], truncation: Truncation | None) -> bytes | None:
    """The table's guard: the greater of the one its target records (``properties``) and
    this window's truncate."""
    guards = [g for g in (recorded_guard(properties), truncation and truncation.ordering_key) if g]
    return max(guards) if guards else None


def after_guard(table_rows: DataFrame, guard: bytes | None) -> tuple[DataFrame, int]:
    """The table's changes ordered after ``guard``, and how many were not (one count; none
    without a guard)."""
    if guard is None:
        return table_rows, 0
    before = F.col("ordering_key") <= F.lit(bytearray(guard))
    return table_rows.where(~before), table_rows.where(before).count()


def commit_truncates(
    spark: SparkSession, config: ApplyConfig, truncations: Mapping[str, Truncation], result: ApplyResult
) -> None:
    """Step 2 and 3 of the module doc for every table the window truncates (after the
    table's other commits). A table the window only truncates gets its own result."""
    for source_table, truncation in sorted(truncations.items()):
        table_result = next((t for t in result.tables if t.source_table == source_table), None)
        try:
            target = config.target_for(source_table)
        except InvalidIdentifierError:
            continue  # the table's rows are dead letters: the fold said why
        if table_result is None:
            table_result = TableResult(source_table=source_table, target_table=target.qualified)
            result.tables.append(table_result)
        table_result.truncates = truncation.count
        properties = table_properties(spark, target)
        if properties is None:
            continue  # nothing written yet, so nothing to remove; later rows follow the guard
        guard = table_guard(properties, truncation)
        _truncate(spark, config, target, guard, table_result)
        history = target.with_suffix("__history")
        if config.history_enabled(source_table) and spark.catalog.tableExists(history.qualified):
            _close_history(spark, config, history, guard, truncation.commit_ts)
        recorded = recorded_guard(properties)
        if recorded is None or recorded < guard:  # only ever raised
            spark.sql(f"ALTER TABLE {target.sql} SET TBLPROPERTIES "
                      f"({string(TRUNCATED_BEFORE_PROPERTY)} = {string(guard.hex())})")


def _truncate(spark: SparkSession, config: ApplyConfig, target: TableName, guard: bytes, result: TableResult) -> None:
    done = _truncate_commit(spark, target.qualified, config.window_id)
    if done is None:
        before = spark.table(target.qualified).where(F.col("_cdc_seq") < F.lit(bytearray(guard))).count()
        if before:
            sql_tagged(
                spark,
                f"DELETE FROM {target.sql} WHERE _cdc_seq < X'{guard.hex()}'",
                {TRUNCATE_WINDOW_PROPERTY: config.window_id, "airflow-cdc.truncated-rows": str(before)},
            )
        result.truncated_rows = before
    else:
        result.truncated_rows = int(done.get("airflow-cdc.truncated-rows", "0"))


def _close_history(spark: SparkSession, config: ApplyConfig, history: TableName, guard: bytes, at: datetime) -> None:
    if _truncate_commit(spark, history.qualified, config.window_id) is not None:
        return
    sql_tagged(
        spark,
        f"UPDATE {history.sql} SET valid_to = TIMESTAMP {string(format_ts(at).replace('Z', '+00:00'))} "
        f"WHERE valid_to IS NULL AND _cdc_seq < X'{guard.hex()}'",
        {TRUNCATE_WINDOW_PROPERTY: config.window_id},
    )


def _truncate_commit(spark: SparkSession, table: str, window_id: str) -> dict | None:
    """The summary of the window's truncate commit of ``table``, or None."""
    return summary_with(spark, table, TRUNCATE_WINDOW_PROPERTY, window_id)
