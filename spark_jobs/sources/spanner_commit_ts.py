"""The commit-timestamp source's Spark side: reads at exact timestamps, split by Spanner itself.

On the driver, for each instant the window reads at (its end ``e``; a re-seed's instant),
the reads :func:`airflow_cdc.sources.spanner_commit_ts.reads.plan_steps` plans:

1. The retention check (:func:`~airflow_cdc.sources.spanner_commit_ts.reads.check_retention`):
   an instant the database no longer keeps fails the window naming the fix, never skipping it.
2. One batch snapshot (a read-only transaction at exactly that instant), and Spanner's
   partitioned query (``PartitionQuery``) of every table's query: the window query
   ``[start, e)``, and the key query when the reconciliation is due.

A few Spark tasks per core run the Spanner partitions; each joins the batch snapshot from
another client (``BatchSnapshot.from_dict``) and turns the rows into change rows
(:mod:`airflow_cdc.sources.spanner_commit_ts.records`), or into key texts for the
reconciliation, handed to Spark as the read frame's Arrow batches (:mod:`.read_frame`), kept
as a local checkpoint that the extract job frees once the window is committed. The
reconciliation deletes every key the changelog holds alive (its last change is not a DELETE)
that the read no longer finds, at the read's instant. Outcomes: every table's partition
continues from ``e`` (or from a re-seed instant after it), its ``resume_position`` counting the
windows since its last reconciliation; a re-seed partition finishes.
"""

from __future__ import annotations

import json
import logging
import pickle
from collections import Counter
from dataclasses import dataclass

from airflow_cdc.faults import crash_point
from airflow_cdc.model import PartitionOutcome, parse_ts
from airflow_cdc.sources.base import changelog_tuple
from airflow_cdc.sources.spanner_commit_ts import RESEED_PREFIX
from airflow_cdc.sources.spanner_commit_ts.reads import (
    KEYS,
    check_retention,
    plan_steps,
    retention_error,
    table_query,
)
from airflow_cdc.sources.spanner_commit_ts.records import key_text, normalize, reconcile_delete, row_results
from airflow_cdc.sources.spanner_commit_ts.schema import TablePlan
from airflow_cdc.spark_jobs.sources import read_frame
from airflow_cdc.spark_jobs.sources.base import READ_TASKS_PER_CORE, SparkSide, WindowRead

log = logging.getLogger(__name__)


class CommitTimestampSpark(SparkSide):
    """The commit-timestamp source's Spark side: the window read whole, at exact instants."""

    def read_window(self, spark, plan) -> WindowRead:
        return read_window(self.source, spark, plan)


def read_window(source, spark, plan) -> WindowRead:
    """The window of the module doc: its reads planned, run in Spark tasks, reconciled."""
    window = plan.window
    tables = {name: TablePlan.from_json(t) for name, t in plan.options["tables"].items()}
    steps = plan_steps(window, plan.positions, tables, reconcile_every=source.reconcile_every,
                       initial_load=source.initial_load)
    reads = [read for step in steps for read in step.reads]
    database = source.connection.open_database()
    check_retention(database, window, [r.read_at for r in reads])
    tasks, snapshots = _partition_tasks(source, database, window, tables, reads)
    log.info("window %s: %d Spanner partitions over %d reads of %d tables", window.window_id,
             len(tasks), len(reads), len(steps))
    context = _TaskContext(
        connection=source.connection_json(), dialect=source.dialect,
        tables={n: t.to_json() for n, t in tables.items()},
        stream=window.stream_id, window_id=window.window_id,
    )
    # A few Spark tasks per core, each running its share of the Spanner partitions (Spanner
    # splits even a small table into dozens), rather than a Python task's fixed cost each.
    sc = spark.sparkContext
    slices = max(1, min(len(tasks), READ_TASKS_PER_CORE * sc.defaultParallelism))
    # The rows leave the tasks as the read frame's Arrow batches, kept as a local checkpoint.
    # A performance strategy. Saves: a pickled tuple per row, cached, counted by a Python pass
    # and converted by createDataFrame (a warm window of bench/extract.py --source
    # spanner_commit_ts, docs/performance.md).
    task_frame = spark.createDataFrame(
        sc.parallelize([(pickle.dumps(task),) for task in tasks], numSlices=slices), "task binary")
    frame = read_frame.kept(task_frame.mapInArrow(context.run, read_frame.read_schema()))
    tally: Counter = Counter()
    for counted in read_frame.summaries(frame):
        tally.update(counted)
    for snapshot in snapshots:
        snapshot.close()
    changes = read_frame.rows_of(frame)
    kept = [frame]
    deletes, reconciled = _reconcile(spark, plan, tables, steps, read_frame.keys_of(frame))
    if reconciled:
        changes = changes.unionByName(deletes)
        kept.append(deletes)
    dead_count = sum(n for (kind, _), n in tally.items() if kind == "dead")
    return WindowRead(
        rows=changes,
        outcomes=_outcomes(plan, steps, tally),
        counts={
            "rows": sum(n for (kind, _), n in tally.items() if kind == "row"),
            "soft_deletes": sum(n for (kind, _), n in tally.items() if kind == "soft"),
            "reconciled_deletes": reconciled,
            "reconciled_tables": sum(1 for r in reads if r.mode == KEYS),
            "partitions_read": len(tasks),
            "reseeds": sum(1 for p in plan.positions if p.partition_id.startswith(RESEED_PREFIX)),
            "dead_letters": dead_count,
        },
        dead_letters=read_frame.dead_letters_of(frame) if dead_count else None,
        kept=tuple(kept),
    )


