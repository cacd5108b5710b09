"""Compaction of merge-on-read tables: their delete files folded into the data files.

With ``targets.write_mode: merge-on-read`` each window's MERGEs add delete files beside the
target's, tombstones' and history's rows, and every reader merges them until a compaction
folds them in. After a window's commits in that mode, apply compacts each of the window's
tables whose current snapshot holds at least ``targets.compact_delete_files`` delete files
(the summary's ``total-delete-files``; default 32, 0 never): Iceberg's ``rewrite_data_files`` with
``delete-file-threshold`` 1 (rows rewritten with their deletes applied), then
``rewrite_position_delete_files`` with ``rewrite-all`` (it drops the delete files the first
call leaves pointing at no live file).

It runs in the window's own apply job, after its commits: the next window's apply starts only
once this one is applied, so the two never race. Each call is one atomic Iceberg commit (a
``replace``, untagged): a call that fails (another writer committed meanwhile) leaves the table
as it was, and the window stays applied. The failure is reported in the window's result
(``compaction_errors``), and the next window tries again. Re-running an applied window still finds
its tagged commits: a compaction adds snapshots, it removes none.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import SparkSession

from airflow_cdc.spark_jobs.apply.config import ApplyConfig, TableName
from airflow_cdc.spark_jobs.apply.result import TableResult
from airflow_cdc.spark_jobs.commits import current_summary


def delete_files(summary: dict[str, str] | None) -> int:
    """The delete files a snapshot summary counts (0 when it does not say)."""
    try:
        return int((summary or {}).get("total-delete-files", 0))
    except ValueError:
        return 0


def compact_tables(
    spark: SparkSession, config: ApplyConfig, tables: Iterable[tuple[TableResult, list[TableName]]]
) -> None:
    """Compact each of ``tables``' Iceberg tables (a result and the tables of its source table)
    that holds at least ``config.compact_delete_files`` delete files; record what was done in
    the results (``compacted_tables``, ``compaction_errors``)."""
    for result, names in tables:
        compacted, errors = compact_due(spark, config, names)
        result.compacted_tables.extend(compacted)
        result.compaction_errors.extend(errors)


def compact_due(spark: SparkSession, config: ApplyConfig, tables: Iterable[TableName]) -> tuple[list[str], list[str]]:
    """Compact those of ``tables`` that hold at least ``config.compact_delete_files`` delete
    files. Returns the tables compacted and the errors of those that failed ("table: error")."""
    compacted: list[str] = []
    errors: list[str] = []
    if config.compact_delete_files <= 0 or config.write_mode != "merge-on-read":
        return compacted, errors  # copy-on-write MERGEs write no delete files: no lookups
    for table in tables:
        if not spark.catalog.tableExists(table.qualified):
            continue
        if delete_files(current_summary(spark, table.qualified)) < config.compact_delete_files:
            continue
        try:
            compact(spark, table)
        except Exception as error:  # noqa: BLE001 - maintenance: the window is applied already
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            errors.append(f"{table.qualified}: {first_line[:300]}")
        else:
            compacted.append(table.qualified)
    return compacted, errors


def compact(spark: SparkSession, table: TableName) -> None:
    """Fold ``table``'s delete files into its data files (two commits, each atomic)."""
    # The procedures take the table's name within the catalog the CALL names (identifiers,
    # validated with the config).
    name = f"{table.namespace}.{table.name}"
    spark.sql(
        f"CALL `{table.catalog}`.system.rewrite_data_files(table => '{name}', "
        f"options => map('delete-file-threshold', '1'))"
    )
    spark.sql(
        f"CALL `{table.catalog}`.system.rewrite_position_delete_files(table => '{name}', "
        f"options => map('rewrite-all', 'true'))"
    )
