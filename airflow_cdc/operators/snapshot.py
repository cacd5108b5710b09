"""``CdcSnapshotOperator``: a table of a Debezium stream's database read in parallel chunks by
a Spark job (``spark_jobs/snapshot.py``), staged for the stream's windows.

Use it when a table joins a running stream, or when a target must be rebuilt or repaired
without stopping capture. The capture must be running: each batch of chunks is read between
two watermarks the job writes into the database's log, and the job waits for the capture to
deliver them (:mod:`airflow_cdc.sources.debezium.watermarks`). The staged batches reach the
targets through the stream's own windows (:mod:`airflow_cdc.sources.debezium.staged`), so
the snapshot and the stream never write a target at the same time.

A retry of the task resumes the same snapshot (the id is the run's unless given) from its
last whole batch. The database password reaches the job in a 0600 file removed afterwards,
never on a command line, in the spec or in XCom.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_cdc.operators.spark_step import CdcSparkOperator

_DIALECTS = {"postgres": "postgresql", "postgresql": "postgresql", "mysql": "mariadb",
             "mariadb": "mariadb"}
_DEFAULT_PORTS = {"postgresql": 5432, "mariadb": 3306}


def snapshot_id_for(table: str, dag_id: str, run_id: str, task_id: str) -> str:
    """The id of a run's snapshot of ``table``: the same on every try of the task."""
    digest = hashlib.sha256(f"{dag_id}\n{run_id}\n{task_id}".encode()).hexdigest()[:12]
    readable = "".join(c if c.isalnum() else "-" for c in table)[:60]
    return f"{readable}-{digest}"


