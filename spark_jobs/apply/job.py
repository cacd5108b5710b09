"""Apply one window of one stream's changelog to current-state Iceberg tables, exactly once.

Procedure (:func:`apply_window`):

1. Read the window's changelog rows (``stream``, ``window_id``) and their declarations: the
   distinct source tables and column declarations, with counts. The window's changelog
   commit records them (``changelog.py``); each fold then checks its table's counts against
   the record as it reads the rows, and a record that disagrees (or none) is replaced by an
   aggregate of the rows, and the tables planned and folded again.
2. Plan each source table (``schema.plan_tables``): its target, key columns, typed columns
   and the declarations whose rows are dead letters. A new target's key columns are those
   of the table's first change: taken from any one change, and kept when the fold finds
   that every change names the same ones; otherwise read from the first change and the
   table folded again with them.
3. Per table, find the window's earlier commits (a re-run). A table whose target commit and
   every commit that commit announced are present is done: nothing is recomputed. Otherwise
   the target and tombstones are read *as they were before the window* (the tagged commit's
   parent, or the current snapshot when untagged; always a fixed snapshot, so nothing
   computed here changes when this job then commits), and the table's changes are folded per key
   (``fold.py``) into a checkpointed frame of one outcome per key.
4. Dead letters of every table are appended in one tagged commit (unless the window's
   commit exists). With ``on_dead_letter = fail`` (the default) the job then stops with
   :class:`DeadLettersError`, before any target changes: the window fails, visibly.
5. Per table: create or evolve the tables, then make the window's missing commits side by
   side (target MERGE, tombstone MERGE with the purge, history MERGE; each in its own thread,
   so one's planning and commit overlap the others' work). A target without rows yet is
   appended to instead of merged (its first window, often an initial snapshot, is the
   largest). A crash leaves any subset of these commits made; running the window again
   repairs it: the re-run recomputes the same outcome from the same pre-window state and
   makes only the missing commits, so the tables end as after one clean run (I1).

Exactly once thus rests on both mechanisms: window tags decide which commits are missing,
and the ordering-key guard (target ``_cdc_seq`` and tombstones) makes any change that is
re-applied or arrives late lose (I2, I3).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from airflow_cdc.model import WINDOW_SNAPSHOT_PROPERTY, CdcError
from spark_jobs.commits import (
    WindowCommit,
    append_tagged,
    current_summary,
    own_window_commit,
    table_before,
    window_commit,
    window_commit_and_since,
    window_properties,
)
from spark_jobs.apply.config import ApplyConfig, TableName
from spark_jobs.changelog import check_changelog_columns, recorded_declarations, window_declarations
from spark_jobs.apply.dead_letters import create_dead_letter_table, in_table_order
from spark_jobs.apply.fold import (
    dead_letter_rows,
    fold_partitions,
    fold_table,
    ordered_changes,
    parse_changes,
)
from spark_jobs.apply.schema import Declaration, TablePlan, plan_tables, prepare_target
from spark_jobs.apply.targets import (
    RUNTIME_GROUP_FILTER,
    append_target,
    append_tombstones,
    merge_history,
    merge_target,
    merge_tombstones,
    rewrites_nearly_every_file,
)


class ApplyError(CdcError):
    """The apply job cannot run as configured (missing catalog or changelog table)."""


class DeadLettersError(CdcError):
    """The window has dead letters and its policy is ``fail``; carries the job's result."""

    def __init__(self, message: str, result: ApplyResult) -> None:
        super().__init__(message)
        self.result = result


class InjectedFault(CdcError):
    """Raised at a configured ``fault_point`` (crash tests)."""


@dataclass
class TableResult:
    """What apply did to one source table's target in this window."""

    source_table: str | None
    target_table: str | None
    changes: int = 0
    upserts: int = 0
    patches: int = 0
    deletes: int = 0
    superseded_changes: int = 0
    dead_letter_rows: int = 0
    dead_keys: int = 0
    clashing_keys: int = 0
    added_columns: list[str] = field(default_factory=list)
    widened_columns: list[str] = field(default_factory=list)
    target_snapshot_id: int | None = None
    tombstone_snapshot_id: int | None = None
    history_snapshot_id: int | None = None
    already_applied: bool = False


@dataclass
class ApplyResult:
    stream: str
    window_id: str
    status: str  # "applied" or "failed" (dead letters under the fail policy)
    dead_letter_table: str
    dead_letter_rows: int = 0
    dead_letter_snapshot_id: int | None = None
    tables: list[TableResult] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def table(self, source_table: str) -> TableResult:
        for table in self.tables:
            if table.source_table == source_table:
                return table
        raise KeyError(f"source table {source_table!r} was not in window {self.window_id!r}")


