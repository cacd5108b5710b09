"""Parallel snapshot job: a table read in parallel key-range chunks over JDBC, staged as READ
change rows that never override a change newer than the moment they were read.

Usage (spark-submit): ``snapshot.py --spec <snapshot.json> --result <result.json>
[--secrets <secrets.json>]`` (the database password, never on the command line).

Debezium's incremental snapshot reads one chunk at a time on the connector's one thread. This
job reads ``chunks_per_batch`` chunks at once, one Spark task each, and keeps Debezium's rule
with watermarks in the log (:mod:`airflow_cdc.sources.debezium.watermarks`), per batch:

1. The chunk plan (:mod:`airflow_cdc.sources.snapshot.chunks`: key columns, the maximum key
   captured up front, boundaries every ``chunk_size`` keys) is made once and written to
   ``<sink>/snapshots/<id>/plan.json``; a re-run reads it back, so chunks never move.
2. Batches already staged (``_BATCH.json`` written) are skipped: a crashed snapshot resumes
   from its last completed batch, and a half-written batch folder is overwritten.
3. Low watermark into the log; the batch's chunks read over JDBC (``spark.read.jdbc`` with one
   predicate per chunk) and cached, so the read happens here; high watermark into the log.
4. Wait until the capture has delivered the high watermark into the sink (bounded: a capture
   that is down fails the job naming it), then scan the files that appeared since step 3 for
   the keys of the table changed between the two watermarks (counted in the marker).
5. Every row of the batch becomes a READ change row at the **low** watermark's position
   (:mod:`airflow_cdc.spark_jobs.snapshot_rows`), written as Parquet to ``batch=<n>/``, then
   ``_BATCH.json`` (the batch is whole). The stream's windows take whole batches
   (:mod:`airflow_cdc.sources.debezium.staged`).
6. ``_COMPLETE.json`` once every chunk is staged.

Why the low watermark, and no row dropped: a row was read at some moment between the two
watermarks, so its READ never overrides a change after the low one, and every such change is
applied on top of it (a full image replaces it, a partial image sets the columns it carries).
A column no change after the low watermark carries held one value from the low watermark
to the read, the value the READ row has. So the READ row is the base that partial images
(unchanged TOASTed columns as Debezium's unavailable-value placeholder) need: a key updated
during the read and never again in full keeps the READ row's value for the columns its
partial changes leave out. (Dropping the READ rows of keys changed between the watermarks,
DBLog's rule, is right only where every change is a full image.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from airflow_cdc.model import CdcError
from airflow_cdc.sources.debezium.layout import list_sink_files
from airflow_cdc.sources.debezium.ordering import ordering_key
from airflow_cdc.sources.debezium.staged import (
    BATCH_MARKER,
    COMPLETE_MARKER,
    PLAN_FILE,
    SNAPSHOTS_DIR,
    batch_dir,
    batch_marker,
    partition_of,
    staged_snapshots,
    validate_snapshot_id,
)
from airflow_cdc.sources.debezium.storage import sink_access
from airflow_cdc.sources.debezium.watermarks import (
    HIGH,
    LOW,
    BatchScan,
    Watermark,
    WatermarkError,
    listed_paths,
    postgresql_emit,
    scan_batch,
    sink_lines,
    table_emit,
)
from airflow_cdc.sources.snapshot.chunks import ChunkPlan, plan_chunks
from airflow_cdc.sources.snapshot.dialects import dialect_named
from airflow_cdc.work_root import local_path


@dataclass(frozen=True)
class SnapshotSpec:
    """What one snapshot reads and where it stages (the ``--spec`` file)."""

    snapshot_id: str
    stream_id: str
    source_table: str  # as the connector names it: schema.table (PostgreSQL), db.table (MariaDB)
    dialect: str  # postgresql | mariadb
    host: str
    port: int
    database: str
    user: str
    sink: dict  # the Debezium stream's spec: prefix, topic_prefix, topics_dir, column_types
    key_columns: tuple[str, ...] | None = None
    chunk_size: int = 100_000
    chunks_per_batch: int = 4
    watermark_table: str | None = None  # None: logical messages (PostgreSQL)
    watermark_timeout_seconds: float = 300.0
    poll_seconds: float = 1.0
    fetch_size: int = 10_000
    password: str | None = field(default=None, repr=False)

    @classmethod
    def from_json(cls, text: str, secrets: dict | None = None) -> SnapshotSpec:
        data = json.loads(text)
        if data.get("key_columns") is not None:
            data["key_columns"] = tuple(data["key_columns"])
        spec = cls(**{**data, **(secrets or {})})
        validate_snapshot_id(spec.snapshot_id)
        dialect_named(spec.dialect)
        if spec.dialect != "postgresql" and not spec.watermark_table:
            raise ValueError(
                f"snapshot {spec.snapshot_id}: {spec.dialect} has no logical decoding messages; "
                f"give watermark_table (a captured table with columns id, snapshot_id, batch, kind)")
        return spec

    def to_json(self) -> str:
        data = {k: v for k, v in self.__dict__.items() if k != "password"}
        return json.dumps(data, sort_keys=True)

    @property
    def schema_and_table(self) -> tuple[str, str]:
        schema, _, table = self.source_table.rpartition(".")
        if not schema or not table:
            raise ValueError(f"source_table {self.source_table!r} is not schema.table")
        return schema, table

    @property
    def jdbc_url(self) -> str:
        # MariaDB's driver (2.x) takes jdbc:mysql: too, and only that scheme makes Spark use
        # its MySQL dialect (backquoted names; "id" would be a string literal).
        scheme = "postgresql" if self.dialect == "postgresql" else "mysql"
        return f"jdbc:{scheme}://{self.host}:{self.port}/{self.database}"

    @property
    def staging(self) -> str:
        return f"{self.sink['prefix'].rstrip('/')}/{SNAPSHOTS_DIR}/{self.snapshot_id}"

    @property
    def topic_prefix(self) -> str:
        return self.sink["topic_prefix"]

    def watched_topics(self) -> list[str]:
        """The topics whose files step 4 reads: watermarks and the table's changes."""
        topics = [f"{self.topic_prefix}.{self.source_table}"]
        topics.append(f"{self.topic_prefix}.{self.watermark_table}" if self.watermark_table
                      else f"{self.topic_prefix}.message")
        return topics