def _partition_tasks(source, database, window, tables, reads) -> tuple[list, list]:
    """Step 2 of the module doc: one batch snapshot per instant, and the Spanner partitions
    of every read at it, as (read, partition, sql, params, snapshot) tasks; and the snapshots
    (closed by the caller once the tasks ran)."""
    from google.api_core.exceptions import FailedPrecondition

    tasks, snapshots = [], []
    try:
        for instant in sorted({r.read_at for r in reads}):
            snapshot = database.batch_snapshot(read_timestamp=instant)
            snapshots.append(snapshot)
            batches = []
            for read in (r for r in reads if r.read_at == instant):
                query = table_query(source.dialect, tables[read.table], read)
                for batch in snapshot.generate_query_batches(
                    query.sql, params=query.params or None,
                    param_types=query.param_types or None,
                    max_partitions=source.max_partitions,
                ):
                    batches.append((read, batch["partition"], query.sql, query.params))
            shared = snapshot.to_dict()
            shared = {"session_id": shared["session_id"], "transaction_id": shared["transaction_id"]}
            tasks += [(*batch, shared) for batch in batches]
    except FailedPrecondition as error:
        database.reload()
        raise retention_error(window, instant, database.version_retention_period or "1h",
                              database.earliest_version_time) from error
    return tasks, snapshots


def _outcomes(plan, steps, tally: Counter) -> list[PartitionOutcome]:
    """Every table's partition continues (records: its rows and dead letters); a re-seed
    partition finishes."""
    window = plan.window
    outcomes = [
        PartitionOutcome(
            partition_id=step.table,
            finished=False,
            watermark=step.watermark,
            records=tally.get(("row", step.table), 0) + tally.get(("dead", step.table), 0),
            resume_position=json.dumps(
                {"windows_since_reconcile": step.windows_since_reconcile}, sort_keys=True),
        )
        for step in steps
    ]
    for position in plan.positions:
        if position.partition_id.startswith(RESEED_PREFIX):
            outcomes.append(PartitionOutcome(position.partition_id, True,
                                             max(window.end, parse_ts(position.resume_position))))
    return outcomes