@dataclass
class _TableWork:
    plan: TablePlan
    result: TableResult
    commits: dict[str, WindowCommit | None] = field(default_factory=dict)
    folded: DataFrame | None = None
    changes: DataFrame | None = None
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


def apply_window(spark: SparkSession, config: ApplyConfig | Mapping[str, object]) -> ApplyResult:
    """Apply the window ``config`` names; see the module doc. Returns the counts and snapshot ids."""
    if not isinstance(config, ApplyConfig):
        config = ApplyConfig.from_dict(config)
    _require_catalog(spark, config.catalog)
    _import_function_classes(spark)
    changelog = config.changelog_table.qualified
    if not spark.catalog.tableExists(changelog):
        raise ApplyError(
            f"changelog table {changelog} does not exist: the extract step creates it; check "
            f"changelog_table and the catalog's warehouse"
        )
    check_changelog_columns(spark, changelog)
    reader = spark.read.option("split-size", str(config.changelog_split_size))
    rows = reader.table(changelog).where(
        (F.col("window_id") == F.lit(config.window_id)) & (F.col("stream") == F.lit(config.stream))
    )
    result = ApplyResult(
        stream=config.stream,
        window_id=config.window_id,
        status="applied",
        dead_letter_table=config.dead_letter_table.qualified,
    )
    works: list[_TableWork] = []
    try:
        recorded = _recorded_declarations(spark, changelog, config.window_id)
        if recorded is not None:
            works = _fold_tables(spark, config, rows, recorded, check=True)
            if any(work.declarations_disagree for work in works):
                for work in works:  # the record does not describe the rows: aggregate them instead
                    _release(work)
                recorded, works = None, []
        if recorded is None:
            works = _fold_tables(spark, config, rows, window_declarations(rows), check=False)
        result.tables.extend(work.result for work in works)
        _commit_dead_letters(spark, config, works, result)
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
        for work in works:
            _commit_table(spark, config, work)
    finally:
        for work in works:
            _release(work)
    return result


def _fold_tables(
    spark: SparkSession, config: ApplyConfig, rows: DataFrame, declarations: list[Declaration], check: bool
) -> list[_TableWork]:
    """Plan every source table of the window from ``declarations`` and fold each (steps 2-3).

    With ``check`` (declarations recorded by the changelog commit), a table whose fold read
    another number of rows than its declarations count is marked (``declarations_disagree``),
    and so is one the declarations would dead-letter whole (no fold checks its rows); the
    caller then starts again from an aggregate of the rows.
    """
    guessed: dict[str | None, tuple[str, ...] | None] = {}

    def some_keys(table: str | None) -> tuple[str, ...] | None:
        guessed[table] = _some_keys(rows, table)
        return guessed[table]

    works: list[_TableWork] = []
    try:
        for plan in plan_tables(spark, config, declarations, some_keys):
            work = _fold(spark, config, plan, rows, check)
            works.append(work)
            if plan.source_table in guessed and (work.other_key_groups or plan.reason is not None):
                # A new target's keys were guessed from any one change; only when some change
                # names other key columns can the table's first change name others.
                table = plan.source_table
                first = _first_keys(rows, table)
                if first != guessed[table]:
                    _release(works.pop())
                    mine = [d for d in declarations if d.source_table == table]
                    work = _fold(spark, config, plan_tables(spark, config, mine, lambda _: first)[0], rows, check)
                    works.append(work)
            if check and work.plan.reason is not None and not work.result.already_applied:
                # Dead-lettered whole, from what the declarations say (types, keys), and with
                # their count: no fold reads these rows to check them, so the rows decide.
                work.declarations_disagree = True
            if work.declarations_disagree:
                break
    except BaseException:
        for work in works:
            _release(work)
        raise
    return works


def _recorded_declarations(spark: SparkSession, changelog: str, window_id: str) -> list[Declaration] | None:
    """The declarations the window's changelog commit records (see ``changelog.py``), or None.

    They stand for an aggregate of the window's rows because the window's rows are the rows
    of that one commit (the extract's protocol: one tagged commit per window, and nothing
    else writes the window's rows), the record accounts for every row the commit added, and
    no commit since has deleted or rewritten rows (compactions and appends do not change the
    window's rows; a DELETE, UPDATE or MERGE on the changelog does). Each fold then checks its
    table's row count against them (:func:`_fold`).
    """
    found = window_commit_and_since(spark, changelog, window_id)
    if found is None:
        return None
    commit, since = found
    for snapshot in since:
        summary = snapshot.get("summary") or {}
        # Appends of other windows and compactions (replace) leave the window's rows as they
        # are; a second commit of the window (a racing extract) or any other operation may not.
        if summary.get("operation") not in ("append", "replace") or summary.get(WINDOW_SNAPSHOT_PROPERTY) == window_id:
            return None
    return recorded_declarations(commit.summary)