class SnapshotError(CdcError, RuntimeError):
    """The snapshot cannot go on; the message names what and the fix."""


def connect(spec: SnapshotSpec):
    """A DB-API connection to the source database (autocommit: watermarks commit at once)."""
    from airflow_cdc.sources.snapshot.database import connect as connect_database

    return connect_database(spec.dialect, spec.host, spec.port, spec.database, spec.user,
                            spec.password)


def emit(conn, spec: SnapshotSpec, watermark: Watermark) -> None:
    if spec.watermark_table:
        quote = '"' if spec.dialect == "postgresql" else "`"
        sql, params = table_emit(watermark, spec.watermark_table, quote=quote)
    else:
        sql, params = postgresql_emit(watermark)
    with conn.cursor() as cur:
        cur.execute(sql, params)


# --- the staging folder (local paths: the sink's own folder) ----------------------------------
def _path(uri: str) -> Path:
    if "://" in uri and not uri.startswith("file://"):
        raise SnapshotError(f"staging under {uri!r}: the parallel snapshot stages on a local or "
                            f"shared file system path only so far; give the sink a path")
    try:
        return local_path(uri)  # file:/x, file:///x and file://localhost/x are all /x
    except ValueError as error:
        raise SnapshotError(f"staging under {uri!r}: {error}") from None


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees all of it or nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)


def load_or_plan(spec: SnapshotSpec, conn) -> ChunkPlan:
    plan_path = _path(spec.staging) / PLAN_FILE
    if plan_path.exists():
        return ChunkPlan.from_json(plan_path.read_text())
    schema, table = spec.schema_and_table
    dialect = dialect_named(spec.dialect)
    plan = plan_chunks(conn, dialect, table, chunk_size=spec.chunk_size, schema=schema,
                       key_columns=list(spec.key_columns) if spec.key_columns else None)
    write_whole(plan_path, plan.to_json())
    return plan


def staged_chunks(spec: SnapshotSpec) -> tuple[set[int], int]:
    """(chunk indexes already staged, the last batch number) from the batch markers."""
    root = _path(spec.staging).parent
    listing = [str(p) for p in (root / spec.snapshot_id).rglob(BATCH_MARKER)]
    staged = staged_snapshots(listing, str(root)).get(spec.snapshot_id)
    if staged is None or not staged.batches:
        return set(), 0
    done = set()
    for folder in staged.batches.values():
        done.update(json.loads((root / folder / BATCH_MARKER).read_text())["chunks"])
    return done, max(staged.batches)


