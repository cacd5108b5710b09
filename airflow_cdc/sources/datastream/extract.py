"""Datastream's window read on Spark: the planned event files into change rows, in one pass.

The extract job (``spark_jobs/extract.py``) calls :func:`read_window` through
:meth:`DatastreamSource.read_window <airflow_cdc.sources.datastream.source.DatastreamSource>`
and does the rest as for every source (one changelog commit tagged with the window, the
dead letters' commit, the outcome file). What is Datastream's own:

1. The planned files are read by Spark's file system, one row per file, and parsed inside
   Spark tasks (``mapInArrow``), whose events leave as the read frame's Arrow batches
   (:mod:`airflow_cdc.sources.read_frame`): JSON lines each parsed with exact
   decimals (Spark's JSON reader would turn ``20.00`` into a double first); Avro through
   fastavro, the payload's column types from each file's writer schema (spark-avro drops the
   schema's logical types, and pyspark ships without it: one reader, one mapping). Both give
   the same plain events, mapped by :mod:`.events`, with the column types the pipeline
   declares (``column_types`` in the spec) first.
2. Events are keyed by the plan's key columns per table (declared in the spec, looked up into
   the options), else by their metadata; tables keyed by Oracle ROWID are counted by name
   (``rowid_keyed_tables``), so a window says when it used the key that moves.
3. Duplicates by uuid are dropped within the window (the copy from the first file is kept)
   and against every event id already in the changelog, by :func:`drop_seen_events`
   (Datastream delivers at least once, and a duplicate may come windows later).
4. Malformed lines, files and events become dead letters with the reason; a corrupt Avro
   block too (its bytes), the file's other blocks are read (:mod:`.avro_blocks`). A planned
   file that is gone fails the window naming it and the fix, before anything is read.
5. The outcome: every file finished; the progress partition at the newest read_timestamp
   minus the allowed lateness (or at the window end when an idle source is declared
   complete, counted as ``idle_declared``).

Spark is imported inside the functions: this module is part of the source package, which the
Airflow side imports too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from airflow_cdc.faults import crash_point
from airflow_cdc.model import PartitionOutcome, parse_ts
from airflow_cdc.sources.base import DeadLetter, WindowRead, changelog_tuple, dead_letter_tuple
from airflow_cdc.sources.datastream import PROGRESS_PARTITION
from airflow_cdc.sources.datastream.avro_blocks import read_avro_blocks
from airflow_cdc.sources.datastream.discovery import event_file_format
from airflow_cdc.sources.read_errors import planned_files_missing
from airflow_cdc.sources.datastream.events import (
    ORACLE_ROW_ID_COLUMN,
    MalformedEventError,
    event_to_change_row,
    json_line_event,
    normalize_value,
    parse_event_time,
)
from airflow_cdc.sources.datastream.keys import table_keys
from airflow_cdc.sources.datastream.progress import idle_declared, progress_watermark
from airflow_cdc.sources.datastream.types import AvroPayload, DeclaredTypeError, declared_column_types



def normal_path(path: str) -> str:
    """A file path as the plan names it: Spark reports local files as ``file:/...``."""
    for prefix in ("file://", "file:"):
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


@dataclass(frozen=True)
class TableSettings:
    """What the pipeline says per source table: key columns and declared column types."""

    keys: dict = field(default_factory=dict)
    types: dict = field(default_factory=dict)


def map_event(stream: str, window_id: str, partition_id: str, event, tables: TableSettings,
              schema_types=None) -> tuple:
    """("row", changelog tuple, read ms, ROWID-keyed table or None) or
    ("dead", dead-letter tuple, read ms or None, None)."""
    try:
        row = event_to_change_row(
            event, stream, window_id, partition_id,
            table_keys=tables.keys, declared_types=tables.types, schema_types=schema_types,
        )
        values = changelog_tuple(row)
    except (MalformedEventError, DeclaredTypeError) as error:
        return dead_letter(stream, window_id, partition_id, event, str(error))
    except Exception as error:  # noqa: BLE001 - whatever an event holds, it never fails the window
        return dead_letter(stream, window_id, partition_id, event,
                           f"event {_event_name(event)} cannot be mapped ({type(error).__name__}: {error})")
    by_row_id = row.source_metadata["keyed_by"] == ORACLE_ROW_ID_COLUMN
    return ("row", values, row.source_metadata["read_timestamp"],
            row.source_table if by_row_id else None)


def _event_name(event) -> str:
    uuid = event.get("uuid") if isinstance(event, dict) else None
    return repr(uuid)[:100] if uuid is not None else "without a uuid"


def _raw_text(raw) -> str:
    """The dead letter's copy of ``raw``: the line itself, or the event as JSON (its repr, cut,
    when even that fails: a structure nested deeper than Python's recursion limit)."""
    if isinstance(raw, str):
        return raw
    try:
        return json.dumps(normalize_value(raw), default=str)
    except Exception:  # noqa: BLE001 - the dead letter must be written whatever the event holds
        try:
            return repr(raw)[:100_000]
        except Exception:  # noqa: BLE001
            return f"<a {type(raw).__name__} that cannot be written as text>"


