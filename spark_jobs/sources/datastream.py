"""Datastream's Spark side: a window's planned event files read into change rows, in one pass.

The extract job (``spark_jobs/extract.py``) calls :meth:`DatastreamSpark.read_window` and does
the rest as for every source (one changelog commit tagged with the window, the dead letters'
commit, the outcome file). What is Datastream's own:

1. The planned files are read by Spark's file system, one row per file, and parsed inside
   Spark tasks (``mapInArrow``), whose events leave as the read frame's Arrow batches
   (:mod:`.read_frame`); each file's bytes become change rows and dead letters by the wire
   format (:mod:`airflow_cdc.sources.datastream.records`: exact decimals, Avro's writer
   schema types, dead letters for malformed lines, files, events and Avro blocks).
2. Tables keyed by Oracle ROWID are counted by name (``rowid_keyed_tables``), so a window
   says when it used the key that moves.
3. Duplicates by uuid are dropped within the window (the copy from the first file is kept)
   and against every event id already in the changelog (:meth:`DatastreamSpark.drop_repeats`:
   Datastream delivers at least once, and a duplicate may come windows later).
4. A planned file that is gone fails the window naming it and the fix, before anything is read.
5. The outcome: every file finished; the progress partition at the newest read_timestamp
   minus the allowed lateness, or at the window end when an idle source is declared
   complete, counted as ``idle_declared``
   (:func:`airflow_cdc.sources.datastream.progress.progress_outcome`).
"""

from __future__ import annotations

import functools

from airflow_cdc.faults import crash_point
from airflow_cdc.model import PartitionOutcome
from airflow_cdc.sources.datastream import PROGRESS_PARTITION
from airflow_cdc.sources.datastream.discovery import event_file_format
from airflow_cdc.sources.datastream.keys import table_keys
from airflow_cdc.sources.datastream.progress import progress_outcome
from airflow_cdc.sources.datastream.records import (
    TableSettings,
    avro_file_results,
    json_file_results,
    normal_path,
)
from airflow_cdc.sources.datastream.types import declared_column_types
from airflow_cdc.sources.read_errors import planned_files_missing
from airflow_cdc.spark_jobs.sources import read_frame
from airflow_cdc.spark_jobs.sources.base import SparkSide, WindowRead
from airflow_cdc.spark_jobs.sources.dedup import drop_seen_event_ids


class DatastreamSpark(SparkSide):
    """Datastream's Spark side: the window's files read whole, repeats dropped."""

    rows_pass_through = False  # repeats are dropped

    def read_window(self, spark, plan) -> WindowRead:
        return read_window(spark, plan)

    def drop_repeats(self, spark, plan, frame):
        return drop_seen_event_ids(spark, plan.changelog_table, plan.window.stream_id, frame)


def missing_files(spark, paths: list[str]) -> list[str]:
    """The ``paths`` that do not exist, asked of the file system Spark reads them with (a
    local folder, ``gs://`` through the cluster's connector ...), on the driver."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    gone = []
    for path in paths:
        hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
        if not hadoop_path.getFileSystem(conf).exists(hadoop_path):
            gone.append(path)
    return gone


def file_contents(spark, paths: list[str]):
    """A frame of (path, content) of the planned files, read by Spark's file system (a local
    folder, ``gs://`` through the cluster's connector ...): one row per file."""
    # Spark lists more than 32 paths with a distributed job (meant for folders of
    # partitions); a window's named files are listed cheaper by the driver itself.
    spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", "1024")
    return spark.read.format("binaryFile").load(paths).select("path", "content")


