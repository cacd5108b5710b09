"""Helpers for apply tests: change rows written straight into a changelog table, configs, readers.

Tests build ChangeRow values (no source needed), append them to a changelog table of the
shared ``lake`` catalog, run :func:`airflow_cdc.spark_jobs.apply.apply_window` on the shared session, and
read the results back both with Spark and with pyiceberg (an independent reader of the same
Iceberg metadata).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow_cdc.model import (
    CHANGELOG_COLUMNS,
    CHANGELOG_PARTITIONING,
    ChangeRow,
    Image,
    Op,
    Window,
    change_row_to_record,
    encode_ordering_key,
)

UTC = timezone.utc
T0 = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
STREAM = "orders"


def window(hour: int) -> Window:
    """The hour-long window ``hour`` hours after T0."""
    return Window(STREAM, T0 + timedelta(hours=hour), T0 + timedelta(hours=hour + 1))


def at(hour: int, second: int) -> datetime:
    return T0 + timedelta(hours=hour, seconds=second)


def seq(moment: datetime, transaction: str = "t", record: int = 0) -> bytes:
    """A Spanner-like ordering key: (commit_timestamp, server_transaction_id, record_sequence)."""
    return encode_ordering_key(moment, transaction, record)


@dataclass
class Changes:
    """Change rows of one source table, written like a source adapter would."""

    table: str
    column_types: dict
    key: str = "id"
    rows: list[ChangeRow] = field(default_factory=list)

    def add(
        self,
        win: Window,
        op: str,
        key,
        values: dict | None = None,
        *,
        when: datetime,
        image: str = "FULL",
        old: dict | None = None,
        ordering_key: bytes | None = None,
        column_types: dict | None = None,
        keys: dict | None = None,
    ) -> ChangeRow:
        row = ChangeRow(
            stream=STREAM,
            window_id=win.window_id,
            source_table=self.table,
            op=Op(op),
            image=Image(image),
            keys=keys if keys is not None else {self.key: key},
            new_values=None if op == "DELETE" else (values or {}),
            old_values=old,
            column_types=column_types if column_types is not None else self.column_types,
            commit_ts=when,
            ordering_key=ordering_key if ordering_key is not None else seq(when),
            transaction_id="t",
        )
        self.rows.append(row)
        return row


def changelog_schema():
    from airflow_cdc.spark_jobs.changelog import changelog_schema as schema

    return schema()


def write_changelog(spark, table: str, rows: list[ChangeRow]) -> None:
    """Append ``rows`` to the changelog table ``lake.<ns>.<name>`` (created when missing)."""
    namespace = table.rsplit(".", 1)[0]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
    columns = ", ".join(f"{name} {kind}" for name, kind in CHANGELOG_COLUMNS)
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table} ({columns}) USING iceberg "
        f"PARTITIONED BY ({CHANGELOG_PARTITIONING})"
    )
    records = [change_row_to_record(row) for row in rows]
    tuples = [tuple(record[name] for name, _ in CHANGELOG_COLUMNS) for record in records]
    spark.createDataFrame(tuples, changelog_schema()).writeTo(table).append()


@dataclass
class Lake:
    """One test's namespace in the shared catalog, with its changelog and config."""

    spark: object
    warehouse: Path
    namespace: str

    @property
    def changelog(self) -> str:
        return f"lake.{self.namespace}.{STREAM}_changelog"

    def table(self, name: str) -> str:
        return f"lake.{self.namespace}.{name}"

    def config(self, win: Window, **overrides) -> dict:
        config = {
            "catalog": "lake",
            "stream": STREAM,
            "window_id": win.window_id,
            "changelog_table": f"{self.namespace}.{STREAM}_changelog",
            "targets": {"namespace": self.namespace},
            "policies": {},
        }
        for key, value in overrides.items():
            if key in ("targets", "policies"):
                config[key] = {**config[key], **value}
            else:
                config[key] = value
        return config

    def write(self, *changes: Changes, win: Window | None = None) -> None:
        rows = [row for c in changes for row in c.rows if win is None or row.window_id == win.window_id]
        write_changelog(self.spark, self.changelog, rows)

    def apply(self, win: Window, **overrides):
        from airflow_cdc.spark_jobs.apply import apply_window

        return apply_window(self.spark, self.config(win, **overrides))

    @contextmanager
    def folded(self, win: Window, **overrides):
        """The works of ``win``'s folds, folded and not applied (released on exit)."""
        from functools import partial

        from airflow_cdc.spark_jobs.apply.config import ApplyConfig
        from airflow_cdc.spark_jobs.apply.declarations import fold_from_declarations
        from airflow_cdc.spark_jobs.apply.job import window_rows
        from airflow_cdc.spark_jobs.apply.table_fold import fold_tables, release

        config = ApplyConfig.from_dict(self.config(win, **overrides))
        rows = window_rows(self.spark, config)
        fold = partial(fold_tables, self.spark, config, rows)
        works = fold_from_declarations(self.spark, config.changelog_table.qualified, win.window_id, rows, fold,
                                       release)
        try:
            yield works
        finally:
            for work in works:
                release(work)

    def sibling(self, suffix: str) -> Lake:
        """Another namespace of the same catalog, to replay the same changes another way."""
        return Lake(self.spark, self.warehouse, f"{self.namespace}_{suffix}")

    def replay(self, changes: Changes, written: list[Window], applied: list[Window], **overrides) -> dict:
        """Write the ``written`` windows' rows of ``changes``, then apply the ``applied`` windows
        in order with ``overrides``: {window_id: result}."""
        for win in written:
            self.write(changes, win=win)
        return {win.window_id: self.apply(win, **overrides) for win in applied}

    def rows(self, name: str, order_by: str = "id") -> list[dict]:
        """A table's rows, read with Spark, as dicts ordered by ``order_by`` (SQL expressions)."""
        from pyspark.sql import functions as F

        frame = self.spark.table(self.table(name)).orderBy(*[F.expr(e) for e in order_by.split(",")])
        return [row.asDict(recursive=True) for row in frame.collect()]

    def pyiceberg_rows(self, name: str, order_by: str = "id") -> list[dict]:
        """The same table's rows, read by pyiceberg from the Iceberg metadata on disk."""
        from pyiceberg.table import StaticTable

        folder = self.warehouse / self.namespace / name / "metadata"
        version = (folder / "version-hint.text").read_text().strip()
        table = StaticTable.from_metadata(str(folder / f"v{version}.metadata.json"))
        rows = table.scan().to_arrow().to_pylist()
        keys = order_by.split(",")
        return sorted(rows, key=lambda r: tuple((r[k] is not None, r[k]) for k in keys))

    def snapshots(self, name: str) -> list[dict]:
        frame = self.spark.sql(f"SELECT snapshot_id, summary FROM {self.table(name)}.snapshots ORDER BY committed_at")
        return [row.asDict(recursive=True) for row in frame.collect()]

    def exists(self, name: str) -> bool:
        return self.spark.catalog.tableExists(self.table(name))


def values_of(rows: list[dict], *columns: str, key: str = "id") -> dict:
    """{key: (column values...)} for comparing table contents compactly."""
    return {row[key]: tuple(row[c] for c in columns) for row in rows}


def business(rows: list[dict]) -> list[dict]:
    """Rows without the _cdc_* columns."""
    return [{k: v for k, v in row.items() if not k.startswith("_cdc_")} for row in rows]


def normalized(rows: list[dict]) -> list[dict]:
    """Rows as both readers can agree on: aware UTC datetimes, bytes, lists."""
    return [{k: _normal(v) for k, v in row.items()} for row in rows]


def _normal(value):
    if isinstance(value, datetime):
        return value.astimezone(UTC)  # Spark gives naive local time, pyiceberg aware UTC
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, (list, tuple)):
        return [_normal(v) for v in value]
    return value


def dumps(value) -> str:
    return json.dumps(value, sort_keys=True)
