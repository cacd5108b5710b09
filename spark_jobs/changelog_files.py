"""How a window's change rows reach the changelog: one :class:`ChangelogWriter` interface, a
Spark version (:class:`SparkWriter`) and a direct-file version (:class:`DirectFileWriter`),
chosen in one place (:func:`changelog_writer`) by one rule.

The rule: the read tasks write the changelog's files themselves when every row they make
reaches the changelog unchanged (the source's Spark side declares ``rows_pass_through``: no
rows of its own join, none are dropped, the window is not checked as a whole: Spanner's and
Bigtable's change streams), the table is partitioned by ``days(commit_ts)`` alone and
unsorted, writes Parquet, its data location is one pyarrow opens at the endpoint Spark
uses (not a GCS emulator, :func:`endpoint_overridden`), and ``CDC_DIRECT_CHANGELOG`` is not
``false``. Otherwise Spark writes the rows. A read task with
fewer than ``FileSink.min_task_rows`` rows hands them to Spark too: when no task wrote files
(a small window), Spark writes the window; when some did, the held rows are written by one
more pass in about a file per core.

The direct write is a performance strategy (the task side is
:mod:`airflow_cdc.spark_jobs.sources.task_files`). Saves: the JVM's handling of every row
and the commit's own write job (``bench/extract.py --full``, docs/performance.md); an
equivalence test holds it to the rows Spark writes
(``tests/sources/test_spanner_extract_job.py``).

Exactly once (I1) is the same commit as a Spark write makes: the files are listed in ONE
commit tagged with the window and carrying its outcome and declarations, checked against
the snapshot the job found the window missing at (an overwrite by the always-false filter
at serializable isolation, as ``commits.append_tagged`` asks of Spark). A commit that loses
deletes its files; files of a job that died before committing are orphans no snapshot lists.
Metrics come from each file's footer (Iceberg's own ``ParquetUtil``), so readers prune files
by them as they do Spark's.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timezone

from airflow_cdc.model import CHANGELOG_COLUMNS
from airflow_cdc.spark_jobs.sources.task_files import FileSink, WrittenFile, declare

# Iceberg's write.parquet.compression-codec -> pyarrow's compression (others: Spark writes).
_CODECS = {"zstd": "zstd", "snappy": "snappy", "gzip": "gzip", "uncompressed": "none"}


def enabled() -> bool:
    """False when ``CDC_DIRECT_CHANGELOG`` says so (``false``/``0``/``no``): Spark writes."""
    return os.environ.get("CDC_DIRECT_CHANGELOG", "true").strip().lower() not in ("false", "0", "no")


@dataclass
class WindowRows:
    """The window's rows as the changelog commit takes them: a DataFrame of the changelog's
    columns or the files the read tasks wrote (:class:`ChangelogFiles`), their declarations,
    the counts the Spark side's window check returned, and whether ``rows`` was persisted here
    (to be freed once committed)."""

    rows: object
    declarations: list
    checked: dict
    persisted: bool = False

    def discard(self) -> None:
        """Delete files no commit will list (the window failed before its commit)."""
        if isinstance(self.rows, ChangelogFiles):
            self.rows.discard()

    def release(self) -> None:
        """Free what was persisted for the commit."""
        if self.persisted:
            self.rows.unpersist()


class ChangelogWriter:
    """How a window's change rows become the changelog's rows.

    :attr:`sink` is handed to the partition reads (``spark_jobs/extract.read_partitions``);
    :meth:`window_rows` takes the window's read and gives what the commit appends.
    """

    #: Where read tasks write the changelog's files, or None (they hand their rows to Spark).
    sink: FileSink | None = None

    def window_rows(self, spark, plan, side, read) -> WindowRows:
        raise NotImplementedError


class SparkWriter(ChangelogWriter):
    """The plain path: the rows reach Spark, the Spark side adds, drops and checks, Spark writes."""

    def window_rows(self, spark, plan, side, read) -> WindowRows:
        from pyspark import StorageLevel

        from airflow_cdc.spark_jobs.changelog import window_declarations

        frame = read.rows
        native = side.native_rows(spark, plan)
        if native is not None:
            frame = frame.unionByName(native)
        frame = side.drop_repeats(spark, plan, frame)
        # The read's own frame is kept already (a local checkpoint): a second cache of the
        # same rows costs and saves nothing.
        persisted = frame is not read.rows
        if persisted:
            frame.persist(StorageLevel.MEMORY_AND_DISK)
        checked = side.check_window(spark, plan, frame)  # raises: the window stays uncommitted
        return WindowRows(frame, window_declarations(frame), checked, persisted)  # one counting pass


@dataclass
class DirectFileWriter(ChangelogWriter):
    """The read tasks write the changelog's files (``sink``); a window whose tasks all held
    their rows back (a small one) is written by Spark, as :class:`SparkWriter` writes."""

    sink: FileSink | None = None

    def window_rows(self, spark, plan, side, read) -> WindowRows:
        if isinstance(read.rows, ChangelogFiles):
            return WindowRows(read.rows, read.rows.declarations(), {})
        return SparkWriter().window_rows(spark, plan, side, read)


def changelog_writer(spark, table: str, source, side) -> ChangelogWriter:
    """The writer of ``table`` for ``source`` (a ChangeSource) and its Spark ``side``, by the
    rule of the module doc: the one place that chooses. Creates the changelog table if
    missing (the direct write needs its layout)."""
    if not enabled() or source.reads_whole_windows or not side.rows_pass_through:
        return SparkWriter()
    sink = file_sink(spark, table)
    return SparkWriter() if sink is None else DirectFileWriter(sink)


def file_sink(spark, table: str) -> FileSink | None:
    """Where read tasks write ``table``'s files, or None when its layout is not one they
    write (see the module doc). Creates the changelog table if missing."""
    from airflow_cdc.spark_jobs.changelog import create_changelog_table
    from airflow_cdc.spark_jobs.commits import _iceberg_table

    create_changelog_table(spark, table)
    iceberg = _iceberg_table(spark, table)
    if iceberg is None:
        return None
    properties = {str(k): str(v) for k, v in dict(iceberg.properties()).items()}
    codec = _CODECS.get(properties.get("write.parquet.compression-codec", "zstd").lower())
    spec, schema = iceberg.spec(), iceberg.schema()
    commit_ts = schema.findField("commit_ts")
    fields = list(spec.fields())
    if (codec is None or properties.get("write.format.default", "parquet").lower() != "parquet"
            or not iceberg.sortOrder().isUnsorted() or len(fields) != 1 or commit_ts is None
            or fields[0].sourceId() != commit_ts.fieldId() or str(fields[0].transform()) != "day"):
        return None
    directory = properties.get("write.data.path") or f"{str(iceberg.location()).rstrip('/')}/data"
    if endpoint_overridden(directory, spark.conf.get("spark.hadoop.fs.gs.storage.root.url", "")):
        return None
    try:
        from pyarrow import fs

        fs.FileSystem.from_uri(directory)
    except Exception:  # noqa: BLE001 - a location pyarrow cannot open: Spark writes
        return None
    from airflow_cdc.spark_jobs.extract import ROWS_PER_TASK

    return FileSink(directory=directory, field_ids=_field_ids(schema), partition_field=str(fields[0].name()),
                    compression=codec, prefix=f"{uuid.uuid4().hex[:8]}-", min_task_rows=ROWS_PER_TASK // 4)


def endpoint_overridden(directory: str, gcs_storage_root: str) -> bool:
    """True when ``directory`` is on GCS and the session sends GCS calls to another endpoint
    (``fs.gs.storage.root.url``: an emulator, :class:`~airflow_cdc.spark.iceberg.IcebergCatalog`'s
    ``storage_emulator_host``). pyarrow's own GCS client reads none of Spark's settings and
    would call Google's endpoint instead, so Spark, which the settings reach, writes there."""
    return directory.startswith("gs://") and bool(gcs_storage_root)