def read_file_batches(stream: str, window_id: str, tables: TableSettings, formats: dict, batches):
    """Runs on an executor (``mapInArrow`` over :func:`file_contents`): every event of the
    files in ``batches``, as the read frame's Arrow batches (:mod:`.read_frame`):
    change rows, dead letters, and last one summary of what the task read: (records per
    file, events, dead letters, newest read ms, ROWID-keyed tables)."""
    def bad_row(row, error):
        return read_frame.bad_row_dead_letter(stream, window_id, row, error)

    crash_point("extract.reading")
    per_file: dict[str, int] = {}
    dead: list[tuple] = []
    rows: list[tuple] = []
    events = 0
    newest = None
    by_row_id: set[str] = set()
    for batch in batches:
        paths, contents = batch.column("path"), batch.column("content")
        for index in range(batch.num_rows):
            path = normal_path(paths[index].as_py())
            file_format = formats.get(path) or event_file_format(path)  # as planned, else by suffix
            read = avro_file_results if file_format == "avro" else json_file_results
            results = read(stream, window_id, tables, path, contents[index].as_py())
            per_file[path] = per_file.get(path, 0) + len(results)
            for kind, values, read_ms, row_id_table in results:
                (rows if kind == "row" else dead).append(values)
                if row_id_table is not None:
                    by_row_id.add(row_id_table)
                if read_ms is not None and (newest is None or read_ms > newest):
                    newest = read_ms
            if len(rows) >= read_frame.ROWS_PER_BATCH:
                for out in read_frame.row_batches(rows, dead, bad_row):
                    events += out.num_rows
                    yield out
                rows = []
    for out in read_frame.row_batches(rows, dead, bad_row):
        events += out.num_rows
        yield out
    if dead:
        yield read_frame.dead_batch(dead)
    yield read_frame.summary_batch((per_file, events, len(dead), newest, by_row_id))


def read_window(spark, plan) -> WindowRead:
    """Steps 1, 2, 4 and 5 of the module doc for ``plan`` (a WindowPlanFile); step 3 is
    :meth:`DatastreamSpark.drop_repeats`.

    The files' events reach Spark as Arrow batches of the read frame, kept as a local
    checkpoint. A performance strategy. Saves: a Python tuple per event pickled, cached and
    converted by ``createDataFrame`` row by row (``bench/extract.py --source datastream``,
    docs/performance.md).
    """
    window, window_id = plan.window, plan.window.window_id
    stream = window.stream_id
    options = plan.options
    files = [p for p in plan.positions if p.partition_id != PROGRESS_PARTITION]
    tables = TableSettings(
        keys=table_keys(plan.source, options),
        types=declared_column_types(plan.source.get("column_types"), stream),
    )
    gone = missing_files(spark, [p.partition_id for p in files])
    if gone:
        raise planned_files_missing(gone, window)
    formats = {normal_path(p.partition_id): p.resume_position for p in files}
    if files:
        frame = read_frame.kept(file_contents(spark, [p.partition_id for p in files]).mapInArrow(
            functools.partial(read_file_batches, stream, window_id, tables, formats),
            read_frame.read_schema()))
        summaries = read_frame.summaries(frame)
        rows = read_frame.rows_of(frame)
    else:
        frame, summaries = None, []
        rows = spark.createDataFrame([], read_frame.read_schema()).select(*read_frame.CHANGELOG_NAMES)
    per_file: dict[str, int] = {}
    for files_seen, *_ in summaries:
        for path, number in files_seen.items():
            per_file[path] = per_file.get(path, 0) + number
    events = sum(s[1] for s in summaries)
    dead_letters = sum(s[2] for s in summaries)
    newest_ms = max((s[3] for s in summaries if s[3] is not None), default=None)
    outcomes = [
        PartitionOutcome(p.partition_id, finished=True, watermark=p.start,
                         records=int(per_file.get(normal_path(p.partition_id), 0)))
        for p in files
    ]
    progress, idle = progress_outcome(plan, events + dead_letters, newest_ms)
    if progress is not None:
        # Records stay with the files that held them, so the window's record count adds up.
        outcomes.append(progress)
    return WindowRead(
        rows=rows,
        outcomes=outcomes,
        counts={
            "events": events,
            "dead_letters": dead_letters,
            "files": len(files),
            "idle_declared": 1 if idle else 0,
            "rowid_keyed_tables": sorted(set().union(*(s[4] for s in summaries))),
        },
        dead_letters=read_frame.dead_letters_of(frame) if dead_letters else None,
        kept=(frame,) if frame is not None else (),
    )


