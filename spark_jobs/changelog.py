"""A stream's changelog table: create it, find a window's commit, append a window in one commit.

The changelog is append-only and partitioned by day of commit timestamp; its columns come
from :data:`airflow_cdc.model.CHANGELOG_COLUMNS`, so the Airflow side and Spark cannot drift.

Exactly once (I1): the rows of window W are appended in ONE Iceberg commit whose snapshot
summary carries ``WINDOW_SNAPSHOT_PROPERTY = W``. Before writing, the table's snapshots are
searched for that tag; if one has it, nothing is written. An empty window commits an empty
tagged snapshot too, so "extracted, zero changes" (tag present, no rows) stays distinguishable
from "never extracted" (no tag) for the gate and for re-runs. Iceberg makes such an empty
append snapshot on the 1.10 Spark 3.5 runtime (tested).

The same commit records the window's column declarations (:data:`DECLARATIONS_PROPERTY`):
per source table and distinct ``column_types_json``, the rows and the first commit timestamp.
Apply plans its targets from them without an aggregate over the window's rows of its own; it
checks them against the rows as its fold reads them (see ``apply/declarations.py``).

Once a window's snapshot has been expired (``expire_snapshots``), the tag is gone; a rerun
then looks for the window's rows instead (``window_id`` column) and still writes nothing. Only
an expired *empty* window would be committed again, as one more empty snapshot: harmless.

Never imports Airflow (this runs on executors without it).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_cdc.faults import crash_point
from airflow_cdc.model import (
    CHANGELOG_COLUMNS,
    CHANGELOG_PARTITIONING,
    WINDOW_SNAPSHOT_PROPERTY,
    CdcError,
    change_row_from_json_line,
    change_row_to_record,
    format_ts,
    parse_ts,
    validate_identifier,
)
from airflow_cdc.spark.job import ChangelogWriteResult, split_table_name
from airflow_cdc.spark_jobs.commits import (
    UNCHECKED,
    append_tagged,
    concurrent_window_commit,
    own_window_commit,
    window_commit,
)
from airflow_cdc.spark_jobs.spark_line import sql_with_args

_SPARK_TYPES = {
    "string": T.StringType,
    "timestamp": T.TimestampType,
    "binary": T.BinaryType,
    "long": T.LongType,
    "int": T.IntegerType,
    "boolean": T.BooleanType,
    "map<string,string>": lambda: T.MapType(T.StringType(), T.StringType(), valueContainsNull=True),
}
_WINDOW_ID_INDEX = [name for name, _ in CHANGELOG_COLUMNS].index("window_id")


class WindowMismatchError(CdcError, ValueError):
    """The input of window W holds rows of another window."""


class CatalogNotConfiguredError(CdcError):
    """The Spark session has no catalog of the name the job was given."""


def changelog_schema() -> T.StructType:
    """The changelog's Spark schema, built from CHANGELOG_COLUMNS (never inferred)."""
    return T.StructType(
        [T.StructField(name, _SPARK_TYPES[kind](), nullable=True) for name, kind in CHANGELOG_COLUMNS]
    )


def qualified_table(catalog: str, table: str) -> str:
    """``<catalog>.<namespace>.<name>``, every part validated before it is used in SQL."""
    validate_identifier("Iceberg catalog name", catalog)
    namespace, name = split_table_name(table)
    return f"{catalog}.{namespace}.{name}"


def require_catalog(spark: SparkSession, catalog: str) -> None:
    """Fail clearly when the session does not know ``catalog`` (conf missing from the submit)."""
    validate_identifier("Iceberg catalog name", catalog)
    if spark.conf.get(f"spark.sql.catalog.{catalog}", None) is None:
        raise CatalogNotConfiguredError(
            f"Spark catalog {catalog!r} is not configured in this session: submit the job with "
            f"the IcebergCatalog's conf (IcebergCatalog(name={catalog!r}, ...).spark_conf(), "
            f"which the job spec helpers in airflow_cdc.spark.job merge in)"
        )


class ChangelogFormatError(CdcError):
    """A changelog table's columns are not the ones this version reads and writes."""


def create_changelog_table(spark: SparkSession, table: str) -> None:
    """Create the changelog table ``table`` (qualified, validated) unless it exists; check it."""
    columns = ", ".join(f"{name} {kind}" for name, kind in CHANGELOG_COLUMNS)
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table} ({columns}) USING iceberg "
        f"PARTITIONED BY ({CHANGELOG_PARTITIONING}) "
        f"TBLPROPERTIES ('format-version' = '2')"
    )
    check_changelog_columns(spark, table)