def _field_ids(schema) -> dict:
    ids = {}
    for name, _ in CHANGELOG_COLUMNS:
        column = schema.findField(name)
        kind = column.type()
        ids[name] = (int(column.fieldId()), int(kind.keyId()), int(kind.valueId())) if kind.isMapType() \
            else (int(column.fieldId()),)
    return ids


@dataclass(frozen=True)
class ChangelogFiles:
    """A window's rows as the changelog files its read tasks wrote (``WindowRead.rows``)."""

    files: tuple  # WrittenFile
    declared: tuple  # (source_table, column_types_json, rows, first commit_ts)

    def declarations(self) -> list:
        """The window's :class:`~airflow_cdc.spark_jobs.changelog.Declaration` values, from the tasks'."""
        from airflow_cdc.spark_jobs.changelog import Declaration

        merged: dict = {}
        for table, types, rows, first in self.declared:
            declare(merged, table, types, rows, first)
        return [Declaration(table, types, rows, None if first is None else first.astimezone(timezone.utc))
                for (table, types), (rows, first) in merged.items()]

    def append(self, spark, table: str, properties: Mapping[str, str], read_at) -> None:
        """Commit the files to ``table`` in one commit carrying ``properties``, made only if
        no data was added since snapshot ``read_at`` (None: since the table's start);
        a commit that fails deletes the files (a conflict is raised for the caller)."""
        from airflow_cdc.spark_jobs.commits import UNCHECKED, _iceberg_table, is_commit_conflict

        iceberg = _iceberg_table(spark, table)
        jvm = spark.sparkContext._jvm
        api = jvm.org.apache.iceberg
        try:
            commit = iceberg.newOverwrite()
            if read_at is not UNCHECKED:
                commit = (commit.conflictDetectionFilter(api.expressions.Expressions.alwaysTrue())
                          .validateNoConflictingData().validateNoConflictingDeletes())
                if read_at is not None:
                    commit = commit.validateFromSnapshot(int(read_at))
            metrics = api.MetricsConfig.forTable(iceberg)
            for written in self.files:
                commit = commit.addFile(_data_file(api, iceberg, metrics, written))
            for key, value in properties.items():
                commit = commit.set(str(key), str(value))
        except BaseException:
            self.discard()
            raise
        try:
            commit.commit()
        except Exception as error:
            # Refused (a conflict): never committed. Any other error may have committed
            # (Iceberg's commit state unknown): the files stay, a table may list them.
            if is_commit_conflict(error):
                self.discard()
            raise

    def discard(self) -> None:
        """Delete the files (their window was not committed with them): best effort, an
        orphan is harmless (no snapshot lists it)."""
        discard(self.files)


def discard(files) -> None:
    """Delete ``files`` (WrittenFile) that no commit lists; best effort."""
    from pyarrow import fs

    for written in files:
        try:
            filesystem, path = fs.FileSystem.from_uri(written.path)
            filesystem.delete_file(path)
        except Exception:  # noqa: BLE001 - never committed, so never read
            pass


def _data_file(api, iceberg, metrics_config, written: WrittenFile):
    """Iceberg's DataFile for ``written``: its partition, size and its footer's metrics."""
    spec = iceberg.spec()
    metrics = api.parquet.ParquetUtil.fileMetrics(iceberg.io().newInputFile(written.path), metrics_config)
    day = "null" if written.day is None else written.day
    return (api.DataFiles.builder(spec).withPath(written.path).withFormat(api.FileFormat.PARQUET)
            .withFileSizeInBytes(written.size).withMetrics(metrics)
            .withPartitionPath(f"{spec.fields()[0].name()}={day}").build())
