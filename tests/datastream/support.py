"""Datastream events as seed 001 shows them, and a small in-process window runner for tests."""

from __future__ import annotations

import itertools
import uuid as uuidlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow_cdc.model import PartitionPosition, Window, format_ts
from airflow_cdc.pipeline.files import WindowOutcomeFile, WindowPlanFile
from airflow_cdc.sources.datastream import PROGRESS_PARTITION
from airflow_cdc.sources.datastream.discovery import event_file_format

UTC = timezone.utc
T0 = datetime(2030, 1, 1, 0, 0, tzinfo=UTC)
STREAM = "shop"
_ids = itertools.count(1)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def window(index: int, minutes: int = 30) -> Window:
    return Window(STREAM, at(index * minutes), at((index + 1) * minutes))


def _event(read_method, obj, payload, meta, source_ts, read_ts, uuid) -> dict:
    return {
        "stream_name": "projects/p/locations/l/streams/shop",
        "read_method": read_method,
        "object": obj,
        "schema_key": f"{obj}-schema",
        "uuid": uuid or str(uuidlib.UUID(int=next(_ids))),
        "read_timestamp": read_ts or source_ts + timedelta(seconds=2),
        "source_timestamp": source_ts,
        "sort_keys": [],
        "source_metadata": meta,
        "payload": payload,
    }


def mysql(payload, *, log_file="mysql-bin.000001", pos=100, change="INSERT", deleted=False,
          when=None, read=None, backfill=False, uuid=None, obj="shop_orders", keys=("id",)):
    meta = {
        "log_file": "" if backfill else log_file,
        "log_position": 0 if backfill else pos,
        "primary_keys": list(keys),
        "is_deleted": deleted,
        "database": "shop",
        "table": obj.split("_", 1)[-1],
        "change_type": change,
    }
    method = "mysql-backfill-fulldump" if backfill else "mysql-cdc-binlog"
    return _event(method, obj, payload, meta, when or at(1), read, uuid)


def oracle(payload, *, scn=1000, rs_id="0x0001.00000001.0010", ssn=0, change="INSERT",
           deleted=False, row_id="AAAPwRAALAAMzMBABD", when=None, read=None, uuid=None,
           obj="ROOT_SAMPLE", keys=None):
    meta = {
        "log_file": "", "scn": scn, "row_id": row_id, "is_deleted": deleted, "database": "DB1",
        "schema": "ROOT", "table": "SAMPLE", "change_type": change, "tx_id": "tx-1",
        "rs_id": rs_id, "ssn": ssn,
    }
    if keys:
        meta["primary_keys"] = list(keys)
    return _event("oracle-cdc-logminer", obj, payload, meta, when or at(1), read, uuid)


def postgres(payload, *, lsn="0/16B3748", change="INSERT", deleted=False, when=None, read=None,
             backfill=False, uuid=None, obj="public_customers", keys=("id",)):
    meta = {
        "schema": "public", "table": obj.split("_", 1)[-1], "is_deleted": deleted,
        "change_type": change, "tx_id": "501", "lsn": None if backfill else lsn,
        "primary_keys": list(keys),
    }
    method = "postgresql-backfill" if backfill else "postgres-cdc-wal"
    return _event(method, obj, payload, meta, when or at(1), read, uuid)


def sqlserver(payload, *, lsn="00000027:00000ac0:0002", change="INSERT", deleted=False,
              when=None, read=None, uuid=None, obj="dbo_items", keys=("id",)):
    meta = {
        "table": "items", "database": 5, "schema": "dbo", "is_deleted": deleted, "lsn": lsn,
        "tx_id": "t9", "physical_location": [1, 2, 3], "replication_index": list(keys),
        "change_type": change,
    }
    return _event("sqlserver-cdc", obj, payload, meta, when or at(1), read, uuid)


@dataclass
class Run:
    """One window's extract run in-process: its outcome and the result summary."""

    result: dict
    outcome: WindowOutcomeFile