def dead_letter(stream: str, window_id: str, partition_id: str, raw, reason: str) -> tuple:
    is_event = isinstance(raw, dict)
    table, uuid = (raw.get("object"), raw.get("uuid")) if is_event else (None, None)
    dead = DeadLetter(
        partition_id=partition_id,
        raw=_raw_text(raw),
        reason=reason,
        source_table=table if isinstance(table, str) else None,
        event_id=uuid if isinstance(uuid, str) else None,
    )
    read_ms = None
    if is_event:
        try:
            read_ms = int(parse_event_time("read_timestamp", raw.get("read_timestamp")).timestamp() * 1000)
        except (MalformedEventError, ValueError, TypeError, OverflowError):
            read_ms = None
    return ("dead", dead_letter_tuple(stream, window_id, dead), read_ms, None)


def json_line_results(stream: str, window_id: str, tables: TableSettings, row) -> tuple:
    """The result of one line (``row``: ``value``, the line, and ``_file``, its file)."""
    return _json_line(stream, window_id, tables, normal_path(row["_file"]), row["value"])


def _json_line(stream: str, window_id: str, tables: TableSettings, path: str, line: str) -> tuple:
    try:
        event = json_line_event(line)
    except MalformedEventError as error:
        return dead_letter(stream, window_id, path, line, str(error))
    return map_event(stream, window_id, path, event, tables)


def avro_file_results(stream: str, window_id: str, tables: TableSettings, path: str,
                      content: bytes) -> list[tuple]:
    """Every event of one Avro file through fastavro, block by block: a corrupt block is one
    dead letter (its bytes, number and byte range) and the file's other blocks are read; a
    file whose header is unreadable is one dead letter."""
    path = normal_path(path)
    try:
        blocks = read_avro_blocks(content)
        payload = AvroPayload(blocks.writer_schema)
    except Exception as error:  # noqa: BLE001 - an unreadable header makes the file a dead letter
        return [dead_letter(stream, window_id, path, avro_bytes_text(path, content, 0, len(content)),
                            f"file is not readable Avro ({type(error).__name__}: {error})")]
    records = blocks.records
    results = [
        dead_letter(stream, window_id, path, avro_bytes_text(path, content, block.start, block.end),
                    f"Avro block {block.index} of file {path} (bytes {block.start}-{block.end}) is "
                    f"corrupt ({block.error}): its records are not read, the file's other blocks "
                    f"are; the block's bytes are kept here")
        for block in blocks.corrupt
    ]
    for index, record in enumerate(records):
        if isinstance(record, dict) and "payload" in record:
            try:
                record = {**record, "payload": payload.decode(record["payload"])}
            except Exception as error:  # noqa: BLE001 - one record's values fail it alone
                results.append(dead_letter(
                    stream, window_id, path, record,
                    f"record {index} ({_event_name(record)}) has a payload value its writer schema's "
                    f"type cannot hold (table {record.get('object')!r} {error}): correct the source's "
                    f"value"))
                continue
        results.append(map_event(stream, window_id, path, record, tables, payload.types))
    return results


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