def check_changelog_columns(spark: SparkSession, table: str) -> None:
    """Fail before any read or write when ``table`` lacks a changelog column of this version.

    Extra columns are allowed (a user may add some); a missing one or another type is not,
    e.g. a changelog written before keys and values became maps (``keys_json`` text).
    """
    found = {field.name: field.dataType.simpleString() for field in spark.table(table).schema.fields}
    wrong = [
        f"{name} {kind} (found: {found[name] if name in found else 'no such column'})"
        for name, kind in CHANGELOG_COLUMNS
        if found.get(name) != kind
    ]
    if wrong:
        legacy = sorted(set(found) & {"keys_json", "new_values_json", "old_values_json"})
        hint = (
            f" It has {legacy}: it was written by an earlier airflow-cdc, which kept keys and "
            f"values as JSON text."
            if legacy
            else ""
        )
        raise ChangelogFormatError(
            f"changelog table {table} does not have the changelog columns this version "
            f"needs: {'; '.join(wrong)}.{hint} Fix: point the pipeline at a new changelog table "
            f"(or rename this one) and replay the windows from the source; nothing was written"
        )


@dataclass(frozen=True)
class WindowCommit:
    """The earlier commit of a window: its snapshot, if that snapshot still exists."""

    snapshot_id: int | None


def find_window_commit(spark: SparkSession, table: str, window_id: str) -> WindowCommit | None:
    """The commit that already holds ``window_id`` in ``table``, or None if there is none."""
    if not spark.catalog.tableExists(table):
        return None
    snapshot_id = tagged_snapshot_id(spark, table, window_id)
    if snapshot_id is not None:
        return WindowCommit(snapshot_id)
    # The tag is gone once its snapshot expired; the rows say the window was written.
    rows = sql_with_args(
        spark, f"SELECT 1 FROM {table} WHERE window_id = :window_id LIMIT 1", {"window_id": window_id}
    ).collect()
    return WindowCommit(None) if rows else None


def tagged_snapshot_id(spark: SparkSession, table: str, window_id: str) -> int | None:
    """The id of the snapshot of ``table`` tagged with ``window_id``, if any (the oldest)."""
    commit = window_commit(spark, table, window_id)
    return None if commit is None else commit.snapshot_id


def change_row_tuple(line: str) -> tuple:
    """One changelog row (in CHANGELOG_COLUMNS order) from one JSON line (the model's codec).

    Runs on executors: module level, so it is pickled by reference and imported there from
    the py-files zip.
    """
    try:
        record = change_row_to_record(change_row_from_json_line(line))
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"changelog input line is not a ChangeRow JSON line ({type(error).__name__}: "
            f"{error}): {line[:300]!r}"
        ) from error
    return tuple(record[name] for name, _ in CHANGELOG_COLUMNS)


def read_change_rows(spark: SparkSession, input_path: str):
    """The parsed rows of a JSON-lines file (any Hadoop URI or local path), as an RDD of tuples."""
    lines = spark.sparkContext.textFile(input_path)
    return lines.filter(lambda line: line.strip() != "").map(change_row_tuple)


def window_row_counts(rows) -> dict[str, int]:
    """How many rows each window id has in ``rows`` (one pass; an empty input gives {})."""
    totals: Counter[str] = Counter()
    for partial in rows.mapPartitions(_count_window_ids).collect():
        totals.update(partial)
    return dict(totals)


def _count_window_ids(partition) -> list[dict[str, int]]:
    return [dict(Counter(row[_WINDOW_ID_INDEX] for row in partition))]


# Snapshot summary property of a window's changelog commit: its Declarations as JSON.
DECLARATIONS_PROPERTY = "airflow-cdc.declarations"
# A longer list is left out of the summary (apply then aggregates the rows instead): every
# metadata file of the table repeats the summaries of all snapshots it retains.
DECLARATIONS_LIMIT = 16 << 10


@dataclass(frozen=True)
class Declaration:
    """One distinct (source table, column_types_json) of a window, with its rows and first commit."""

    source_table: str | None
    column_types_json: str | None
    rows: int
    first_commit_ts: datetime | None  # aware, UTC


def window_declarations(frame: DataFrame) -> list[Declaration]:
    """The distinct (source table, declaration) of ``frame`` (changelog rows), each with a
    count and first commit timestamp: one aggregate of primitive columns (Iceberg reads them
    vectorized), no JSON parsing."""
    found = (
        frame.groupBy("source_table", "column_types_json")
        .agg(F.count(F.lit(1)).alias("rows"), F.min("commit_ts").alias("first_commit_ts"))
        .collect()
    )
    return [
        Declaration(
            source_table=row.source_table,
            column_types_json=row.column_types_json,
            rows=int(row.rows),
            # Spark hands timestamps over as naive local time: astimezone reads them as such.
            first_commit_ts=None if row.first_commit_ts is None else row.first_commit_ts.astimezone(timezone.utc),
        )
        for row in found
    ]