def _release(work: _TableWork) -> None:
    """Free the memory of the table's checkpointed frames now, not at a later JVM GC.

    A local checkpoint keeps its blocks (the folded keys: tens of MB per window) until the
    checkpointed RDD is garbage collected; a session that applies window after window would
    carry them into the next window's fold.
    """
    for frame in (work.folded, work.changes):
        if frame is None:
            continue
        plan = frame._jdf.queryExecution().logical()
        if plan.getClass().getSimpleName() == "LogicalRDD":  # a checkpoint (changes is one only with history)
            plan.rdd().unpersist(False)
    work.folded = work.changes = None


def _require_catalog(spark: SparkSession, catalog: str) -> None:
    if spark.conf.get(f"spark.sql.catalog.{catalog}", None) is None:
        raise ApplyError(
            f"Spark catalog {catalog!r} is not configured in this session: start the job with "
            f"the IcebergCatalog's conf (catalog_conf in the job config, or IcebergCatalog.spark_conf())"
        )


def _import_function_classes(spark: SparkSession) -> None:
    """Let py4j find the classes behind ``pyspark.sql.functions`` by their single-type imports.

    Every ``F.<function>`` call looks its class up by simple name; without a single-type
    import py4j tries each wildcard import PySpark registers, loading classes that do not
    exist, before it reaches ``org.apache.spark.sql.functions``. The job builds a few
    thousand expressions per window, so that search cost a noticeable part of its
    driver time. Idempotent.
    """
    from py4j.java_gateway import java_import

    jvm = spark.sparkContext._jvm
    java_import(jvm, "org.apache.spark.sql.functions")
    java_import(jvm, "org.apache.spark.api.python.PythonUtils")


def _some_keys(rows: DataFrame, source_table: str | None) -> tuple[str, ...] | None:
    """The key-column names of one change of the table that names keys (None: no change does).

    The cheap first answer for a new target's keys: Spark stops reading at the first such
    row. :func:`apply_window` keeps it only when every change of the table names these same
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


def _table_rows(rows: DataFrame, source_table: str | None) -> DataFrame:
    if source_table is None:
        return rows.where(F.col("source_table").isNull())
    return rows.where(F.col("source_table") == F.lit(source_table))


def _fold(
    spark: SparkSession,
    config: ApplyConfig,
    plan: TablePlan,
    rows: DataFrame,
    check: bool = False,
) -> _TableWork:
    result = TableResult(
        source_table=plan.source_table,
        target_table=None if plan.target is None else plan.target.qualified,
        changes=plan.rows,
    )
    work = _TableWork(plan=plan, result=result)
    table_rows = _table_rows(rows, plan.source_table)
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
        recorded = work.commits["target"].apply_properties().get("counts", {})
        for name, value in recorded.items():
            if hasattr(result, name) and name not in ("added_columns", "widened_columns"):
                setattr(result, name, value)
        result.already_applied = True
        _record_snapshots(work)
        return work

    target_before = table_before(spark, plan.target.qualified, work.commits["target"])
    if target_before is not None:
        work.target_summary = current_summary(spark, plan.target.qualified)
    tombstones_before = table_before(spark, plan.tombstones.qualified, work.commits["tombstones"])
    # Tombstones past the horizon, counted as the fold's job reads the tombstones (no job of
    # its own): the tombstone MERGE purges them in the same commit, only when one exists,
    # since the purge makes the MERGE rewrite every tombstone file.
    expired = None
    if tombstones_before is not None:
        expired = Observation(f"cdc_expired_{uuid.uuid4().hex}")
        tombstones_before = tombstones_before.observe(
            expired, F.count_if(F.col("_cdc_commit_ts") < F.lit(config.tombstone_cutoff)).alias("expired")
        )
    guard_rows = _total_records(work.target_summary)
    if tombstones_before is not None:
        guard_rows += _total_records(current_summary(spark, plan.tombstones.qualified))
    partitions = fold_partitions(plan.rows + guard_rows, spark.sparkContext.defaultParallelism, config.fold_rows_per_task)
    changes = ordered_changes(
        table_rows, plan, target_before, tombstones_before, check_values=plan.history, partitions=partitions
    )
    if plan.history:  # the history reads every change again; computed once, here
        changes = changes.localCheckpoint(eager=True)
    # Checkpointed, not only cached: the MERGEs below embed this frame in plans Iceberg
    # rewrites, where a cache is not always recognised, and a cache is dropped when a table
    # it read is written; a checkpoint is never recomputed. The counts are observed as the
    # checkpoint is computed, so they cost no job of their own.
    counts = Observation(f"cdc_counts_{uuid.uuid4().hex}")
    folded = fold_table(changes, plan).observe(counts, *_count_metrics()).localCheckpoint(eager=True)
    work.folded, work.changes, work.target_before = folded, changes, target_before
    work.tombstones_before = tombstones_before
    observed = {name: int(value or 0) for name, value in counts.get.items()}
    _record_counts(work, observed)
    # With ``check``, plan.rows is what the recorded declarations say; the fold counted the rows.
    work.declarations_disagree = check and observed["rows_read"] != plan.rows
    if result.dead_letter_rows:
        work.dead_letters = dead_letter_rows(parse_changes(table_rows, plan), folded)
    work.purge_due = expired is not None and bool(expired.get["expired"])
    return work


def _total_records(summary: Mapping[str, str] | None) -> int:
    """A snapshot summary's ``total-records`` (0 when it does not say): an estimate of rows."""
    try:
        return int((summary or {}).get("total-records", 0))
    except ValueError:
        return 0


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


