"""Extract job: read one window of any change source into the changelog table, exactly once.

Usage (spark-submit): ``extract.py --plan <plan.json> --outcome <outcome.json> --result <result.json>
[--source-overrides <secrets.json>] [--apply-config <apply.json> --apply-result <fused.json>]``

Procedure (ARCHITECTURE.md, window protocol step 2), the same for every source:
1. If the changelog already has the commit tagged with this window, write nothing: restore
   the outcome file from that commit and stop (a re-run after a crash at any later point).
2. Read the window through the plan's source (:mod:`airflow_cdc.sources.registry`) and its
   Spark side (:mod:`airflow_cdc.spark_jobs.sources`): a source that reads partitions
   (``read_partition``) is read by Spark tasks, each reading its share of the partitions one
   after the other (READ_TASKS_PER_CORE tasks per core; their workers started ahead, during
   step 1: :func:`start_read_workers`); when its partitions split (``partitions_split``),
   children whose parents all reported are read in further rounds, still inside this window
   (lineage rules); the others take one round, and reporting children is refused. A source
   that reads whole windows (``reads_whole_windows``, e.g. Datastream's files) is read by its
   Spark side's ``read_window`` and hands back the same rows and outcomes.
3. Check that every source transaction is complete across partitions, or fail naming it.
   The window's changelog writer (:func:`airflow_cdc.spark_jobs.changelog_files.changelog_writer`,
   the one place that chooses) then takes the rows: Spark's writer joins the rows the Spark
   side reads natively (``native_rows``: Debezium's staged snapshot batches), drops rows the
   changelog already holds (``drop_repeats``: sources that deliver at least once) and lets
   the Spark side check the whole window (``check_window``: Debezium's transactions); the
   direct writer takes the files the read tasks wrote (a performance strategy).
4. Commit the window's dead letters to the stream's dead-letter table, once (marked with the
   window in the commit's summary).
5. Append all rows in ONE changelog commit tagged with the window and carrying the outcome
   in its snapshot summary, then write the outcome file for the commit task.
6. With ``--apply-config``: apply the window in the same Spark application (the apply job
   with this session, :func:`apply_in_same_application`), so the apply task starts no Spark
   (a performance strategy: saves one Spark application per window; ``bench/window.py``
   shows it, figures in docs/performance.md).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import sys
from collections.abc import Sequence
from datetime import timedelta

from airflow_cdc.faults import crash_point
from airflow_cdc.model import CdcError, format_ts
from airflow_cdc.pipeline.files import WindowOutcomeFile, WindowPlanFile, with_source_overrides
from airflow_cdc.pipeline.partition_lineage import (
    IncompleteTransactionError,
    WindowLineage,
    check_transactions,
    run_rounds,
)
from airflow_cdc.sources.registry import build_source
from airflow_cdc.spark_jobs.sources import spark_side
from airflow_cdc.spark_jobs.sources.base import READ_TASKS_PER_CORE, WindowRead
from airflow_cdc.spark_jobs.spark_line import sql_with_args

# Marks the extract job's dead-letter commit; apply tags its own with the window property.
DEAD_LETTER_PROPERTY = "airflow-cdc.extract-dead-letters"

# A window with at most this many transaction tallies (about one per record) is checked on
# the driver (check_transactions_on_driver), a larger one on the executors.
DRIVER_CHECK_TALLIES = 20_000
# Rows per Spark task after the reads (and so per changelog file of a window, about).
ROWS_PER_TASK = 250_000

_SOURCES: dict[str, object] = {}


def _executor_source(plan: WindowPlanFile):
    """:func:`window_source` on an executor: the first one built there also sends the
    readers' progress lines to stderr."""
    if not _SOURCES:
        _log_progress_to_stderr()
    return window_source(plan)


def window_source(plan: WindowPlanFile):
    """The plan's source, built once per process (executors reuse one client across tasks)."""
    key = json.dumps([plan.source, plan.options], sort_keys=True, default=str)
    source = _SOURCES.get(key)
    if source is None:
        source = _SOURCES[key] = build_source(plan.source, plan.options)
    return source


