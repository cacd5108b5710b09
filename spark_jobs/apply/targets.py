"""The guarded MERGEs that commit a folded window: target, tombstones, history.

Each statement is one Iceberg commit tagged with the window (``commits.sql_tagged``).

* Target: a key's folded outcome applies only when its ordering key is greater than the one
  the target row holds (``_cdc_seq``); the fold already dropped changes that lost to the
  target or to a tombstone, so this condition matters only against concurrent writers, but it
  is what makes the MERGE itself idempotent. ``DELETE`` removes the row, ``UPSERT`` writes
  every column, ``PATCH`` writes only the columns the window's partial images carried.
* Tombstones (``<target>__tombstones``: key columns and ``_cdc_*``): a delete inserts or
  advances the key's tombstone, a later revive removes it, and tombstones whose delete
  committed before ``window end - horizon`` are purged in the same commit (I3).
* History (``<target>__history``, SCD type 2): one version per applied non-delete change, with
  ``valid_from`` = its commit timestamp and ``valid_to`` = the next change's; the key's open
  version from earlier windows is closed at the window's first change of the key.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager as ContextManager
from contextlib import contextmanager, nullcontext
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from airflow_cdc.model import format_ts
from airflow_cdc.spark_jobs.commits import append_tagged, sql_tagged
from airflow_cdc.spark_jobs.apply.fold import fold_columns, key_columns, stored_key_text
from airflow_cdc.spark_jobs.apply.schema import TablePlan
from airflow_cdc.spark_jobs.apply.sql import name as quoted
from airflow_cdc.spark_jobs.apply.values import typed_value


def _key_match(plan: TablePlan) -> str:
    return " AND ".join(f"t.{quoted(k)} <=> s.{quoted(k)}" for k in plan.key_names)


def _with_view(frame: DataFrame, run) -> None:
    view = f"cdc_apply_{uuid.uuid4().hex}"
    frame.createOrReplaceTempView(view)
    try:
        run(view)
    finally:
        frame.sparkSession.catalog.dropTempView(view)


def _key_columns(plan: TablePlan) -> list:
    return [F.expr(column) for column in key_columns(plan)]


def target_source(plan: TablePlan, folded: DataFrame, window_id: str) -> DataFrame:
    """The folded keys that change the target, with the target's column names."""
    names = fold_columns(plan)
    changes_target = F.col("__action").isin("UPSERT", "PATCH") | (
        (F.col("__action") == "DELETE") & F.col("__in_target")
    )
    return folded.where(changes_target).select(
        *_key_columns(plan),
        *[F.col(value).alias(name) for name, (value, _) in names.values.items()],
        *[F.col(touched) for _, (_, touched) in names.values.items()],
        F.col("__seq").alias("_cdc_seq"),
        F.col("__commit_ts").alias("_cdc_commit_ts"),
        F.lit(window_id).alias("_cdc_window"),
        F.col("__action"),
    )


def append_target(plan: TablePlan, folded: DataFrame, window_id: str, properties: dict[str, str]) -> None:
    """The first commit of a target with no rows yet: every outcome is an insert, so append.

    Cheaper than a MERGE (no join with the target); a table's first window is often its
    largest (an initial snapshot). Made only if the target is still without rows when it
    commits (``read_at=None``): another apply of the same window, or of the next, cannot
    have appended the same keys meanwhile.
    """
    source = target_source(plan, folded, window_id).where(F.col("__action") == "UPSERT")
    columns = [*plan.key_names, *plan.columns, "_cdc_seq", "_cdc_commit_ts", "_cdc_window"]
    frame = source.select(*[F.col(quoted(c)) for c in columns])
    append_tagged(frame, plan.target.qualified, properties, read_at=None)


# --- File search ----------------------------------------------------------------------------
# A performance strategy (switch ``Strategies.file_search_skipped``; interface:
# :func:`rewrites_nearly_every_file`, :func:`file_search`): a target MERGE expected to rewrite
# nearly every file skips Spark's runtime search for the files to rewrite. Saves the search's
# join of the target's keys with the window's, which then prunes nothing (bench/apply.py).

# Before a copy-on-write MERGE, Spark first finds the target files that hold a matched key
# (a join of the target's keys with the source's), so that only those files are rewritten.
RUNTIME_GROUP_FILTER = "spark.sql.optimizer.runtime.rowLevelOperationGroupFilter.enabled"


def file_search(spark: SparkSession, skip: bool) -> ContextManager[None]:
    """The session, while the commits of tables that all ``skip`` the search (or all do not)
    run, with the runtime file search off when they skip it.

    A session setting: set around all of those tables' commits, not per commit thread.
    """
    if skip:
        return _session_conf(spark, RUNTIME_GROUP_FILTER, "false")
    return nullcontext()


@contextmanager
def _session_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """``key`` set to ``value`` in the session while the block runs, then as it was."""
    previous = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)