def _record_counts(work: _TableWork, counts: Mapping[str, int]) -> None:
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


def _already_applied(work: _TableWork) -> bool:
    target = work.commits.get("target")
    if target is None:
        return False
    announced = target.apply_properties()
    if announced.get("tombstones") and work.commits.get("tombstones") is None:
        return False
    if announced.get("history") and work.commits.get("history") is None:
        return False
    return True


def _record_snapshots(work: _TableWork) -> None:
    for role, attribute in (
        ("target", "target_snapshot_id"),
        ("tombstones", "tombstone_snapshot_id"),
        ("history", "history_snapshot_id"),
    ):
        commit = work.commits.get(role)
        if commit is not None:
            setattr(work.result, attribute, commit.snapshot_id)


def _commit_dead_letters(spark: SparkSession, config: ApplyConfig, works: list[_TableWork], result: ApplyResult) -> None:
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
    _fault(config, "after_dead_letter_commit")


def _commit_table(spark: SparkSession, config: ApplyConfig, work: _TableWork) -> None:
    """Make the table's missing commits (target, tombstones, history), side by side.

    The three commits are independent: each is computed from the same checkpointed fold and
    the same pre-window snapshots, and a re-run makes whichever of them is missing (I1). So
    they run in parallel threads, each Spark job using the cores the others leave idle while
    they plan, join or commit. A failed commit does not stop the others; once all are done,
    the first failure (in target, tombstones, history order) is raised.
    """
    plan, result = work.plan, work.result
    if plan.reason is not None or result.already_applied:
        return
    prepare_target(spark, plan, config.stream)
    tombstones_due = bool(result.deletes or work.revives) or work.purge_due
    history_due = plan.history and bool(result.upserts + result.patches + result.deletes)
    target_due = bool(result.upserts + result.patches + work.deletes_in_target)
    window_id = config.window_id

    def commit_target() -> None:
        counts = {
            name: getattr(result, name)
            for name in (
                "changes", "upserts", "patches", "deletes", "superseded_changes",
                "dead_letter_rows", "dead_keys", "clashing_keys",
            )
        }
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
        _fault(config, f"fail_{_FAULT_NAMES[role]}_commit")
        run()
        work.commits[role] = own_window_commit(spark, table.qualified, window_id)

    # A target MERGE that rewrites nearly every file anyway skips the search for the files
    # to rewrite. (A session setting: set around all of the table's commits, not per thread.)
    merging_target = target_due and work.commits["target"] is None and work.target_before is not None
    skip_file_search = merging_target and rewrites_nearly_every_file(
        work.target_summary, work.updates_in_target + work.deletes_in_target
    )
    try:
        with _session_conf(spark, RUNTIME_GROUP_FILTER, "false") if skip_file_search else nullcontext():
            _side_by_side([lambda m=m: commit(*m) for m in missing])
    finally:
        _record_snapshots(work)


_FAULT_NAMES = {"target": "target", "tombstones": "tombstone", "history": "history"}


def _side_by_side(calls: list[Callable[[], None]]) -> None:
    """Run ``calls`` in parallel threads (inline when there is one); raise the first failure.

    Each thread inherits the caller's Spark local properties (job group, scheduler pool), so
    its jobs show up, and can be cancelled, with the caller's.
    """
    if len(calls) <= 1:
        for call in calls:
            call()
        return
    from pyspark.util import inheritable_thread_target

    with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="cdc-apply-commit") as pool:
        futures = [pool.submit(inheritable_thread_target(call)) for call in calls]
    for future in futures:
        error = future.exception()
        if error is not None:
            raise error


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


def _fault(config: ApplyConfig, point: str) -> None:
    if point in config.fault_points:
        raise InjectedFault(f"injected fault {point!r} in window {config.window_id!r} (fault_point)")
