"""The changelog's Parquet files, written by the read tasks that decode the rows.

A performance strategy (the extract's direct write). Without it, a read task hands its rows
to Spark as Arrow batches of the read frame; the JVM takes them in, keeps them (a local
checkpoint), and a second job writes them to the changelog. With it, the read task writes
the rows it decodes straight into Parquet files of the changelog table (pyarrow, the table's
field ids, one file per day of ``commit_ts`` per task, the table being partitioned by
``days(commit_ts)``), and hands Spark only the files' names and sizes and the window's
column declarations (:data:`~airflow_cdc.spark_jobs.sources.read_frame.FILES` rows). The
driver commits the files in the window's one tagged commit (``spark_jobs/changelog_files.py``).
Saves: the JVM's handling of every row and the commit's write job (``bench/extract.py --full``,
docs/performance.md).

Files a read writes and no commit takes (a failed or orphaned job, a lost race) are never
part of the table: Iceberg reads only what a commit lists; ``remove_orphan_files`` removes
them, as it removes the files of any aborted Spark write.

Runs on executors: no Spark, no Airflow; pyarrow is imported inside the functions.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from airflow_cdc.model import CHANGELOG_COLUMNS

# Arrow types of the changelog's column kinds (the read frame's, without field ids).
_KINDS = ("string", "long", "binary", "timestamp", "map<string,string>")


@dataclass(frozen=True)
class FileSink:
    """Where and how a window's read tasks write the changelog's files (picklable, small).

    ``directory``: the table's data location (a URI pyarrow opens: ``file:``, ``gs://``,
    ``s3://``, ``hdfs://``); ``field_ids``: per changelog column its Iceberg field id, and for
    a map its key's and value's; ``partition_field``: the name of the ``days(commit_ts)``
    partition field (the files' directory); ``compression``: the table's Parquet codec;
    ``prefix``: the window's file-name prefix (which window wrote a file, when listing).
    """

    directory: str
    field_ids: dict = field(default_factory=dict)
    partition_field: str = "commit_ts_day"
    compression: str = "zstd"
    prefix: str = ""
    # A read task writing fewer rows hands them to Spark, which writes them with the window's
    # other small reads in about a file per core (``airflow_cdc.spark_jobs.changelog_files.write_rows``):
    # a file per task and day would leave a small window's changelog in many small files.
    min_task_rows: int = 0

    def arrow_schema(self):
        """The changelog's Arrow schema with Iceberg's field ids (Parquet's ``field_id``)."""
        import pyarrow as pa

        def ids(number):
            return {b"PARQUET:field_id": str(number).encode()}

        plain = {"string": pa.string(), "long": pa.int64(), "binary": pa.binary(),
                 "timestamp": pa.timestamp("us", tz="UTC")}
        fields = []
        for name, kind in CHANGELOG_COLUMNS:
            number, *children = self.field_ids[name]
            if kind == "map<string,string>":
                key_id, value_id = children
                kind_type = pa.map_(pa.field("key", pa.string(), nullable=False, metadata=ids(key_id)),
                                    pa.field("value", pa.string(), metadata=ids(value_id)))
            else:
                kind_type = plain[kind]
            fields.append(pa.field(name, kind_type, metadata=ids(number)))
        return pa.schema(fields)


def declare(found: dict, table, types, rows: int, first) -> None:
    """Add ``rows`` rows of (``table``, ``types``) first committed at ``first`` to ``found``
    ((source_table, column_types_json) -> [rows, first commit_ts])."""
    seen = found.setdefault((table, types), [0, None])
    seen[0] += rows
    if first is not None and (seen[1] is None or first < seen[1]):
        seen[1] = first


@dataclass(frozen=True)
class WrittenFile:
    """One Parquet file a read task wrote: its URI, size, rows and day (ISO, None: no commit_ts)."""

    path: str
    size: int
    rows: int
    day: str | None


class TaskFiles:
    """The files of one read task: one open Parquet writer per day of ``commit_ts`` it meets,
    and the task's column declarations ((source_table, column_types_json) -> [rows, first
    commit_ts]). :meth:`write` takes Arrow batches of changelog rows (any further columns
    are left out); they are held until the task has ``min_task_rows`` of them (``hold``
    False: none), then written. :meth:`close` finishes the files and returns them with the
    declarations and the batches still held (the task hands those to Spark)."""

    def __init__(self, sink: FileSink, hold: bool = True) -> None:
        from pyarrow import fs

        self.sink = sink
        self.schema = sink.arrow_schema()
        self.filesystem, self.root = fs.FileSystem.from_uri(sink.directory)
        self.task = uuid.uuid4().hex
        self.writers: dict = {}  # day -> (path, stream, writer, rows)
        self.declarations: dict = {}
        self.held: list | None = [] if hold and sink.min_task_rows > 0 else None
        self.held_rows = 0

    def write(self, batch) -> None:
        """Append ``batch`` to the task's files (or hold it, see the class's doc)."""
        if not batch.num_rows:
            return
        if self.held is not None:
            self.held.append(batch)
            self.held_rows += batch.num_rows
            if self.held_rows < self.sink.min_task_rows:
                return
            held, self.held = self.held, None
            for batch in held:
                self._write(batch)
            return
        self._write(batch)

    def _write(self, batch) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        rows = pa.RecordBatch.from_arrays([batch.column(name) for name in self.schema.names],
                                          schema=self.schema)
        self._declare(rows)
        days = pc.cast(rows.column("commit_ts"), pa.date32())
        distinct = pc.unique(days).to_pylist()
        if len(distinct) == 1:
            self._writer(distinct[0]).write_batch(rows)
            self._count(distinct[0], rows.num_rows)
            return
        for day in distinct:
            mask = pc.is_null(days) if day is None else pc.fill_null(pc.equal(days, pa.scalar(day)), False)
            part = rows.filter(mask)
            self._writer(day).write_batch(part)
            self._count(day, part.num_rows)

    def _declare(self, rows) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        found = pa.Table.from_batches([rows.select(["source_table", "column_types_json", "commit_ts"])]).group_by(
            ["source_table", "column_types_json"], use_threads=False
        ).aggregate([("commit_ts", "count", pc.CountOptions(mode="all")), ("commit_ts", "min")])
        for table, types, count, first in zip(*(found.column(name).to_pylist() for name in (
                "source_table", "column_types_json", "commit_ts_count", "commit_ts_min"))):
            declare(self.declarations, table, types, count, first)

    def _writer(self, day):
        import pyarrow.parquet as pq

        open_file = self.writers.get(day)
        if open_file is None:
            folder = f"{self.sink.partition_field}={'null' if day is None else day.isoformat()}"
            name = f"{self.sink.prefix}{self.task}-{len(self.writers):05d}.parquet"
            path = f"{self.root.rstrip('/')}/{folder}/{name}"
            self.filesystem.create_dir(f"{self.root.rstrip('/')}/{folder}", recursive=True)
            stream = self.filesystem.open_output_stream(path)
            writer = pq.ParquetWriter(stream, self.schema, compression=self.sink.compression,
                                      use_dictionary=True, write_statistics=True)
            open_file = self.writers[day] = [path, stream, writer, 0]
        return open_file[2]

    def _count(self, day, rows: int) -> None:
        self.writers[day][3] += rows

    def close(self) -> tuple[list[WrittenFile], list[tuple], list]:
        """Finish the files; returns them, the declarations of their rows (source_table,
        column_types_json, rows, first commit_ts), and the batches held (not written)."""
        files = []
        for day, (path, stream, writer, rows) in self.writers.items():
            writer.close()
            stream.close()
            size = self.filesystem.get_file_info(path).size
            files.append(WrittenFile(self._uri(path), int(size), rows, None if day is None else day.isoformat()))
        self.writers = {}
        declarations = [(table, types, rows, first) for (table, types), (rows, first) in self.declarations.items()]
        held, self.held = self.held or [], None
        return files, declarations, held

    def abort(self) -> None:
        """Close and delete what the task wrote (its read failed)."""
        for path, stream, writer, _ in self.writers.values():
            try:
                writer.close()
                stream.close()
                self.filesystem.delete_file(path)
            except Exception:  # noqa: BLE001 - an orphan file is harmless (never committed)
                pass
        self.writers = {}

    def _uri(self, path: str) -> str:
        """``path`` (in the filesystem) as the URI Iceberg reads it with, in the sink's scheme."""
        directory = self.sink.directory.rstrip("/")
        return directory + path[len(self.root.rstrip("/")):]