def run_extract(spark, namespace: str, work: Path, win: Window, files: list[Path],
                progress_start: datetime | None = None, planned_at: datetime | None = None,
                lateness_seconds: float = 300, idle_timeout_seconds: float | None = None,
                key_columns: dict | None = None, column_types: dict | None = None) -> Run:
    """Plan ``files`` (plus the progress partition) and run the extract job on them.

    ``key_columns`` and ``column_types`` reach the job as the pipeline's do: in the plan's
    source spec.
    """
    from airflow_cdc.operators.datastream import datastream_stream_config
    from airflow_cdc.spark_jobs.extract import extract_window

    positions = [
        PartitionPosition(str(f), win.start, resume_position=event_file_format(str(f)))
        for f in files
    ] + [PartitionPosition(PROGRESS_PARTITION, progress_start or win.start)]
    plan = WindowPlanFile(
        window=win,
        positions=tuple(positions),
        pending_children=(),
        source=datastream_stream_config(
            stream_id=STREAM, prefix=str(work), namespace=namespace, key_columns=key_columns,
            column_types=column_types,
        ).source_spec,
        changelog_table=f"lake.{namespace}.{STREAM}_changelog",
        options={
            "planned_at": format_ts(planned_at or win.end),
            "allowed_lateness_seconds": lateness_seconds,
            "idle_timeout_seconds": idle_timeout_seconds,
            "dead_letter_table": f"lake.{namespace}.{STREAM}_dead_letters",
        },
    )
    outcome_path = work / f"outcome-{format_ts(win.start)}.json"
    result = extract_window(spark, plan, str(outcome_path))
    return Run(result, WindowOutcomeFile.from_json(outcome_path.read_text()))


def apply(spark, namespace: str, win: Window, history: list[str] | None = None) -> dict:
    from airflow_cdc.spark_jobs.apply import apply_window

    return apply_window(spark, {
        "catalog": "lake",
        "stream": STREAM,
        "window_id": win.window_id,
        "changelog_table": f"{namespace}.{STREAM}_changelog",
        "targets": {"namespace": namespace,
                    "dead_letter_table": f"{namespace}.{STREAM}_dead_letters",
                    "history": history or False},
        "policies": {"on_dead_letter": "continue"},
    })


def iceberg_types(warehouse: Path, namespace: str, table: str) -> dict[str, str]:
    """{column: Iceberg type} of a table, read by pyiceberg from its metadata on disk."""
    from pyiceberg.table import StaticTable

    folder = warehouse / namespace / table / "metadata"
    version = (folder / "version-hint.text").read_text().strip()
    schema = StaticTable.from_metadata(str(folder / f"v{version}.metadata.json")).schema()
    return {f.name: str(f.field_type) for f in schema.fields}


def table_rows(spark, table: str, key: str = "id") -> dict:
    """{key: business columns} of a target table (without the _cdc_* columns)."""
    rows = [r.asDict() for r in spark.table(table).collect()]
    return {r[key]: {k: v for k, v in r.items() if not k.startswith("_cdc_")} for r in rows}


def dag_bundle_env(tmp_path: Path, monkeypatch, bundle_name: str, dags_source: str) -> dict:
    """Environment for a Datastream DAG run by ``dag.test``: the state store (SQLite) and work
    root under ``tmp_path``, the landing prefix in ``$CDC_TEST_PREFIX``, and ``dags_source`` as
    the file of a DAG bundle of its own (``dag.test`` serializes a DAG from its bundle).
    ``{"prefix", "store", "bundle"}``."""
    import json

    from airflow_cdc.state import StateStore

    state_path = tmp_path / "cdc_state.db"
    monkeypatch.setenv(
        "AIRFLOW_CONN_CDC_STATE_DEFAULT",
        json.dumps({"conn_type": "cdc_state", "extra": {"path": str(state_path)}}),
    )
    monkeypatch.setenv("AIRFLOW_CDC_WORK_ROOT", str(tmp_path / "work"))
    prefix = tmp_path / "landing"
    prefix.mkdir()
    monkeypatch.setenv("CDC_TEST_PREFIX", str(prefix))
    bundle = tmp_path / "dags"
    bundle.mkdir()
    (bundle / f"{bundle_name.replace('-', '_')}_dags.py").write_text(dags_source)
    local = "airflow.dag_processing.bundles.local.LocalDagBundle"
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps([
        {"name": "dags-folder", "classpath": local, "kwargs": {}},
        {"name": bundle_name, "classpath": local, "kwargs": {"path": str(bundle)}},
    ]))
    store = StateStore(f"sqlite:///{state_path}")
    store.migrate()
    return {"prefix": prefix, "store": store, "bundle": bundle}


def bundle_dag(bundle: Path, dag_id: str):
    """The DAG ``dag_id`` of a bundle folder, parsed as Airflow parses it (no import errors)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(bundle))
    assert not bag.import_errors, bag.import_errors
    return bag.dags[dag_id]