def rewrites_nearly_every_file(summary: Mapping[str, str] | None, changed_keys: int) -> bool:
    """Whether a MERGE changing ``changed_keys`` existing rows rewrites nearly all target files.

    Then the runtime filter (:data:`RUNTIME_GROUP_FILTER`) costs a join and prunes nothing.
    Targets are not sorted by key, so a window's changed keys fall into files at random: a
    file of ``n`` rows out of ``total`` escapes with probability ``(1 - changed/total)^n``.
    "Nearly all" is less than a tenth of the files expected to escape. ``summary`` is the
    target snapshot's summary (``total-records``, ``total-data-files``).
    """
    if not summary or changed_keys <= 0:
        return False
    try:
        rows, files = int(summary["total-records"]), int(summary["total-data-files"])
    except (KeyError, ValueError):
        return False
    if rows <= 0 or files <= 0:
        return False
    untouched = max(0.0, 1.0 - changed_keys / rows) ** (rows / files)
    return untouched < 0.1


# --- End of file search ---------------------------------------------------------------------


def merge_target(plan: TablePlan, folded: DataFrame, window_id: str, properties: dict[str, str]) -> None:
    names = fold_columns(plan)
    assigned = [
        f"t.{quoted(name)} = CASE WHEN s.{touched} THEN s.{quoted(name)} ELSE t.{quoted(name)} END"
        for name, (_, touched) in names.values.items()
    ]
    cdc = ["_cdc_seq", "_cdc_commit_ts", "_cdc_window"]
    assigned += [f"t.{c} = s.{c}" for c in cdc]
    inserted = [*plan.key_names, *plan.columns, *cdc]
    newer = "(t._cdc_seq IS NULL OR s._cdc_seq > t._cdc_seq)"

    def run(view: str) -> None:
        sql_tagged(
            folded.sparkSession,
            f"MERGE INTO {plan.target.sql} t USING {view} s ON {_key_match(plan)} "
            f"WHEN MATCHED AND s.__action = 'DELETE' AND {newer} THEN DELETE "
            f"WHEN MATCHED AND s.__action <> 'DELETE' AND {newer} THEN UPDATE SET {', '.join(assigned)} "
            f"WHEN NOT MATCHED AND s.__action = 'UPSERT' THEN INSERT ({', '.join(map(quoted, inserted))}) "
            f"VALUES ({', '.join('s.' + quoted(c) for c in inserted)})",
            properties,
        )

    _with_view(target_source(plan, folded, window_id), run)


def tombstone_source(plan: TablePlan, folded: DataFrame, window_id: str) -> DataFrame:
    """Deleted keys (new or advanced tombstones) and revived keys (tombstones to remove)."""
    touches_tombstones = (F.col("__action") == "DELETE") | (
        F.col("__action").isin("UPSERT", "PATCH") & F.col("__tombstoned")
    )
    return folded.where(touches_tombstones).select(
        *_key_columns(plan),
        F.col("__seq").alias("_cdc_seq"),
        F.col("__commit_ts").alias("_cdc_commit_ts"),
        F.lit(window_id).alias("_cdc_window"),
        F.col("__action"),
    )


def append_tombstones(plan: TablePlan, folded: DataFrame, window_id: str, properties: dict[str, str]) -> None:
    """The first commit of an empty tombstone table: every deleted key is a new tombstone
    (made only if the table is still empty when it commits, as :func:`append_target`)."""
    source = tombstone_source(plan, folded, window_id).where(F.col("__action") == "DELETE")
    columns = [*plan.key_names, "_cdc_seq", "_cdc_commit_ts", "_cdc_window"]
    frame = source.select(*[F.col(quoted(c)) for c in columns])
    append_tagged(frame, plan.tombstones.qualified, properties, read_at=None)


def merge_tombstones(
    plan: TablePlan, folded: DataFrame, window_id: str, cutoff: datetime | None, properties: dict[str, str]
) -> None:
    """Deletes and revives; with ``cutoff``, also purge tombstones committed before it."""
    cdc = ["_cdc_seq", "_cdc_commit_ts", "_cdc_window"]
    inserted = [*plan.key_names, *cdc]
    purge = (
        ""
        if cutoff is None
        else f" WHEN NOT MATCHED BY SOURCE AND t._cdc_commit_ts < TIMESTAMP '{format_ts(cutoff)}' THEN DELETE"
    )

    def run(view: str) -> None:
        sql_tagged(
            folded.sparkSession,
            f"MERGE INTO {plan.tombstones.sql} t USING {view} s ON {_key_match(plan)} "
            f"WHEN MATCHED AND s.__action = 'DELETE' AND s._cdc_seq > t._cdc_seq THEN UPDATE SET "
            f"{', '.join(f't.{c} = s.{c}' for c in cdc)} "
            f"WHEN MATCHED AND s.__action <> 'DELETE' AND s._cdc_seq > t._cdc_seq THEN DELETE "
            f"WHEN NOT MATCHED AND s.__action = 'DELETE' THEN INSERT ({', '.join(map(quoted, inserted))}) "
            f"VALUES ({', '.join('s.' + quoted(c) for c in inserted)})"
            f"{purge}",
            properties,
        )

    _with_view(tombstone_source(plan, folded, window_id), run)


