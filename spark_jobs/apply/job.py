"""Apply one window of one stream's changelog to current-state Iceberg tables, exactly once.

Procedure (:func:`apply_window`), one module per step:

1. Plan the window's tables from its declarations (``declarations.py``): the distinct source
   tables and column declarations with their counts, as the window's changelog commit
   records them, or an aggregate of the window's rows when that record cannot be trusted.
2. Fold each table (``table_fold.py``): its plan (``schema.py``), the window's earlier commits
   (a re-run: a table whose commits are all present is done), its target and tombstones as
   they were before the window, and its changes folded per key (``fold.py``) into a
   checkpointed frame of one outcome per key.
3. Dead letters (``dead_letters.py``): every table's, in one tagged commit. With
   ``on_dead_letter = fail`` (the default) the job then stops with :class:`DeadLettersError`,
   before any target changes: the window fails, visibly.
4. Commit each table (``table_commits.py``): create or evolve its tables, then make the
   window's missing commits: target, tombstones (with the purge) and history, each a MERGE
   guarded by the ordering key and tagged with the window. A crash leaves any subset made;
   the re-run recomputes the same outcome from the same pre-window state and makes only the
   missing commits, so the tables end as after one clean run (I1). Then each truncated
   table loses the rows ordered before its truncate (``truncates.py``).
   Then merge-on-read tables holding many delete files are compacted (``compaction.py``).
5. Result: the counts and snapshot ids (``result.py``); the checkpointed frames are released.

Exactly once thus rests on both mechanisms: window tags decide which commits are missing,
and the ordering-key guard (target ``_cdc_seq`` and tombstones) makes any change that is
re-applied or arrives late lose (I2, I3).

Performance strategies, each behind one named switch of ``strategies.py`` with its plain path
beside it: the truncate aggregate skipped (``truncates.py``), the tables folded and committed
side by side (``table_fold.py``, ``table_commits.py``), the guard rows of a small window's keys
(``guard_keys.py``), a new target's keys guessed (``table_fold.py``), the fold's steps as one
statement and its packed flags (``fold.py``), the skipped file search (``targets.py``) and
py4j's class lookups (:func:`_import_function_classes`). Tuning without a switch: recorded
declarations (``declarations.py``), fold partitioning (``partitioning.py``), a table's
commits side by side (``commit_threads.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_cdc.model import CdcError
from airflow_cdc.spark_jobs.apply import compaction, declarations, truncates
from airflow_cdc.spark_jobs.apply.config import ApplyConfig
from airflow_cdc.spark_jobs.apply.dead_letters import commit_dead_letters
from airflow_cdc.spark_jobs.apply.faults import InjectedFault
from airflow_cdc.spark_jobs.apply.result import ApplyResult, TableResult
from airflow_cdc.spark_jobs.apply.table_commits import commit_tables
from airflow_cdc.spark_jobs.apply.table_fold import TableWork, fold_tables, release
from airflow_cdc.spark_jobs.changelog import check_changelog_columns

__all__ = ["ApplyError", "ApplyResult", "DeadLettersError", "InjectedFault", "TableResult", "apply_window"]


class ApplyError(CdcError):
    """The apply job cannot run as configured (missing catalog or changelog table)."""


class DeadLettersError(CdcError):
    """The window has dead letters and its policy is ``fail``; carries the job's result."""

    def __init__(self, message: str, result: ApplyResult) -> None:
        super().__init__(message)
        self.result = result