class CdcSnapshotOperator(CdcSparkOperator):
    """Snapshot ``table`` (``schema.table`` as the connector names it) of the Debezium
    ``stream`` from the database of Airflow connection ``conn_id`` (postgres, or mysql for
    MariaDB/MySQL).

    ``key_columns`` chunk a table without a primary key (unique, NOT NULL columns);
    ``chunk_size`` rows per chunk; ``chunks_per_batch`` chunks read at once between one pair
    of watermarks (default: twice the job's cores, 4 on ``local[*]`` of 2 cores);
    ``watermark_table`` for databases without logical decoding messages (a captured table
    with columns id, snapshot_id, batch, kind); ``watermark_timeout`` seconds the job waits for
    the capture to deliver a watermark. Returns the job's summary (chunks, batches, rows
    staged, keys changed during the reads) as XCom.

    :param table: the table, ``schema.table`` as the connector names it. Templated.
    :param conn_id: the Airflow connection of the captured database (postgres, or mysql for
        MariaDB/MySQL).
    :param snapshot_id: the snapshot's id (None: derived from the task instance, so a retry
        continues the same snapshot). Templated.
    :param key_columns: the columns that chunk a table without a primary key (unique,
        NOT NULL). Templated.
    :param chunk_size: rows per chunk.
    :param chunks_per_batch: chunks read at once between one pair of watermarks.
    :param watermark_table: a captured table (columns id, snapshot_id, batch, kind) for the
        watermarks of a database without logical decoding messages.
    :param watermark_timeout: seconds the job waits for the capture to deliver a watermark.

    The other parameters are :class:`~airflow_cdc.operators.spark_step.CdcSparkOperator`'s
    (``stream`` is the Debezium stream, ``source_conn`` its hook's arguments; templated).
    """

    template_fields = ("source_conn", "table", "snapshot_id", "key_columns")
    ui_color = "#fdf1e8"

    def __init__(
        self,
        *,
        table: str,
        conn_id: str,
        snapshot_id: str | None = None,
        key_columns: Sequence[str] | None = None,
        chunk_size: int = 100_000,
        chunks_per_batch: int = 4,
        watermark_table: str | None = None,
        watermark_timeout: float = 300.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if self.stream.source_kind != "debezium":
            raise ValueError(
                f"CdcSnapshotOperator stages READ rows for a Debezium stream; stream "
                f"{self.stream.stream_id!r} is {self.stream.source_kind!r}")
        schema, _, name = table.rpartition(".")
        if not schema or not name:
            raise ValueError(f"table {table!r} is not schema.table (as the connector names it): "
                             f"write e.g. public.orders")
        if chunk_size < 1 or chunks_per_batch < 1:
            raise ValueError(f"chunk_size {chunk_size} and chunks_per_batch {chunks_per_batch} "
                             f"must be positive")
        self.table = table
        self.conn_id = conn_id
        self.snapshot_id = snapshot_id
        self.key_columns = list(key_columns) if key_columns else None
        self.chunk_size = chunk_size
        self.chunks_per_batch = chunks_per_batch
        self.watermark_table = watermark_table
        self.watermark_timeout = watermark_timeout

    def database(self) -> tuple[dict, str | None]:
        """(the job's database fields, the password) from the Airflow connection."""
        from airflow.sdk import BaseHook

        connection = BaseHook.get_connection(self.conn_id)
        dialect = _DIALECTS.get((connection.conn_type or "").lower())
        if dialect is None:
            raise AirflowFailException(
                f"connection {self.conn_id!r} is of type {connection.conn_type!r}: the parallel "
                f"snapshot reads PostgreSQL (type postgres) or MariaDB/MySQL (type mysql)")
        if not connection.schema:
            raise AirflowFailException(
                f"connection {self.conn_id!r} names no database (its schema field): set it to "
                f"the database the connector captures")
        fields = {"dialect": dialect, "host": connection.host or "127.0.0.1",
                  "port": int(connection.port or _DEFAULT_PORTS[dialect]),
                  "database": connection.schema, "user": connection.login or ""}
        return fields, connection.password or None

    def check_key(self, fields: Mapping[str, Any], password: str | None) -> list[str]:
        """The key columns the chunks will use; a table without one is refused here, before
        any Spark job starts."""
        from airflow_cdc.sources.snapshot.database import connect
        from airflow_cdc.sources.snapshot.dialects import dialect_named
        from airflow_cdc.sources.snapshot.keys import discover_key_columns

        schema, _, table = self.table.rpartition(".")
        conn = connect(fields["dialect"], fields["host"], fields["port"], fields["database"],
                       fields["user"], password)
        try:
            columns = discover_key_columns(conn, dialect_named(fields["dialect"]), table,
                                           schema=schema, key_columns=self.key_columns)
        finally:
            conn.close()
        return [c.name for c in columns]

    def prepare(self, snapshot_id: str, conf: Mapping[str, str] | None = None):
        """(the job's spec, its result file, its secrets file) for ``snapshot_id``: the spec
        file is written, the secrets file too when the connection has a password."""
        from airflow_cdc.pipeline.files import write_private
        from airflow_cdc.work_root import work_path
        from airflow_cdc.sources.snapshot.dialects import SnapshotChunkError
        from airflow_cdc.spark.iceberg import JDBC_DRIVER_JARS
        from airflow_cdc.spark.job import iceberg_job_spec

        fields, password = self.database()
        try:
            keys = self.check_key(fields, password)
        except SnapshotChunkError as error:
            raise AirflowFailException(str(error)) from error
        config = self.stream_config
        folder = work_path(config.work_root, config.stream_id, "snapshots", snapshot_id)
        spec = {
            "snapshot_id": snapshot_id, "stream_id": config.stream_id,
            "source_table": self.table, **fields,
            "sink": {k: v for k, v in config.source_spec.items()
                     if k in ("prefix", "topic_prefix", "topics_dir", "column_types")},
            "key_columns": self.key_columns, "chunk_size": self.chunk_size,
            "chunks_per_batch": self.chunks_per_batch, "watermark_table": self.watermark_table,
            "watermark_timeout_seconds": self.watermark_timeout,
        }
        spec_path, secrets_path = folder / "spec.json", folder / "secrets.json"
        write_private(spec_path, json.dumps(spec, sort_keys=True))
        args = ["--spec", str(spec_path), "--result", str(folder / "result.json")]
        if password:
            write_private(secrets_path, json.dumps({"password": password}))
            args += ["--secrets", str(secrets_path)]
        driver = JDBC_DRIVER_JARS.get(fields["dialect"])
        job = iceberg_job_spec(
            "snapshot", self.iceberg_catalog, args, name=f"cdc-snapshot-{snapshot_id}",
            conf=dict(conf or {}), jars=(str(driver),) if driver else ())
        self.log.info("snapshot %s of %s by key %s, chunks of %d rows, %d per batch",
                      snapshot_id, self.table, keys, self.chunk_size, self.chunks_per_batch)
        return job, folder / "result.json", secrets_path

    def execute(self, context) -> dict:
        snapshot_id = self.snapshot_id or snapshot_id_for(
            self.table, context["dag"].dag_id, context["run_id"], self.task_id)
        job, result_path, secrets_path = self.prepare(snapshot_id, self.job_conf(context))
        try:
            self.run_job(job)
        finally:
            secrets_path.unlink(missing_ok=True)
        summary = json.loads(result_path.read_text())
        self.log.info("snapshot %s: %s", snapshot_id, summary)
        return summary