def declarations_properties(declarations: Iterable[Declaration]) -> dict[str, str]:
    """The snapshot property recording ``declarations`` ({} when it would pass the limit)."""
    entries = sorted(
        (
            [d.source_table, d.column_types_json, d.rows, None if d.first_commit_ts is None else format_ts(d.first_commit_ts)]
            for d in declarations
        ),
        key=lambda entry: (entry[0] is None, str(entry[0]), entry[1] is None, str(entry[1])),
    )
    text = json.dumps(entries, separators=(",", ":"))
    return {DECLARATIONS_PROPERTY: text} if len(text) <= DECLARATIONS_LIMIT else {}


def recorded_declarations(summary: Mapping[str, str]) -> list[Declaration] | None:
    """The declarations a changelog commit's summary records, when they account for every row
    the commit added; None otherwise (no record, one cut for size, or one that does not parse)."""
    text = summary.get(DECLARATIONS_PROPERTY)
    if text is None:
        return None
    try:
        declarations = [
            Declaration(
                source_table=table,
                column_types_json=types,
                rows=int(rows),
                first_commit_ts=None if first is None else parse_ts(first),
            )
            for table, types, rows, first in json.loads(text)
        ]
        added = int(summary.get("added-records", "0"))
    except (TypeError, ValueError):
        return None
    return declarations if sum(d.rows for d in declarations) == added else None


# A performance strategy: a window's rows are written by the tasks that hold them, each
# writing a file per day it holds (fanout: a window spans a day or two, so no sort by day
# either), not shuffled to one task per day first, which is what the table's default
# distribution (by its partitioning, days(commit_ts)) does: a window of one day was written
# by one task, on one core. Saves: the shuffle, and the write on one core
# (bench/extract.py, docs/performance.md).
WINDOW_WRITE_OPTIONS = {"distribution-mode": "none", "fanout-enabled": "true"}


def append_window(
    spark: SparkSession,
    table: str,
    window_id: str,
    frame: DataFrame,
    extra_properties: Mapping[str, str] | None = None,
    declarations: Iterable[Declaration] | None = None,
    read_at: int | None | object = UNCHECKED,
) -> int:
    """Append ``frame`` to ``table`` in ONE commit tagged with ``window_id``; return its snapshot id.
    ``frame``: a DataFrame of the changelog's columns, or the changelog files a window's read
    tasks wrote (``airflow_cdc.spark_jobs.changelog_files.ChangelogFiles``).

    ``extra_properties`` go into the same snapshot summary (e.g. the extract job's outcome
    file), so they are committed atomically with the rows; they cannot replace the window tag.
    ``declarations`` (:func:`window_declarations` of ``frame``) are recorded there too.
    ``read_at``: the snapshot the caller found the window's commit missing at; a commit made
    since makes this one fail with a commit conflict (``commits.append_tagged``).
    """
    extra = {key: str(value) for key, value in dict(extra_properties or {}).items()}
    if declarations is not None:
        extra.update(declarations_properties(declarations))
    properties = {**extra, WINDOW_SNAPSHOT_PROPERTY: window_id}
    if isinstance(frame, DataFrame):
        append_tagged(frame, table, properties, read_at, write_options=WINDOW_WRITE_OPTIONS)
    else:  # files the read tasks wrote (airflow_cdc.spark_jobs.changelog_files.ChangelogFiles)
        frame.append(spark, table, properties, read_at)
    committed = own_window_commit(spark, table, window_id)
    if committed is None:  # the commit just made must carry the tag
        raise CdcError(f"append to {table} made no snapshot tagged {window_id!r}")
    return committed.snapshot_id


# Snapshot summary property holding the window's outcome (WindowOutcomeFile JSON), committed
# with the window's rows so a re-run on any machine restores it without reading the source.
OUTCOME_PROPERTY = "airflow-cdc.outcome"


def recorded_window_result(spark: SparkSession, table: str, window_id: str, outcome_path: str) -> dict | None:
    """An extract re-run's result: the earlier commit's outcome, written to ``outcome_path`` again.

    None when the window has no commit with a snapshot yet (the job must read the source).
    """
    from airflow_cdc.pipeline.files import WindowOutcomeFile

    earlier = find_window_commit(spark, table, window_id)
    if earlier is None or earlier.snapshot_id is None:
        return None
    recorded = snapshot_summary(spark, table, earlier.snapshot_id).get(OUTCOME_PROPERTY)
    if recorded is None:
        raise RuntimeError(
            f"changelog commit {earlier.snapshot_id} of window {window_id} in {table} "
            f"carries no {OUTCOME_PROPERTY!r}: it was not written by the extract job"
        )
    outcome = WindowOutcomeFile.from_json(recorded)
    write_text(spark, outcome_path, outcome.to_json())
    return {"skipped": True, "snapshot_id": earlier.snapshot_id, "counts": outcome.counts}