def _reconcile(spark, plan, tables, steps, found):
    """DELETE changes for the keys the changelog holds alive that the key reads did not find
    (``found``: the read frame's keys), kept as a local checkpoint (the window's every pass
    over its rows would run the changelog's scan again); and how many."""
    due = {read.table: read.read_at for step in steps for read in step.reads if read.mode == KEYS}
    if not due or not spark.catalog.tableExists(plan.changelog_table):
        return None, 0
    from pyspark.sql import functions as F

    names = {tables[t].table: t for t in due}
    alive = (
        spark.table(plan.changelog_table)
        .where((F.col("stream") == plan.window.stream_id)
               & F.col("source_table").isin(list(names)))
        .groupBy("source_table", F.to_json(F.map_entries("keys")).alias("entries"))
        .agg(F.max_by(F.struct("op", "keys"), "ordering_key").alias("last"))
        .where(F.col("last.op") != "DELETE")
        .select("source_table", "last.keys")
        .rdd.map(lambda r: ((names[r[0]], _texts_key(r[1])), dict(r[1])))
    )
    found = found.rdd.map(lambda r: ((r[0], r[1]), None))
    stream, window_id = plan.window.stream_id, plan.window.window_id
    plans = {name: tables[name].to_json() for name in due}
    deletes = alive.subtractByKey(found).map(
        lambda item: changelog_tuple(reconcile_delete(
            TablePlan.from_json(plans[item[0][0]]), item[1], stream=stream,
            window_id=window_id, read_at=due[item[0][0]])))
    deletes = read_frame.kept(spark.createDataFrame(deletes, read_frame.changelog_ddl()))
    return deletes, deletes.count()


def _texts_key(texts) -> str:
    """The key text of a changelog ``keys`` map (already value texts)."""
    return json.dumps(dict(texts), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class _TaskContext:
    """What a Spark task needs to run Spanner partitions (plain values: it is pickled)."""

    connection: dict
    dialect: str
    tables: dict
    stream: str
    window_id: str

    def run(self, batches):
        """Runs on an executor (``mapInArrow`` over the pickled tasks): the rows of its Spanner
        partitions as the read frame's Arrow batches (:mod:`.read_frame`):
        change rows, dead letters, the keys of reconciliation reads, and last one summary
        counting the results per (kind, table): "row", "dead", "soft" (soft deletes), "key"."""
        from google.cloud.spanner_v1 import param_types
        from google.cloud.spanner_v1.database import BatchSnapshot

        from airflow_cdc.sources.spanner.reader import SpannerConnection

        def bad_row(row, error):
            return read_frame.bad_row_dead_letter(self.stream, self.window_id, row, error)

        database = SpannerConnection(**self.connection).open_database()
        plans = {name: TablePlan.from_json(t) for name, t in self.tables.items()}
        counted: Counter = Counter()  # (kind, table) -> results
        dead: list[tuple] = []
        for batch in batches:
            for blob in batch.column("task").to_pylist():
                read, token, sql, params, shared = pickle.loads(blob)
                plan = plans[read.table]
                snapshot = BatchSnapshot.from_dict(database, shared)
                query = {"partition": token, "query": {
                    "sql": sql, "params": params or None,
                    "param_types": {n: param_types.TIMESTAMP for n in params} or None}}
                crash_point("extract.reading")  # the reliability matrix's point (off: a no-op)
                keys: list[str] = []
                rows: list[tuple] = []
                for values in snapshot.process_query_batch(query):
                    if read.mode == KEYS:
                        types = plan.types
                        keys.append(key_text({k: normalize(v, types.get(k, ""))
                                              for k, v in zip(plan.keys, values)}))
                        continue
                    for kind, _, result in row_results(
                            plan, values, table=read.table, stream=self.stream,
                            window_id=self.window_id, read_at=read.read_at):
                        if kind == "row":
                            rows.append(result)
                        else:
                            counted[(kind, read.table)] += 1
                            if kind == "dead":
                                dead.append(result)
                    if len(rows) >= read_frame.ROWS_PER_BATCH:
                        yield from table_batches(read.table, rows, dead, bad_row, counted)
                        rows = []
                if keys:
                    counted[("key", read.table)] += len(keys)
                    yield read_frame.key_batch(read.table, keys)
                yield from table_batches(read.table, rows, dead, bad_row, counted)
        if dead:
            yield read_frame.dead_batch(dead)
        yield read_frame.summary_batch(counted)


def table_batches(table: str, rows: list[tuple], dead: list[tuple], bad_row, counted: Counter):
    """The change rows of ``table`` as the read frame's Arrow batches, counted in ``counted``
    as ("row", table); a row Arrow cannot hold joins ``dead`` as ``bad_row(row, error)`` and is
    counted as ("dead", table)."""
    before = len(dead)
    for batch in read_frame.row_batches(rows, dead, bad_row):
        counted[("row", table)] += batch.num_rows
        yield batch
    if len(dead) > before:
        counted[("dead", table)] += len(dead) - before