# --- one batch ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ColumnReading:
    """How the reader types the table's columns where the JDBC driver's own report is not
    the column's meaning: ``custom_schema`` (Spark's ``customSchema`` option) and the
    canonical types of columns read as text (``declared``)."""

    custom_schema: str | None
    declared: dict


# (dialect, information_schema data_type) -> Spark DDL type. PostgreSQL's driver reports
# timestamptz and timestamp alike (java.sql.Types.TIMESTAMP), so Spark cannot tell an
# instant from a wall-clock time without this.
_FORCED_TYPES = {
    ("postgresql", "timestamp with time zone"): "TIMESTAMP",
    ("postgresql", "timestamp without time zone"): "TIMESTAMP_NTZ",
    ("mariadb", "timestamp"): "TIMESTAMP",
    ("mariadb", "datetime"): "TIMESTAMP_NTZ",
}


def column_reading(conn, spec: SnapshotSpec, plan: ChunkPlan) -> ColumnReading:
    """:class:`ColumnReading` of the table, from ``information_schema.columns``."""
    with conn.cursor() as cur:
        cur.execute("SELECT column_name, data_type, numeric_precision FROM "
                    "information_schema.columns WHERE table_schema = %s AND table_name = %s",
                    (plan.schema, plan.table))
        columns = cur.fetchall()
    forced, declared = [], {}
    for name, data_type, precision in columns:
        kind = str(data_type).lower()
        ddl = _FORCED_TYPES.get((spec.dialect, kind))
        if spec.dialect == "postgresql" and kind == "numeric" and precision is None:
            ddl, declared[name] = "STRING", "PG_NUMERIC"  # Spark would round it to (38,18)
        if ddl:
            forced.append(f"`{name}` {ddl}")
    return ColumnReading(", ".join(forced) or None, declared)


def read_chunks(spark, spec: SnapshotSpec, plan: ChunkPlan, chunks, reading: ColumnReading):
    """The batch's chunks as one DataFrame, one partition per chunk (not read yet)."""
    properties = {"user": spec.user, "fetchsize": str(spec.fetch_size),
                  "driver": "org.postgresql.Driver" if spec.dialect == "postgresql"
                  else "org.mariadb.jdbc.Driver"}
    if reading.custom_schema:
        properties["customSchema"] = reading.custom_schema
    if spec.password:
        properties["password"] = spec.password
    return spark.read.jdbc(spec.jdbc_url, plan.relation,
                           predicates=[c.predicate for c in chunks], properties=properties)


def wait_for_watermarks(spec: SnapshotSpec, watermark: Watermark, before: set[str],
                        key_columns: Sequence[str]) -> BatchScan:
    """Poll the sink until both watermarks of the batch are in files (step 4)."""
    lister, reader = sink_access(spec.sink["prefix"], spec.sink.get("connection"))
    topics_dir = spec.sink.get("topics_dir") or "topics"
    deadline = time.monotonic() + spec.watermark_timeout_seconds
    while True:
        listing = list_sink_files(lister, spec.sink["prefix"], topics_dir)
        scan = scan_batch(sink_lines(listing, reader, spec.watched_topics(), skip=before),
                          watermark, spec.source_table, key_columns,
                          column_types=spec.sink.get("column_types"),
                          watermark_table=spec.watermark_table)
        if scan.complete:
            return scan
        if time.monotonic() >= deadline:
            missing = [k for k, v in ((LOW, scan.low), (HIGH, scan.high)) if v is None]
            raise WatermarkError(
                f"snapshot {spec.snapshot_id} batch {watermark.batch}: the {' and '.join(missing)} "
                f"watermark did not reach the sink {spec.sink['prefix']!r} within "
                f"{spec.watermark_timeout_seconds:.0f}s (topics {spec.watched_topics()}): is the "
                f"capture running, and does it capture "
                f"{spec.watermark_table or 'logical decoding messages'}?")
        time.sleep(spec.poll_seconds)


