"""A commit-timestamp window on Spark: reads at exact timestamps, split by Spanner itself.

On the driver, for each instant the window reads at (its end ``e``; a re-seed's instant):

1. The retention check: an instant older than the database's ``earliest_version_time``
   (``version_retention_period`` back from now) cannot be read, and the window fails naming
   the window, the retention and the fix (:class:`RetentionExceededError`), never skipping it.
2. One batch snapshot (a read-only transaction at exactly that instant), and Spanner's
   partitioned query (``PartitionQuery``) of every table's query: the window query
   ``[start, e)``, and the key query when the reconciliation is due.

A few Spark tasks per core run the Spanner partitions; each joins the batch snapshot from
another client (``BatchSnapshot.from_dict``) and turns the rows into change rows
(:mod:`.rows`), or into key texts for the reconciliation, handed to Spark as the read frame's
Arrow batches (:mod:`airflow_cdc.sources.read_frame`), kept as a local checkpoint that the
extract job frees once the window is committed. The reconciliation deletes every key the changelog
holds alive (its last change is not a DELETE) that the read no longer finds, at the read's
instant. Outcomes: every table's partition continues from ``e`` (or from a re-seed instant
after it), its ``resume_position`` counting the windows since its last reconciliation; a
re-seed partition finishes.

Spark and the Spanner client are imported inside the functions: the source package is
imported on the Airflow side too.
"""

from __future__ import annotations

import json
import logging
import pickle
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from airflow_cdc.faults import crash_point
from airflow_cdc.model import PartitionOutcome, PartitionPosition, format_ts, parse_ts
from airflow_cdc.sources import read_frame
from airflow_cdc.sources.base import (
    READ_TASKS_PER_CORE,
    DeadLetter,
    WindowRead,
    changelog_tuple,
    dead_letter_tuple,
)
from airflow_cdc.sources.spanner_commit_ts import RESEED_PREFIX
from airflow_cdc.sources.spanner_commit_ts.errors import RetentionExceededError
from airflow_cdc.sources.spanner_commit_ts.rows import (
    UnreadableRowError,
    key_text,
    normalize,
    reconcile_delete,
    row_change,
)
from airflow_cdc.sources.spanner_commit_ts.schema import CHANGELOG, TablePlan
from airflow_cdc.sources.spanner_commit_ts.sql import key_query, window_query

log = logging.getLogger(__name__)
ROWS, KEYS = "rows", "keys"


@dataclass(frozen=True)
class TableRead:
    """One query of one table at one instant."""

    table: str  # the configured name: the table's partition id
    mode: str  # ROWS or KEYS
    read_at: datetime
    start: datetime | None = None  # ROWS: the lower bound (None: the whole table)


@dataclass
class TableStep:
    """What one window does with one table."""

    table: str
    position: PartitionPosition
    reads: list[TableRead] = field(default_factory=list)
    watermark: datetime | None = None
    windows_since_reconcile: int = 0


def reseed_instant(positions) -> datetime | None:
    """The instant of the re-seed this window takes (its ``reseed:<instant>`` partition)."""
    instants = [parse_ts(p.resume_position) for p in positions
                if p.partition_id.startswith(RESEED_PREFIX)]
    return max(instants) if instants else None


def plan_steps(window, positions, tables: Mapping[str, TablePlan], *, reconcile_every: int,
               initial_load: bool) -> list[TableStep]:
    """Which reads the window makes per table (pure; see the module doc)."""
    by_id = {p.partition_id: p for p in positions}
    reseed_at = reseed_instant(positions)
    steps = []
    for name, table in tables.items():
        position = by_id.get(name)
        if position is None:
            continue  # a table the stream does not read in this window (not planned)
        state = json.loads(position.resume_position) if position.resume_position else None
        since = int((state or {}).get("windows_since_reconcile", 0))
        step = TableStep(name, position)
        start = position.start if state is not None or not initial_load else None
        reconcile_at = None
        if reseed_at is not None:
            step.reads.append(TableRead(name, ROWS, reseed_at, None))
            reconcile_at, since = reseed_at, 0
            start = reseed_at
        if start is None or start < window.end:
            step.reads.append(TableRead(name, ROWS, window.end, start))
            since += 1
            if reconcile_every and since >= reconcile_every and table.kind != CHANGELOG:
                reconcile_at, since = window.end, 0
        if reconcile_at is not None and table.kind != CHANGELOG:
            step.reads.append(TableRead(name, KEYS, reconcile_at))
        step.windows_since_reconcile = since
        step.watermark = max(d for d in (window.end, position.start, reseed_at) if d is not None)
        steps.append(step)
    return steps


def check_retention(database, window, instants) -> None:
    """Refuse reading at an instant older than the database keeps versions (never skip)."""
    database.reload()
    earliest = database.earliest_version_time
    retention = database.version_retention_period or "1h (the default)"
    for instant in sorted(set(instants)):
        if earliest is not None and instant < earliest:
            raise retention_error(window, instant, retention, earliest)