def commit_window_with_outcome(
    spark: SparkSession,
    table: str,
    frame: DataFrame,
    outcome,
    outcome_path: str,
    declarations: Iterable[Declaration] | None = None,
    read_at: int | None | object = UNCHECKED,
) -> dict:
    """Append the window's rows and its outcome (and ``declarations``) in one commit, then
    write the outcome file.

    With ``read_at`` (the snapshot at which the job found no commit of the window), two jobs
    of one window racing (an orphaned driver and the task's retry) make one commit: the later
    one's conflicts, and it takes the earlier one's commit and outcome as its own, as a re-run
    would (``recorded_window_result``). A conflict with another window's commit is raised:
    the task's retry reads the table again.
    """
    create_changelog_table(spark, table)
    try:
        snapshot_id = append_window(
            spark,
            table,
            outcome.window_id,
            frame,
            extra_properties={OUTCOME_PROPERTY: outcome.to_json()},
            declarations=declarations,
            read_at=read_at,
        )
    except Exception as error:
        if concurrent_window_commit(spark, table, outcome.window_id, error) is None:
            raise
        return recorded_window_result(spark, table, outcome.window_id, outcome_path)
    crash_point("extract.after_changelog_commit")
    write_text(spark, outcome_path, outcome.to_json())
    return {"skipped": False, "snapshot_id": snapshot_id, "counts": outcome.counts}


def snapshot_summary(spark: SparkSession, table: str, snapshot_id: int) -> dict[str, str]:
    """The summary properties of one snapshot of ``table`` ({} if it no longer exists)."""
    rows = sql_with_args(
        spark, f"SELECT summary FROM {table}.snapshots WHERE snapshot_id = :snapshot_id",
        {"snapshot_id": int(snapshot_id)},
    ).collect()
    return dict(rows[0].summary or {}) if rows else {}


def write_window(
    spark: SparkSession, table: str, window_id: str, input_path: str
) -> ChangelogWriteResult:
    """Append the change rows in ``input_path`` as window ``window_id`` of ``table``, once.

    1. If a commit of the window exists, write nothing (I1) and report it as skipped.
    2. Parse every row (model codec) and count rows per window id; refuse rows of another
       window before anything is written.
    3. Create the table if missing.
    4. Append all rows in one commit tagged with the window (empty windows too), with the
       window's declarations.
    """
    earlier = find_window_commit(spark, table, window_id)
    if earlier is not None:
        return ChangelogWriteResult(table, window_id, earlier.snapshot_id, 0, skipped=True)

    rows = read_change_rows(spark, input_path).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counts = window_row_counts(rows)
        foreign = {w: n for w, n in counts.items() if w != window_id}
        if foreign:
            listed = ", ".join(f"{w!r} ({n} rows)" for w, n in sorted(foreign.items()))
            raise WindowMismatchError(
                f"input {input_path} for window {window_id!r} of {table} also holds rows of "
                f"other windows: {listed}. Nothing was written: each window's rows must be "
                f"written by that window's own run"
            )
        create_changelog_table(spark, table)
        frame = spark.createDataFrame(rows, changelog_schema(), verifySchema=True)
        snapshot_id = append_window(spark, table, window_id, frame, declarations=window_declarations(frame))
    finally:
        rows.unpersist()
    return ChangelogWriteResult(table, window_id, snapshot_id, counts.get(window_id, 0), skipped=False)


def _hadoop_file(spark: SparkSession, path: str):
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path, hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Write ``text`` to ``path`` whole: a local file atomically, a URI through fsspec where
    its protocol's implementation is installed (gcsfs for gs://), else through Hadoop's file
    systems (the GCS connector on Dataproc, hdfs://)."""
    from airflow_cdc import work_root

    if work_root.fsspec_can_open(str(path)):
        work_root.write_text(str(path), text)
        return
    hadoop_path, fs = _hadoop_file(spark, str(path))
    stream = fs.create(hadoop_path, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


def read_text(spark: SparkSession, path: str) -> str:
    """The text of ``path``: a local file, or a URI read as :func:`write_text` writes it."""
    from airflow_cdc import work_root

    if work_root.fsspec_can_open(str(path)):
        return work_root.read_text(str(path))
    hadoop_path, fs = _hadoop_file(spark, str(path))
    stream = fs.open(hadoop_path)
    try:
        jvm = spark.sparkContext._jvm
        return jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