@functools.lru_cache(maxsize=2)
def _parsed_plan(plan_json: str) -> WindowPlanFile:
    """The plan, parsed once per executor process: it lists every planned position, so
    parsing it for each of a thousand partitions cost more than reading a small one."""
    return WindowPlanFile.from_json(plan_json)


def start_read_workers(spark, plan: WindowPlanFile) -> None:
    """Start the Python workers the window's partition reads will run in, one per core, each
    with the source's client loaded and opened (``ChangeSource.prepare_reads``), in a Spark
    job of its own in a background thread, while the driver checks and prepares the
    changelog (step 1); nothing for a source Spark reads natively.

    A performance strategy. Saves: the first round's task starting its worker, importing the
    client library and opening the client while the other cores idle, and each later worker
    doing it again before reading (``bench/extract.py``, docs/performance.md).
    """
    import threading

    if window_source(plan).reads_whole_windows:
        return
    sc = spark.sparkContext
    cores = sc.defaultParallelism
    # Analysed here, before step 1 loads the catalog: analysis waits for a catalog being loaded.
    frame = spark.range(cores, numPartitions=cores).mapInArrow(
        functools.partial(prepare_read_worker, plan.to_json()), "prepared long")

    def run():
        try:
            sc.setJobDescription("airflow-cdc extract: start the read workers")
            frame.collect()
        except Exception as error:  # noqa: BLE001 - the reads start their own workers and report
            print(f"airflow-cdc extract: the read workers did not start ahead ({type(error).__name__}); "
                  f"the reads start them", file=sys.stderr, flush=True)

    threading.Thread(target=run, name="airflow-cdc-read-workers", daemon=True).start()


def prepare_read_worker(plan_json: str, batches):
    """Runs on an executor (``mapInArrow``): the window's source built and its reads prepared
    in this worker, which the reads then reuse (Spark keeps idle Python workers)."""
    import pyarrow.parquet  # noqa: F401 - the read tasks' own modules, loaded now too

    from airflow_cdc.spark_jobs.sources import read_frame, task_files  # noqa: F401

    for _ in batches:
        pass
    _executor_source(_parsed_plan(plan_json)).prepare_reads()
    return iter(())


def read_partition_task(plan_json: str, position_json: dict):
    """Runs on an executor: read one partition; rows and dead letters leave as tuples."""
    from airflow_cdc.pipeline.files import position_from_json

    plan = _parsed_plan(plan_json)
    window = plan.window
    read, rows, dead = _executor_source(plan).read_partition_tuples(window, position_from_json(position_json))
    crash_point("extract.reading")
    return read.outcome, read.transactions, rows, dead, dict(read.counts)


@contextlib.contextmanager
def cycle_collector_paused():
    """Python's cycle collector off while a partition is read, turned into tuples and handed
    on (its Arrow batches, its rows written to the changelog's files).

    A performance strategy. Saves: a read makes millions of short-lived objects (decoded
    values, records, rows, tuples) and keeps hundreds of thousands of them until its rows are
    handed on, so the collector would run often and walk them all, and find nothing: they
    hold no cycles, and reference counting frees them (CPU of the read tasks,
    ``bench/extract.py``, docs/performance.md). Cycles made meanwhile (a retried read's
    exception and traceback) wait for the collector, which is on again when the partition is
    handed on, failed or not.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_positions(plan_json: str, positions: Sequence[dict], batches, sink=None):
    """Runs on an executor (``mapInArrow``): read the partitions of the round's ``positions``
    (their JSON) whose indexes are in ``batches``, one after the other; each read leaves as
    Arrow batches of the read frame (:mod:`airflow_cdc.spark_jobs.sources.read_frame`). With ``sink`` (a
    ``FileSink``), the rows are written to the changelog's files instead, which leave as the
    task's last batch."""
    from airflow_cdc.spark_jobs.sources.read_frame import bad_row_dead_letter, files_batch, partition_batches
    from airflow_cdc.spark_jobs.sources.task_files import TaskFiles

    plan = _parsed_plan(plan_json)
    window = plan.window
    files = None if sink is None else TaskFiles(sink)

    def bad_row(row, error):
        return bad_row_dead_letter(window.stream_id, window.window_id, row, error)

    try:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                with cycle_collector_paused():
                    outcome, tallies, rows, dead, counts = read_partition_task(plan_json, positions[index])
                    yield from partition_batches(outcome, tallies, rows, dead, counts, bad_row,
                                                 None if files is None else files.write)
        if files is not None:
            written, declared, held = files.close()
            yield from held  # a small read's rows: the driver has them written with others
            yield files_batch(written, declared)
    except BaseException:
        if files is not None:
            files.abort()
        raise


