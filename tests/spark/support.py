"""Test data and readers for the Spark layer: change rows on disk, Iceberg table readers, ports."""

from __future__ import annotations

import itertools
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from airflow_cdc.model import (
    UTC,
    ChangeRow,
    Image,
    Op,
    Window,
    change_row_to_json_line,
    change_row_to_record,
    encode_ordering_key,
    format_ts,
)

# Kept small: 2 cores on every machine of the project.
TEST_SPARK_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
}
_catalog_numbers = itertools.count(1)


def window(hour: int) -> Window:
    """Window ``[hour, hour+1)`` counted from 2024-05-01 00:00 UTC (hour 24 is 2024-05-02 00:00)."""
    start = datetime(2024, 5, 1, tzinfo=UTC) + timedelta(hours=hour)
    return Window("orders", start, start + timedelta(hours=1))


def change_rows(w: Window, count: int, first_key: int = 1) -> list[ChangeRow]:
    """``count`` changes of table Orders inside ``w`` (inserts, partial updates, deletes)."""
    rows = []
    for i in range(count):
        key = first_key + i
        op = (Op.INSERT, Op.UPDATE, Op.DELETE)[i % 3]
        commit_ts = w.start + timedelta(minutes=10 * i + 5, microseconds=i)
        rows.append(
            ChangeRow(
                stream="orders",
                window_id=w.window_id,
                source_table="Orders",
                op=op,
                image=Image.PARTIAL if op is Op.UPDATE else Image.FULL,
                keys={"OrderId": key},
                new_values=None if op is Op.DELETE else {"OrderId": key, "Total": 10.5 * key},
                old_values={"Total": 1.0} if op is not Op.INSERT else None,
                column_types={"OrderId": "INT64", "Total": "FLOAT64"},
                commit_ts=commit_ts,
                ordering_key=encode_ordering_key(commit_ts, f"tx-{key}", i),
                transaction_id=f"tx-{key}",
                event_id=f"ev-{key:04d}",
                partition_id="token-0",
                source_metadata={"record_sequence": f"{i:08d}"},
            )
        )
    return rows


def write_change_rows(path: Path, rows: Sequence[ChangeRow]) -> Path:
    path.write_text("".join(change_row_to_json_line(row) + "\n" for row in rows))
    return path


def expected_records(rows: Sequence[ChangeRow]) -> list[dict]:
    """The changelog rows ``rows`` must become (hex ordering keys, format_ts times), by event id."""
    records = []
    for row in rows:
        record = change_row_to_record(row)
        record["commit_ts"] = format_ts(record["commit_ts"])
        record["ordering_key"] = record["ordering_key"].hex()
        records.append(record)
    return sorted(records, key=lambda record: record["event_id"])


@dataclass(frozen=True)
class TableReader:
    """Reads one warehouse's tables through a session catalog that caches no table state."""

    spark: object
    catalog: str

    def exists(self, table: str) -> bool:
        return self.spark.catalog.tableExists(f"{self.catalog}.{table}")

    def records(self, table: str) -> list[dict]:
        """Every changelog row in the model codec's text form (hex bytes, format_ts times)."""
        rows = self.spark.sql(
            "SELECT stream, window_id, source_table, op, image, keys, new_values, "
            "old_values, column_types_json, "
            "date_format(commit_ts, \"yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'\") AS commit_ts, "
            "lower(hex(ordering_key)) AS ordering_key, transaction_id, event_id, partition_id, "
            f"source_metadata_json FROM {self.catalog}.{table} ORDER BY event_id"
        ).collect()
        return [row.asDict(recursive=True) for row in rows]

    def snapshots(self, table: str) -> list[dict]:
        """Snapshots oldest first: id, operation, window tag, added records."""
        rows = self.spark.sql(
            "SELECT snapshot_id, operation, summary['airflow-cdc.window-id'] AS window_id, "
            "CAST(coalesce(summary['added-records'], '0') AS INT) AS added_records "
            f"FROM {self.catalog}.{table}.snapshots ORDER BY committed_at"
        ).collect()
        return [row.asDict(recursive=True) for row in rows]

    def day_partitions(self, table: str) -> list[tuple[str, int]]:
        rows = self.spark.sql(
            "SELECT CAST(partition.commit_ts_day AS STRING) AS day, record_count "
            f"FROM {self.catalog}.{table}.partitions ORDER BY day"
        ).collect()
        return [(row.day, row.record_count) for row in rows]


def open_warehouse(spark, warehouse: Path) -> TableReader:
    """Register ``warehouse`` as a new Hadoop catalog of the session ``spark``."""
    name = f"read{next(_catalog_numbers)}"
    prefix = f"spark.sql.catalog.{name}"
    spark.conf.set(prefix, "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set(f"{prefix}.type", "hadoop")
    spark.conf.set(f"{prefix}.warehouse", warehouse.absolute().as_uri())
    # Other processes commit to these tables between reads: never serve a cached snapshot.
    spark.conf.set(f"{prefix}.cache-enabled", "false")
    return TableReader(spark, name)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spark_class() -> str:
    """pyspark's own bin/spark-class (it finds SPARK_HOME without asking python3 from PATH)."""
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")