def apply_window(spark: SparkSession, config: ApplyConfig | Mapping[str, object]) -> ApplyResult:
    """Apply the window ``config`` names; see the module doc. Returns the counts and snapshot ids."""
    if not isinstance(config, ApplyConfig):
        config = ApplyConfig.from_dict(config)
    rows = window_rows(spark, config)
    # Truncates are table-level: the fold reads row changes only, after each table's guard.
    recorded = declarations.recorded_declarations(spark, config.changelog_table.qualified, config.window_id)
    truncations = truncates.window_truncates(rows, recorded if config.strategies.truncates_from_declarations else None)
    if truncations:
        rows = truncates.without_truncates(rows)
    result = ApplyResult(
        stream=config.stream,
        window_id=config.window_id,
        status="applied",
        dead_letter_table=config.dead_letter_table.qualified,
    )
    works: list[TableWork] = []
    try:
        # 1-2. Plan the window's tables from its declarations; fold each table.
        fold = partial(fold_tables, spark, config, rows, truncations=truncations)
        works = declarations.fold_from_declarations(
            spark, config.changelog_table.qualified, config.window_id, rows, fold, release
        )
        result.tables.extend(work.result for work in works)
        # 3. Dead letters, in one commit; under the fail policy, stop before any target changes.
        commit_dead_letters(spark, config, works, result)
        if result.dead_letter_rows and config.on_dead_letter == "fail":
            result.status = "failed"
            raise DeadLettersError(
                f"window {config.window_id!r} of stream {config.stream!r} has "
                f"{result.dead_letter_rows} dead-lettered change row(s) (see "
                f"{config.dead_letter_table}, column reason); policy on_dead_letter='fail' "
                f"stops it before any target changes. Fix the cause, or set "
                f"policies.on_dead_letter='continue' to apply the rest, and run the window again",
                result,
            )
        # 4. Per table: target, tombstones and history, guarded by the ordering key.
        commit_tables(spark, config, works)
        # 4b. Truncates: the rows ordered before each, removed after the table's commits.
        truncates.commit_truncates(spark, config, truncations, result)
        # 4c. Merge-on-read tables holding many delete files: compacted (maintenance that never
        # fails the applied window; see compaction.py).
        compaction.compact_tables(spark, config, [(work.result, _tables_of(work)) for work in works])
    finally:
        for work in works:
            release(work)
    # 5. The result.
    return result


def _tables_of(work: TableWork) -> list:
    """The Iceberg tables apply writes for the work's source table (none when dead-lettered)."""
    plan = work.plan
    if plan.reason is not None or plan.target is None:
        return []
    return [plan.target, plan.tombstones, *([plan.history_table] if plan.history else [])]


def window_rows(spark: SparkSession, config: ApplyConfig) -> DataFrame:
    """The window's changelog rows (``stream``, ``window_id``), once the session can read them."""
    _require_catalog(spark, config.catalog)
    if config.strategies.function_class_imports:
        _import_function_classes(spark)
    changelog = config.changelog_table.qualified
    if not spark.catalog.tableExists(changelog):
        raise ApplyError(
            f"changelog table {changelog} does not exist: the extract step creates it; check "
            f"changelog_table and the catalog's warehouse"
        )
    check_changelog_columns(spark, changelog)
    reader = spark.read.option("split-size", str(config.changelog_split_size))
    return reader.table(changelog).where(
        (F.col("window_id") == F.lit(config.window_id)) & (F.col("stream") == F.lit(config.stream))
    )


def _require_catalog(spark: SparkSession, catalog: str) -> None:
    if spark.conf.get(f"spark.sql.catalog.{catalog}", None) is None:
        raise ApplyError(
            f"Spark catalog {catalog!r} is not configured in this session: start the job with "
            f"the IcebergCatalog's conf (catalog_conf in the job config, or IcebergCatalog.spark_conf())"
        )


def _import_function_classes(spark: SparkSession) -> None:
    """Let py4j find the classes behind ``pyspark.sql.functions`` by their single-type imports.

    A performance strategy (switch ``Strategies.function_class_imports``). Saves: every
    ``F.<function>`` call looks its class up by simple name; without a single-type import py4j
    tries each wildcard import PySpark registers, loading classes that do not exist, before it
    reaches ``org.apache.spark.sql.functions`` (bench/apply.py). Idempotent.
    """
    from py4j.java_gateway import java_import

    jvm = spark.sparkContext._jvm
    java_import(jvm, "org.apache.spark.sql.functions")
    java_import(jvm, "org.apache.spark.api.python.PythonUtils")