def history_source(
    plan: TablePlan, changes: DataFrame, folded: DataFrame, target_before: DataFrame | None, window_id: str
) -> DataFrame:
    """New versions (one per applied non-delete change) and the close of each key's open version."""
    names = fold_columns(plan)
    applied = folded.where(F.col("__action").isin("UPSERT", "PATCH", "DELETE")).select("__key")
    live = changes.where("__live").join(applied, "__key", "left_semi")
    if target_before is not None:
        present = set(target_before.columns)
        base = target_before.select(
            F.expr(stored_key_text(plan)).alias("__key"),
            *[
                (F.col(quoted(name)) if name in present else F.lit(None)).cast(plan.columns[name]).alias(f"__b{value}")
                for name, (value, _) in names.values.items()
            ],
        )
        live = live.join(base, "__key", "left")
    else:
        live = live.select(
            "*", *[F.lit(None).cast(plan.columns[n]).alias(f"__b{v}") for n, (v, _) in names.values.items()]
        )
    ordered = Window.partitionBy("__key").orderBy("ordering_key")
    so_far = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    # Per column, the latest change touching it so far (as a struct, so a NULL value differs
    # from no change); typed from its text, or the row before the window where none did.
    live = live.select(
        "*",
        *[
            F.last(F.when(F.col(touched), F.struct(F.col(value).alias("v"))), ignorenulls=True).over(so_far).alias(f"__l{value}")
            for value, touched in names.values.values()
        ],
    )
    values = []
    for name, (value, _) in names.values.items():
        typed = F.expr(typed_value(f"__l{value}.v", plan.columns[name]))
        values.append(F.when(F.col(f"__l{value}").isNull(), F.col(f"__b{value}")).otherwise(typed).alias(name))
    versions = live.select(
        *_key_columns(plan),
        *values,
        F.col("ordering_key").alias("_cdc_seq"),
        F.col("commit_ts").alias("_cdc_commit_ts"),
        F.lit(window_id).alias("_cdc_window"),
        F.col("op").alias("_cdc_op"),
        F.col("commit_ts").alias("valid_from"),
        F.lead("commit_ts").over(ordered).alias("valid_to"),
        F.col("__is_delete"),
    ).where(~F.col("__is_delete")).drop("__is_delete").withColumn("__kind", F.lit("version"))
    # A close carries the key's first change of the window as its _cdc_seq: it closes only an
    # open version older than that, so the MERGE run again on its own result changes nothing.
    closes = live.groupBy("__key").agg(F.min_by("commit_ts", "ordering_key").alias("valid_to"),
                                       F.min("ordering_key").alias("_cdc_seq")).select(
        *_key_columns(plan),
        *[F.lit(None).cast(t).alias(n) for n, t in plan.columns.items()],
        F.col("_cdc_seq"),
        F.lit(None).cast("timestamp").alias("_cdc_commit_ts"),
        F.lit(window_id).alias("_cdc_window"),
        F.lit(None).cast("string").alias("_cdc_op"),
        F.lit(None).cast("timestamp").alias("valid_from"),
        F.col("valid_to"),
        F.lit("close").alias("__kind"),
    )
    return versions.unionByName(closes)


def merge_history(
    plan: TablePlan,
    changes: DataFrame,
    folded: DataFrame,
    target_before: DataFrame | None,
    window_id: str,
    properties: dict[str, str],
) -> None:
    columns = [*plan.key_names, *plan.columns, "_cdc_seq", "_cdc_commit_ts", "_cdc_window", "_cdc_op", "valid_from", "valid_to"]

    def run(view: str) -> None:
        sql_tagged(
            folded.sparkSession,
            f"MERGE INTO {plan.history_table.sql} t USING {view} s ON {_key_match(plan)} AND "
            f"((s.__kind = 'close' AND t.valid_to IS NULL AND (t._cdc_seq IS NULL OR t._cdc_seq < s._cdc_seq)) "
            f"OR (s.__kind = 'version' AND t._cdc_seq = s._cdc_seq)) "
            f"WHEN MATCHED AND s.__kind = 'close' THEN UPDATE SET t.valid_to = s.valid_to "
            f"WHEN NOT MATCHED AND s.__kind = 'version' THEN INSERT ({', '.join(map(quoted, columns))}) "
            f"VALUES ({', '.join('s.' + quoted(c) for c in columns)})",
            properties,
        )

    _with_view(history_source(plan, changes, folded, target_before, window_id), run)