def avro_bytes_text(path: str, content: bytes, start: int, end: int) -> str:
    """Bytes ``[start, end)`` of an Avro file as dead-letter text (base64, with where they lie)."""
    import base64

    return json.dumps({"file": path, "bytes": [start, end],
                       "base64": base64.b64encode(content[start:end]).decode("ascii")})


def json_file_results(stream: str, window_id: str, tables: TableSettings, path: str,
                      content: bytes) -> list[tuple]:
    """Every event of one JSON-lines file, as Spark's text reader splits it: lines end at
    ``\n``, ``\r\n`` or ``\r``; a leading byte-order mark is skipped; bytes that are no UTF-8
    become U+FFFD; blank lines are skipped (as Spark's JSON reader does)."""
    path = normal_path(path)
    if content.startswith(b"\xef\xbb\xbf"):
        content = content[3:]
    results = []
    for line in content.splitlines():
        text = line.decode("utf-8", "replace")
        if text.strip():
            results.append(_json_line(stream, window_id, tables, path, text))
    return results


def file_contents(spark, paths: list[str]):
    """A frame of (path, content) of the planned files, read by Spark's file system (a local
    folder, ``gs://`` through the cluster's connector ...): one row per file."""
    # Spark lists more than 32 paths with a distributed job (meant for folders of
    # partitions); for a window's named files the driver's own listing is cheaper:
    # 4.2-4.7 s against 5.3-6.3 s for 206 files in a fresh session here.
    spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", "1024")
    return spark.read.format("binaryFile").load(paths).select("path", "content")


def read_file_batches(stream: str, window_id: str, tables: TableSettings, formats: dict, batches):
    """Runs on an executor (``mapInArrow`` over :func:`file_contents`): every event of the
    files in ``batches``, as the read frame's Arrow batches (:mod:`airflow_cdc.sources.read_frame`):
    change rows, dead letters, and last one summary of what the task read: (records per
    file, events, dead letters, newest read ms, ROWID-keyed tables)."""
    from airflow_cdc.sources import read_frame

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
    """Steps 1, 2, 4 and 5 above for ``plan`` (a WindowPlanFile); step 3's duplicates within
    the window and against the changelog are dropped by :func:`drop_seen_events`.

    The files' events reach Spark as Arrow batches of the read frame, kept as a local
    checkpoint. A performance strategy. Saves: they were an RDD of pickled Python tuples,
    cached, tallied, deduplicated by a Python shuffle and converted by ``createDataFrame``
    row by row (``bench/extract.py --source datastream``; figures in docs/performance.md).
    """
    import functools

    from airflow_cdc.sources import read_frame

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
    progress, idle = _progress_outcome(plan, events + dead_letters, newest_ms)
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


def _progress_outcome(plan, read: int, newest_ms: int | None) -> tuple[PartitionOutcome | None, bool]:
    """The progress partition's outcome (newest read time minus the lateness, or the window
    end when an idle source is declared complete) and whether it was declared idle."""
    window, options = plan.window, plan.options
    progress = next((p for p in plan.positions if p.partition_id == PROGRESS_PARTITION), None)
    if progress is None:
        return None, False
    lateness = timedelta(seconds=float(options.get("allowed_lateness_seconds", 300)))
    idle_timeout = options.get("idle_timeout_seconds")
    newest = None if newest_ms is None else datetime.fromtimestamp(newest_ms / 1000, tz=window.start.tzinfo)
    watermark = progress_watermark(progress.start, newest, lateness)
    planned_at = parse_ts(options["planned_at"]) if options.get("planned_at") else window.start
    idle = idle_declared(
        read, watermark, window.end, planned_at,
        None if idle_timeout is None else timedelta(seconds=float(idle_timeout)),
    )
    if idle:
        watermark = max(watermark, window.end)
    return PartitionOutcome(PROGRESS_PARTITION, finished=False, watermark=watermark), idle


def drop_seen_events(spark, table: str, stream: str, frame):
    """``frame`` without the events this stream's changelog already holds (by event id):
    :func:`~airflow_cdc.sources.base.drop_seen_event_ids`."""
    from airflow_cdc.sources.base import drop_seen_event_ids

    return drop_seen_event_ids(spark, table, stream, frame)