def _log_progress_to_stderr() -> None:
    """Executors' progress lines (records, watermark, lag per partition, at the reader's
    steady rhythm) go to stderr, which spark-submit hands to the Airflow task log."""
    import logging

    logger = logging.getLogger("airflow_cdc")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("airflow-cdc %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def report_round(window, round_number: int, results) -> None:
    """One line per partition read in a round: records, watermark, lag behind the window end."""
    for outcome, _ in sorted(results, key=lambda r: r[0].partition_id):
        lag = max(window.end - outcome.watermark, timedelta(0))
        print(
            f"airflow-cdc extract round {round_number}: partition {outcome.partition_id} "
            f"records={outcome.records} watermark={format_ts(outcome.watermark)} lag={lag} "
            f"{'finished, children=' + str(len(outcome.children)) if outcome.finished else 'continues'}",
            flush=True,
        )


def read_partitions(spark, plan: WindowPlanFile, sink=None) -> WindowRead:
    """Step 2-3 for a source that reads partitions: rounds of Spark tasks, each reading its
    share of the round's partitions into the round's read frame (:mod:`airflow_cdc.spark_jobs.sources.read_frame`).
    With ``sink`` (``airflow_cdc.spark_jobs.changelog_files.file_sink``) the tasks write the rows to the
    changelog's files, and the read's ``rows`` are those files (``ChangelogFiles``); a read
    that fails (a later round, an incomplete transaction) deletes the files it wrote, so a
    window retried until it is complete leaves none behind."""
    files: list = []  # changelog files the read tasks wrote (with a sink)
    try:
        return _read_partitions(spark, plan, sink, files)
    except BaseException:
        if files:
            from airflow_cdc.spark_jobs.changelog_files import discard

            discard(files)
        raise


def _read_partitions(spark, plan: WindowPlanFile, sink, files: list) -> WindowRead:
    source = window_source(plan)
    lineage = WindowLineage(plan.positions, plan.pending_children, source.resolve_child)
    rounds = _Rounds(spark, plan, sink, files, lineage)
    outcomes, _ = run_rounds(lineage, rounds.read_round)
    if not source.partitions_split and any(o.children for o in outcomes):
        split = sorted(o.partition_id for o in outcomes if o.children)
        raise CdcError(
            f"source {source.kind!r} reported children of partitions {split[:5]} but declares "
            f"partitions_split = False: set it on the source class if its partitions split"
        )
    transactions = rounds.checked_transactions(outcomes)
    source.check_partitions(outcomes, lineage.still_pending)
    totals = rounds.totals
    return WindowRead(
        rows=rounds.rows(),
        outcomes=outcomes,
        counts={
            "records": sum(o.records for o in outcomes),
            "partitions": len(outcomes),
            "children": len({c.partition_id for o in outcomes for c in o.children}),
            "finished": sum(1 for o in outcomes if o.finished),
            "transactions": transactions,
            "rounds": lineage.rounds,
            **({"dead_letters": totals["dead"]} if totals["dead"] else {}),
            **rounds.source_counts,
        },
        dead_letters=rounds.dead_letters(),
        pending_children=tuple(lineage.still_pending),
        kept=tuple(rounds.frames),
    )


class _Rounds:
    """A window's rounds of partition reads: their kept read frames, the changelog files the
    read tasks wrote (with a sink), and what the reads' summaries add up to."""

    def __init__(self, spark, plan: WindowPlanFile, sink, files: list, lineage) -> None:
        self.spark, self.plan, self.sink, self.files, self.lineage = spark, plan, sink, files, lineage
        self.plan_json = plan.to_json()
        self.frames: list = []
        self.declared: list = []  # the declarations of the files' rows
        self.totals = {"rows": 0, "tallies": 0, "dead": 0, "whole": 0}
        self.source_counts: dict[str, int] = {}

    def read_round(self, batch) -> list:
        """One round: the positions of ``batch`` read by Spark tasks into a kept read frame;
        only the outcomes and counts come to the driver (rows, dead letters and transaction
        tallies stay in the frame: the driver's memory must not grow with the window)."""
        from airflow_cdc.pipeline.files import position_to_json
        from airflow_cdc.spark_jobs.sources import read_frame

        # The tasks read the positions by index: a frame of indexes is made in the JVM. A
        # performance strategy. Saves: a frame of the positions themselves, made from a
        # parallelized Python list, had its rows converted by Python workers of their own kind
        # (Spark keeps them apart from mapInArrow's), started cold in every round
        # (bench/extract.py, docs/performance.md).
        tasks = max(1, min(len(batch), READ_TASKS_PER_CORE * self.spark.sparkContext.defaultParallelism))
        read = functools.partial(read_positions, self.plan_json, [position_to_json(p) for p in batch],
                                 sink=self.sink)
        frame = read_frame.kept(self.spark.range(len(batch), numPartitions=tasks).mapInArrow(
            read, read_frame.read_schema()))
        self.frames.append(frame)
        results = []
        found, written, declarations = read_frame.summaries_and_files(frame)
        self.files.extend(written)
        self.declared.extend(declarations)
        for outcome, counts, rows, tallies, dead, whole in found:
            for name, value in (("rows", rows), ("tallies", tallies), ("dead", dead), ("whole", whole)):
                self.totals[name] += value
            for name, value in counts.items():
                self.source_counts[name] = self.source_counts.get(name, 0) + value
            results.append((outcome, ()))
        report_round(self.plan.window, self.lineage.rounds, results)
        return results

    def checked_transactions(self, outcomes) -> int:
        """Step 3's transaction check: transactions a read held whole are complete; the
        others' records are tallied. Returns the window's transactions."""
        from airflow_cdc.spark_jobs.sources import read_frame

        transactions = self.totals["whole"]
        if self.totals["tallies"]:
            check = (check_transactions_on_driver if self.totals["tallies"] <= DRIVER_CHECK_TALLIES
                     else check_transactions_on_executors)
            transactions += check(_union([read_frame.tallies_of(f) for f in self.frames]),
                                  self.plan.window, outcomes)
        return transactions

    def rows(self):
        """The window's rows: the changelog files the read tasks wrote (the rows small reads
        held back written by one more pass), else the frames' rows."""
        from airflow_cdc.spark_jobs.sources import read_frame

        if self.files:  # read tasks wrote the changelog's files (a sink, and reads large enough)
            from airflow_cdc.spark_jobs.changelog_files import ChangelogFiles

            held = self.totals["rows"] - sum(f.rows for f in self.files)
            if held:  # small reads handed their rows over: written in about a file per core
                more, more_declared = write_rows(
                    fitted(_union([read_frame.rows_of(f) for f in self.frames]), held), self.sink)
                self.files.extend(more)
                self.declared.extend(more_declared)
            return ChangelogFiles(tuple(self.files), tuple(self.declared))
        if self.frames:
            return fitted(_union([read_frame.rows_of(f) for f in self.frames]), self.totals["rows"])
        # a plan without partitions to read (none in the window): no rows
        return self.spark.createDataFrame([], read_frame.read_schema()).select(*read_frame.CHANGELOG_NAMES)

    def dead_letters(self):
        """The rounds' dead letters (about a partition per core), or None."""
        from airflow_cdc.spark_jobs.sources import read_frame

        if not self.totals["dead"]:
            return None
        dead = _union([read_frame.dead_letters_of(f) for f in self.frames])
        cores = self.spark.sparkContext.defaultParallelism
        return dead.coalesce(cores) if dead.rdd.getNumPartitions() > cores else dead


def write_rows(rows, sink) -> tuple[list, list]:
    """Write ``rows`` (a frame of changelog rows) to the changelog's files, a file per
    partition of ``rows`` and day, on the executors; returns the files and declarations."""
    from airflow_cdc.spark_jobs.sources import read_frame

    written = rows.mapInArrow(functools.partial(write_batches, sink), read_frame.read_schema())
    return read_frame.summaries_and_files(written)[1:]


def write_batches(sink, batches):
    """Runs on an executor (``mapInArrow``): ``batches`` of changelog rows into the
    changelog's files; yields them as one ``files`` row."""
    from airflow_cdc.spark_jobs.sources.read_frame import files_batch
    from airflow_cdc.spark_jobs.sources.task_files import TaskFiles

    files = TaskFiles(sink, hold=False)
    try:
        for batch in batches:
            files.write(batch)
        written, declared, _ = files.close()
    except BaseException:
        files.abort()
        raise
    yield files_batch(written, declared)


def fitted(frame, rows: int):
    """``frame`` (of about ``rows`` rows) with its partitions merged when they are many small ones.

    One Spark partition per read task is right for reading, not always for what follows (a
    task per partition in every later stage, a changelog file per partition): small ones
    (a small window, rounds of a window whose partitions split) are merged into about
    ROWS_PER_TASK-row partitions, whole waves of them (a multiple of the cores). Large ones
    are left as they are: merging a few large partitions into fewer than the cores' waves
    would leave cores idle for the last tasks of the write.
    """
    cores = frame.sparkSession.sparkContext.defaultParallelism
    tasks = cores * max(1, -(-rows // (ROWS_PER_TASK * cores)))
    partitions = frame.rdd.getNumPartitions()
    if partitions > tasks and rows < partitions * (ROWS_PER_TASK // 4):
        return frame.coalesce(tasks)
    return frame


def _union(frames: list):
    return functools.reduce(lambda a, b: a.union(b), frames)


def check_transactions_on_executors(tallies, window, outcomes) -> int:
    """Step 3's transaction check (:func:`~airflow_cdc.pipeline.partition_lineage.
    check_transactions`, the same rule and messages) where the tallies are: one aggregate per
    transaction and one over them, in Spark SQL; the driver gets one row. Returns the number
    of transactions; raises IncompleteTransactionError naming the first incomplete one (its
    tallies, and only its, are checked again on the driver for the message)."""
    from pyspark.sql import functions as F

    short = min((o.watermark for o in _stopped_short(window, outcomes)), default=None)
    # One shuffle by transaction, then two hash aggregates within it: per (transaction,
    # record), which makes the records distinct, and per transaction, which counts them
    # (non-null ones, as a set would). Saves: ``size(collect_set(record))``, an object hash
    # aggregate that falls back to sorting after 128 keys per task (bench/extract.py --full,
    # docs/performance.md).
    per_record = tallies.repartition("transaction_id").groupBy("transaction_id", "record").agg(
        F.min("expected").alias("low"), F.max("expected").alias("high"), F.max("commit_ts").alias("commit_ts"))
    per_transaction = per_record.groupBy("transaction_id").agg(
        F.count("record").alias("seen"), F.min("low").alias("low"),
        F.max("high").alias("high"), F.max("commit_ts").alias("commit_ts"))
    split = F.col("commit_ts").isNotNull() & (F.col("commit_ts") < F.lit(window.start))
    if short is not None:
        split = split | (F.col("commit_ts").isNotNull() & (F.col("commit_ts") >= F.lit(short)))
    problem = (F.col("low") != F.col("high")) | ((F.col("seen") != F.col("low")) & ~split)
    [found] = per_transaction.agg(
        F.count(F.lit(1)).alias("transactions"),
        F.min(F.when(problem, F.col("transaction_id"))).alias("first"),
    ).collect()
    if found["first"] is not None:
        first = tallies.where(F.col("transaction_id") == found["first"])
        check_transactions(_as_tallies(first), window, outcomes)  # raises, naming it
        raise IncompleteTransactionError(f"transaction {found['first']} is incomplete in this window")
    return found["transactions"]


def check_transactions_on_driver(tallies, window, outcomes) -> int:
    """Step 3's transaction check for a window of at most :data:`DRIVER_CHECK_TALLIES` tallies:
    the same rule as :func:`check_transactions_on_executors`, checked on the driver.

    A performance strategy. Saves: the executors' check is a shuffle (a job of two stages)
    whose fixed cost a small window pays in full; collecting a few thousand tallies costs one
    stage over the cached reads (a profile of the driver in bench/window.py; figures in
    docs/performance.md). The bound keeps the driver's memory
    independent of the window.
    """
    return len(check_transactions(_as_tallies(tallies), window, outcomes))


def _as_tallies(tallies) -> list:
    """The rows of a tally frame (transaction_id, expected, record, commit_ts), collected, as
    TransactionTally values (commit times as UTC microseconds: no local time zone between)."""
    from datetime import datetime

    from pyspark.sql import functions as F

    from airflow_cdc.model import UTC
    from airflow_cdc.sources.base import TransactionTally

    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    rows = tallies.select("transaction_id", "expected", "record",
                          F.expr("unix_micros(commit_ts)").alias("micros")).collect()
    # A row without a record tallies none, as the executors' count(record) skips it.
    return [TransactionTally(r["transaction_id"], r["expected"], frozenset({r["record"]} - {None}),
                             None if r["micros"] is None else epoch + timedelta(microseconds=r["micros"]))
            for r in rows]


def _stopped_short(window, outcomes) -> list:
    """The one fact about the whole window the transaction rule needs: the outcomes whose
    evidence stopped short of the window end (usually none)."""
    return [o for o in outcomes if not o.finished and o.watermark < window.end]


def extract_window(spark, plan: WindowPlanFile, outcome_path: str) -> dict:
    """Steps 1-5 above; returns the result summary."""
    from airflow_cdc.spark_jobs.changelog import commit_window_with_outcome, recorded_window_result
    from airflow_cdc.spark_jobs.changelog_files import changelog_writer
    from airflow_cdc.spark_jobs.checkpoints import release_checkpoint
    from airflow_cdc.spark_jobs.commits import current_snapshot_id

    table = plan.changelog_table
    start_read_workers(spark, plan)  # while step 1 runs on the driver
    read_at = current_snapshot_id(spark, table)  # first: a commit of the window after it conflicts
    recorded = recorded_window_result(spark, table, plan.window.window_id, outcome_path)
    if recorded is not None:
        return recorded

    source = window_source(plan)
    side = spark_side(source)
    writer = changelog_writer(spark, table, source, side)
    if source.reads_whole_windows:
        read = side.read_window(spark, plan)
    else:
        read = read_partitions(spark, plan, writer.sink)
    rows = writer.window_rows(spark, plan, side, read)
    try:
        if read.dead_letters is not None:
            append_dead_letters(spark, plan, read.dead_letters)
        outcome = WindowOutcomeFile(
            window_id=plan.window.window_id,
            outcomes=tuple(sorted(read.outcomes, key=lambda o: o.partition_id)),
            pending_children=tuple(read.pending_children),
            counts=source.window_counts({**read.counts, **rows.checked},
                                        sum(d.rows for d in rows.declarations)),
        )
    except BaseException:  # before the commit (which discards on its own): no commit lists them
        rows.discard()
        raise
    result = commit_window_with_outcome(spark, table, rows.rows, outcome, outcome_path,
                                        rows.declarations, read_at)
    rows.release()
    for kept in read.kept:
        release_checkpoint(kept)
    return result


def append_dead_letters(spark, plan: WindowPlanFile, dead) -> None:
    """One commit of the window's extract dead letters (``dead``: a DataFrame of the changelog's
    columns and ``reason``), written once (marked in its summary)."""
    from pyspark.sql import functions as F

    from airflow_cdc.spark_jobs.apply.dead_letters import DEAD_LETTER_COLUMNS

    window_id = plan.window.window_id
    dead_table = plan.options.get("dead_letter_table") or plan.changelog_table.replace(
        "_changelog", "_dead_letters")
    columns = ", ".join(f"`{name}` {kind}" for name, kind in DEAD_LETTER_COLUMNS)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {dead_table.rsplit('.', 1)[0]}")
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {dead_table} ({columns}) USING iceberg "
        f"TBLPROPERTIES ('format-version' = '2')"
    )
    done = sql_with_args(
        spark,
        f"SELECT 1 FROM {dead_table}.snapshots WHERE summary[:property] = :window_id LIMIT 1",
        {"property": DEAD_LETTER_PROPERTY, "window_id": window_id},
    ).collect()
    if done:
        return
    # The read frame's dead letters: the changelog's columns and reason.
    frame = dead.withColumn("target_table", F.lit(None).cast("string"))
    frame.writeTo(dead_table).option(f"snapshot-property.{DEAD_LETTER_PROPERTY}", window_id).append()


def apply_in_same_application(spark, config_path: str, result_path: str, changelog_snapshot_id) -> None:
    """Step 6: apply the window with this job's session (``apply_job``, the apply task's own
    job, unchanged) and record how it went in ``result_path`` for the apply task, with the
    changelog commit it applied. A failed apply does not fail the extract, which is
    committed: the apply task then runs the apply job itself and reports why."""
    from airflow_cdc.spark_jobs import apply_job
    from airflow_cdc.spark_jobs.changelog import read_text, write_text

    fused: dict = {"changelog_snapshot_id": changelog_snapshot_id}
    applied_path = f"{result_path}.apply"
    try:
        code = apply_job.main(["--job-config", config_path, "--result", applied_path], spark=spark)
        if code == 0:
            fused["apply"] = json.loads(read_text(spark, applied_path))
        else:
            fused["error"] = f"the apply job ended with exit code {code} (its log says why)"
    except Exception as error:  # noqa: BLE001 - reported; the apply task runs the job again
        fused["error"] = f"{type(error).__name__}: {error}"[:2000]
        print(f"airflow-cdc extract: the window's apply failed: {fused['error']}", file=sys.stderr,
              flush=True)
    write_text(spark, result_path, json.dumps(fused, sort_keys=True))


def forget_secret_file(spark, path: str) -> None:
    """Delete a secret file once read: a task killed while its job ran cannot delete it. An
    anonymous memory file of the task (:mod:`airflow_cdc.spark.secrets`) needs nothing."""
    from airflow_cdc import work_root
    from airflow_cdc.spark.secrets import is_process_file

    if is_process_file(path):
        return
    try:
        work_root.remove(path)
    except Exception as error:  # noqa: BLE001 - the task deletes it again when the job ends
        print(f"airflow-cdc extract: could not delete the secret file {path}: "
              f"{type(error).__name__}", file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, help="plan file written by the plan task")
    parser.add_argument("--outcome", required=True, help="where to write the outcome file")
    parser.add_argument("--result", required=True, help="where to write the result summary")
    parser.add_argument(
        "--source-overrides",
        help="JSON file merged into the plan's source spec (short-lived credentials)",
    )
    parser.add_argument("--apply-config", help="apply the window too, with this apply job config")
    parser.add_argument("--apply-result", help="where to record the apply (with --apply-config)")
    args = parser.parse_args(argv)
    if bool(args.apply_config) != bool(args.apply_result):
        parser.error("--apply-config and --apply-result go together")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Read the plan (merging source overrides), extract the window, write its result summary."""
    from pyspark.sql import SparkSession

    from airflow_cdc.spark_jobs.changelog import read_text, write_text
    from airflow_cdc.spark_jobs.secret_conf import load_secret_conf
    from airflow_cdc.spark_jobs.session import end_job_session

    args = parse_args(argv)
    spark = SparkSession.builder.getOrCreate()
    try:
        load_secret_conf(spark)  # before the catalog is first used
        plan = WindowPlanFile.from_json(read_text(spark, args.plan))
        if args.source_overrides:
            overrides = json.loads(read_text(spark, args.source_overrides))
            forget_secret_file(spark, args.source_overrides)
            plan = with_source_overrides(plan, overrides)
        result = extract_window(spark, plan, args.outcome)
        write_text(spark, args.result, json.dumps(result, sort_keys=True))
        if args.apply_config:
            apply_in_same_application(spark, args.apply_config, args.apply_result,
                                      result.get("snapshot_id"))
    finally:
        end_job_session(spark)
    return 0


if __name__ == "__main__":
    # spark-submit runs this file as __main__, whose functions cloudpickle ships by value: each
    # task would unpickle its own copy of _SOURCES, and so open a new client (channel, session)
    # per partition. Run as the module airflow_cdc.spark_jobs.extract: executors import it once per worker.
    from airflow_cdc.spark_jobs import extract as _extract_module

    sys.exit(_extract_module.main())