def stage_batch(spark, spec: SnapshotSpec, plan: ChunkPlan, number: int, chunks, conn,
                reading: ColumnReading) -> dict:
    """Steps 3-5 for batch ``number``; returns its marker's fields."""
    from pyspark import StorageLevel

    from airflow_cdc.spark_jobs.snapshot_rows import read_rows

    lister, _ = sink_access(spec.sink["prefix"], spec.sink.get("connection"))
    before = listed_paths(list_sink_files(lister, spec.sink["prefix"],
                                          spec.sink.get("topics_dir") or "topics"))
    watermark = Watermark(spec.snapshot_id, number, LOW)
    emit(conn, spec, watermark)
    frame = read_chunks(spark, spec, plan, chunks, reading).persist(StorageLevel.MEMORY_AND_DISK)
    frame.count()  # the read happens here, between the watermarks
    emit(conn, spec, Watermark(spec.snapshot_id, number, HIGH))
    key_names = [c.name for c in plan.key_columns]
    scan = wait_for_watermarks(spec, watermark, before, key_names)
    name = (scan.high_source or {}).get("name") or scan.high.connector
    ts_ms = (scan.high_source or {}).get("ts_ms")
    commit_ts = (datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc) if ts_ms
                 else datetime.now(timezone.utc))
    rows = read_rows(
        frame, stream=spec.stream_id, source_table=_table_identifier(spec.source_table),
        key_columns=key_names, ordering_key=ordering_key(scan.low, "r"), commit_ts=commit_ts,
        event_id_prefix=f"{name}/{spec.source_table}/r/{scan.high.text}/",
        partition_id=partition_of(spec.snapshot_id), declared=reading.declared,
        metadata={"snapshot": "parallel", "snapshot_id": spec.snapshot_id, "batch": number,
                  "position": scan.low.text, "high_watermark": scan.high.text},
    )
    folder = _path(spec.staging).parent / batch_dir(spec.snapshot_id, number)
    rows.write.mode("overwrite").parquet(str(folder))
    staged = spark.read.parquet(str(folder)).count()
    frame.unpersist()
    marker = batch_marker([c.index for c in chunks], staged, len(scan.changed_keys),
                          scan.low.text, scan.high.text)
    write_whole(folder / BATCH_MARKER, marker)
    return json.loads(marker)


def _table_identifier(source_table: str) -> str:
    from airflow_cdc.sources.debezium.source import table_identifier

    return table_identifier(source_table)


def run_snapshot(spark, spec: SnapshotSpec) -> dict:
    """Steps 1-6; returns the summary (chunks, batches, rows staged, keys changed while
    their batch was read: staged under those changes, module docstring)."""
    conn = connect(spec)
    try:
        plan = load_or_plan(spec, conn)
        reading = column_reading(conn, spec, plan)
        done, last = staged_chunks(spec)
        pending = [c for c in plan.chunks if c.index not in done]
        batches, rows, changed = [], 0, 0
        for start in range(0, len(pending), max(1, spec.chunks_per_batch)):
            last += 1
            marker = stage_batch(spark, spec, plan, last,
                                 pending[start:start + spec.chunks_per_batch], conn, reading)
            batches.append(last)
            rows += marker["rows"]
            changed += marker["keys_changed_during_read"]
    finally:
        conn.close()
    summary = {"snapshot_id": spec.snapshot_id, "table": spec.source_table,
               "chunks": len(plan.chunks), "chunks_resumed": len(done),
               "batches_staged": len(batches), "rows_staged": rows,
               "keys_changed_during_reads": changed}
    write_whole(_path(spec.staging) / COMPLETE_MARKER, json.dumps(summary, sort_keys=True))
    return summary


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="the snapshot's spec (JSON file)")
    parser.add_argument("--result", required=True, help="where to write the summary")
    parser.add_argument("--secrets", help="JSON file with the database password")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from pyspark.sql import SparkSession

    from airflow_cdc.spark_jobs.changelog import read_text, write_text
    from airflow_cdc.spark_jobs.secret_conf import load_secret_conf
    from airflow_cdc.spark_jobs.session import end_job_session

    args = parse_args(argv)
    spark = SparkSession.builder.getOrCreate()
    try:
        load_secret_conf(spark)  # before the catalog is first used
        secrets = json.loads(read_text(spark, args.secrets)) if args.secrets else None
        spec = SnapshotSpec.from_json(read_text(spark, args.spec), secrets)
        summary = run_snapshot(spark, spec)
        write_text(spark, args.result, json.dumps(summary, sort_keys=True))
    finally:
        end_job_session(spark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
