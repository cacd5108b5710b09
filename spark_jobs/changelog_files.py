"""The extract's direct write, on the driver: which windows' read tasks write the changelog's
files themselves, and the window's one tagged commit of those files.

A performance strategy (the task side is :mod:`airflow_cdc.sources.changelog_files`).
Saves: ``bench/extract.py --full`` (1,001,088 changes, 16 partitions), one session: the extract
job took 99.7 s without it, 89.9 s and 93.1 s with it (ratio to the raw client 0.56 -> 0.64, 0.62).

When (:func:`file_sink`): the source reads partitions and hands every row on as it is (no
``native_rows``, ``drop_repeats`` or ``check_window`` of its own: Spanner's and Bigtable's
change streams), the table is partitioned by ``days(commit_ts)`` alone and unsorted, writes
Parquet, its data location is one pyarrow opens, and ``CDC_DIRECT_CHANGELOG`` is not
``false``. Otherwise the rows reach Spark and Spark writes them, as before. A read task with
fewer than ``FileSink.min_task_rows`` rows hands them to Spark too: when no task wrote files
(a small window), Spark writes the window as before (``bench/window.py``, one session: 954
changes took 7.40 s with those rows written by the read tasks' own write job, 6.58 s by
Spark); when some did, the held rows are written by one more pass in about a file per core.

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
from airflow_cdc.sources.changelog_files import FileSink, WrittenFile, declare

# Iceberg's write.parquet.compression-codec -> pyarrow's compression (others: Spark writes).
_CODECS = {"zstd": "zstd", "snappy": "snappy", "gzip": "gzip", "uncompressed": "none"}
_HOOKS = ("native_rows", "drop_repeats", "check_window")


def enabled() -> bool:
    """False when ``CDC_DIRECT_CHANGELOG`` says so (``false``/``0``/``no``): Spark writes."""
    return os.environ.get("CDC_DIRECT_CHANGELOG", "true").strip().lower() not in ("false", "0", "no")


def file_sink(spark, table: str, source) -> FileSink | None:
    """Where the window's read tasks write the changelog's files, or None when Spark must
    write them (see the module's doc for when). Creates the changelog table if missing."""
    from airflow_cdc.sources.base import ChangeSource
    from airflow_cdc.spark_jobs.changelog import create_changelog_table
    from airflow_cdc.spark_jobs.commits import _iceberg_table

    if not enabled() or source.read_window is not None:
        return None
    if any(getattr(type(source), hook) is not getattr(ChangeSource, hook) for hook in _HOOKS):
        return None
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
    try:
        from pyarrow import fs

        fs.FileSystem.from_uri(directory)
    except Exception:  # noqa: BLE001 - a location pyarrow cannot open: Spark writes
        return None
    from airflow_cdc.spark_jobs.extract import ROWS_PER_TASK

    return FileSink(directory=directory, field_ids=_field_ids(schema), partition_field=str(fields[0].name()),
                    compression=codec, prefix=f"{uuid.uuid4().hex[:8]}-", min_task_rows=ROWS_PER_TASK // 4)


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