def retention_error(window, instant: datetime, retention: str, earliest) -> RetentionExceededError:
    earliest_text = format_ts(earliest) if isinstance(earliest, datetime) else str(earliest)
    return RetentionExceededError(
        f"window {window.window_id} of stream {window.stream_id} must be read at "
        f"{format_ts(instant)}, but the database keeps versions for {retention} only (the "
        f"earliest readable instant is {earliest_text}): the window's changes can no longer be "
        f"read as of its end, and skipping it would lose them. Fix: re-seed the targets from a "
        f"read at the current time with SpannerCommitTimestampReseedOperator (stream "
        f"{window.stream_id!r}), then clear this window's plan task; the window then takes the "
        f"re-seed. To keep it from happening again, raise the database's "
        f"version_retention_period (up to 7 days) above the longest time a window may wait"
    )


def read_window(source, spark, plan) -> WindowRead:
    from google.api_core.exceptions import FailedPrecondition

    window = plan.window
    tables = {name: TablePlan.from_json(t) for name, t in plan.options["tables"].items()}
    steps = plan_steps(window, plan.positions, tables, reconcile_every=source.reconcile_every,
                       initial_load=source.initial_load)
    reads = [read for step in steps for read in step.reads]
    database = source.connection.open_database()
    check_retention(database, window, [r.read_at for r in reads])
    tasks, snapshots = [], []
    try:
        for instant in sorted({r.read_at for r in reads}):
            snapshot = database.batch_snapshot(read_timestamp=instant)
            snapshots.append(snapshot)
            batches = []
            for read in (r for r in reads if r.read_at == instant):
                query = _query(source.dialect, tables[read.table], read)
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
    log.info("window %s: %d Spanner partitions over %d reads of %d tables", window.window_id,
             len(tasks), len(reads), len(steps))
    context = _TaskContext(
        connection=source.connection_json(), dialect=source.dialect,
        tables={n: t.to_json() for n, t in tables.items()},
        stream=window.stream_id, window_id=window.window_id,
    )
    # A few Spark tasks per core, each running its share of the Spanner partitions (Spanner
    # splits even a small table into dozens): a task per partition paid a Python task's fixed
    # cost each time (figures in docs/performance.md).
    sc = spark.sparkContext
    slices = max(1, min(len(tasks), READ_TASKS_PER_CORE * sc.defaultParallelism))
    # The rows leave the tasks as the read frame's Arrow batches, kept as a local checkpoint. A
    # performance strategy: they were an RDD of pickled tuples, cached, counted by a Python
    # pass and converted row by row by createDataFrame. Saves: a
    # warm window of 100,000 rows on the emulator read in 19.5-19.6 s instead of 23.0-23.5 s,
    # the next one, a key reconciliation finding 10,000 of them deleted, in 14.4-16.4 s instead
    # of 17.1-18.4 s.
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
    soft = sum(n for (kind, _), n in tally.items() if kind == "soft")
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
    dead_count = sum(n for (kind, _), n in tally.items() if kind == "dead")
    return WindowRead(
        rows=changes,
        outcomes=outcomes,
        counts={
            "rows": sum(n for (kind, _), n in tally.items() if kind == "row"),
            "soft_deletes": soft,
            "reconciled_deletes": reconciled,
            "reconciled_tables": sum(1 for r in reads if r.mode == KEYS),
            "partitions_read": len(tasks),
            "reseeds": sum(1 for p in plan.positions if p.partition_id.startswith(RESEED_PREFIX)),
            "dead_letters": dead_count,
        },
        dead_letters=read_frame.dead_letters_of(frame) if dead_count else None,
        kept=tuple(kept),
    )


def _query(dialect: str, table: TablePlan, read: TableRead):
    if read.mode == KEYS:
        return key_query(dialect, table.table, table.keys)
    return window_query(dialect, table.table, [c for c, _ in table.columns], table.column,
                        read.start, read.read_at)


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
        partitions as the read frame's Arrow batches (:mod:`airflow_cdc.sources.read_frame`):
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


def row_results(plan: TablePlan, values, *, table: str, stream: str, window_id: str,
                read_at: datetime) -> list[tuple]:
    """What one result row of a window read becomes: ("row", table, changelog tuple), after
    ("soft", table, None) for a soft delete; or one ("dead", table, dead-letter tuple) naming
    the row and the fault, whatever the row holds (the window's other rows still land)."""
    try:
        if len(values) != len(plan.columns):
            raise UnreadableRowError(
                f"row of {plan.table} has {len(values)} values for its {len(plan.columns)} "
                f"columns {[name for name, _ in plan.columns]}")
        row = row_change(plan, values, stream=stream, window_id=window_id, read_at=read_at)
        written = changelog_tuple(row)
    except Exception as error:  # noqa: BLE001 - the row is kept with the reason
        reason = str(error) if isinstance(error, UnreadableRowError) else (
            f"row of {plan.table} cannot become a change row ({type(error).__name__}: {error})")
        try:
            raw = json.dumps([repr(v) for v in values])
        except Exception:  # noqa: BLE001
            raw = f"<a {type(values).__name__} of values>"
        return [("dead", table, dead_letter_tuple(stream, window_id,
                                                  DeadLetter(table, raw, reason, plan.table)))]
    soft = [("soft", table, None)] if row.op == "DELETE" else []
    return [*soft, ("row", table, written)]
