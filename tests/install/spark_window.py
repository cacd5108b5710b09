"""One real window through an installed airflow-cdc's local Spark: ``check-install``'s Spark job.

    python spark_window.py <work folder>

Run by a variant's own interpreter from outside the repository (so the installed package is
what it imports): three Datastream events of one table in a JSON file, the extract job of
their window (its read tasks hand their rows to Spark in Arrow, ``mapInArrow``, in Spark's
Python workers) into an Iceberg changelog, then the apply job (into the Iceberg target
table). Prints ``window: spark=<version> iceberg=<runtime> iceberg_from=<where> changelog=3
target=<rows>`` (the runtime and its source as the session's own conf names them) and exits
non-zero when the target table is not what the events say: row 1 updated, row 2 inserted.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow_cdc.model import PartitionPosition, Window, format_ts
from airflow_cdc.operators.datastream import datastream_stream_config
from airflow_cdc.pipeline.files import WindowOutcomeFile, WindowPlanFile
from airflow_cdc.sources.datastream import PROGRESS_PARTITION
from airflow_cdc.sources.datastream.writer import write_json_events
from airflow_cdc.spark.iceberg import IcebergCatalog, local_session
from airflow_cdc.spark_jobs.apply import apply_window
from airflow_cdc.spark_jobs.extract import extract_window

START = datetime(2030, 1, 1, tzinfo=timezone.utc)
STREAM = "shop"
NAMESPACE = "check"


def event(number: int, op: str, row: dict) -> dict:
    """A Datastream event of PostgreSQL's ``public.customers``, one minute into the window."""
    when = START + timedelta(minutes=1, seconds=number)
    return {
        "stream_name": "projects/p/locations/l/streams/shop", "read_method": "postgres-cdc-wal",
        "object": "public_customers", "schema_key": "public_customers-schema",
        "uuid": f"00000000-0000-0000-0000-{number:012d}", "read_timestamp": when,
        "source_timestamp": when, "sort_keys": [], "payload": row,
        "source_metadata": {"schema": "public", "table": "customers", "is_deleted": False,
                            "change_type": op, "tx_id": str(number), "lsn": f"0/{number:X}0",
                            "primary_keys": ["id"]},
    }


def plan(work: Path, window: Window, events: Path) -> WindowPlanFile:
    positions = (PartitionPosition(str(events), window.start, resume_position="json"),
                 PartitionPosition(PROGRESS_PARTITION, window.start))
    return WindowPlanFile(
        window=window, positions=positions, pending_children=(),
        source=datastream_stream_config(stream_id=STREAM, prefix=str(work / "landing"),
                                        namespace=NAMESPACE).source_spec,
        changelog_table=f"lake.{NAMESPACE}.{STREAM}_changelog",
        options={"planned_at": format_ts(window.end), "allowed_lateness_seconds": 300,
                 "idle_timeout_seconds": None,
                 "dead_letter_table": f"lake.{NAMESPACE}.{STREAM}_dead_letters"},
    )


def iceberg_runtime(conf) -> str:
    """Where the session took Iceberg's Spark runtime from, as its own conf says: a jar
    (``spark.jars``, the jar folder) or a Maven coordinate (``spark.jars.packages``)."""
    for jar in filter(None, conf.get("spark.jars", "").split(",")):
        if "iceberg-spark-runtime-" in jar:
            return f"iceberg={jar.rsplit('/', 1)[-1]} iceberg_from=jar-folder:{jar.rsplit('/', 1)[0]}"
    for package in filter(None, conf.get("spark.jars.packages", "").split(",")):
        if "iceberg-spark-runtime-" in package:
            ivy = conf.get("spark.jars.ivy", "~/.ivy2")
            return f"iceberg={package} iceberg_from=spark.jars.packages:{ivy}"
    return "iceberg=? iceberg_from=?"


def main(work: Path) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    window = Window(STREAM, START, START + timedelta(minutes=30))
    events = write_json_events(work / "landing" / "customers.jsonl", [
        event(1, "INSERT", {"id": 1, "name": "a"}),
        event(2, "INSERT", {"id": 2, "name": "b"}),
        event(3, "UPDATE", {"id": 1, "name": "a2"}),
    ])
    catalog = IcebergCatalog(name="lake", kind="hadoop", warehouse=str(work / "warehouse"))
    spark = local_session(catalog, app_name="check-install", master="local[2]")
    try:
        spark.sparkContext.setLogLevel("ERROR")
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{NAMESPACE}")
        outcome = work / "outcome.json"
        extract_window(spark, plan(work, window, events), str(outcome))
        WindowOutcomeFile.from_json(outcome.read_text())  # the outcome the commit step reads
        changelog = spark.table(f"lake.{NAMESPACE}.{STREAM}_changelog").count()
        apply_window(spark, {
            "catalog": "lake", "stream": STREAM, "window_id": window.window_id,
            "changelog_table": f"{NAMESPACE}.{STREAM}_changelog",
            "targets": {"namespace": NAMESPACE, "history": False,
                        "dead_letter_table": f"{NAMESPACE}.{STREAM}_dead_letters"},
            "policies": {"on_dead_letter": "continue"},
        })
        target = sorted((r["id"], r["name"]) for r in
                        spark.table(f"lake.{NAMESPACE}.public_customers").collect())
        runtime = iceberg_runtime(spark.sparkContext.getConf())
        version = spark.version
    finally:
        spark.stop()
    print(f"window: spark={version} {runtime} changelog={changelog} target={target}", flush=True)
    return 0 if changelog == 3 and target == [(1, "a2"), (2, "b")] else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
