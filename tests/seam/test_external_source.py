"""A source written outside airflow_cdc, through the public seam only, run by real Airflow.

``tests/seam/plugins/split_once_source`` is such a source (a package the way a user keeps one
in the DAGs folder: on ``sys.path``, not installed): one partition that splits once into two.
A DAG names it by import path in ``CdcPipeline``; ``dag.test`` runs plan -> extract -> commit
-> apply -> gate for two windows, with real spark-submit jobs (the extract job imports the
source from the package zip the extract task ships), the real state store and Iceberg. Then
the first window is run again, and nothing changes (I1).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_cdc.model import PartitionState, WindowState, format_ts

pytestmark = pytest.mark.long  # make test-long (CI runs it); make test keeps the Spanner DAG's run

PLUGINS = Path(__file__).resolve().parent / "plugins"
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
WINDOW = timedelta(minutes=10)
SPLIT_AT = T0 + timedelta(minutes=13)
STREAM = "items"

DAG_FILE = """
import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG
from airflow.timetables.interval import DeltaDataIntervalTimetable

from airflow_cdc.operators.pipeline import CdcPipeline
from airflow_cdc.spark.iceberg import IcebergCatalog

with DAG("split_once_cdc", schedule=DeltaDataIntervalTimetable(timedelta(minutes=10)),
         start_date=datetime(2025, 1, 1, tzinfo=timezone.utc), catchup=False) as dag:
    CdcPipeline(
        group_id="cdc",
        source="split_once_source:SplitOnceSource",
        stream_id="items",
        spec={"log": os.environ["CDC_SEAM_LOG"]},
        catalog=IcebergCatalog(name="lake", kind="hadoop", warehouse=os.environ["CDC_SEAM_WAREHOUSE"]),
        namespace="seam",
        targets={"namespace": "seam_current"},
        spark_conf={"spark.default.parallelism": "2", "spark.sql.shuffle.partitions": "2"},
        deferrable=False,
        gate_poke_interval=1,
        gate_timeout=120,
    )
"""


def at(minutes: float) -> str:
    return format_ts(T0 + timedelta(minutes=minutes))


# id 1..6 inserted in window 0; window 1: root updates before the split, then the children
# (even ids, odd ids) update, delete and insert; one record the source cannot read.
CHANGES = [
    *({"ts": at(1 + i), "table": "items", "op": "INSERT", "id": i,
       "values": {"name": f"item-{i}", "qty": i}} for i in range(1, 7)),
    {"ts": at(11), "table": "items", "op": "UPDATE", "id": 1, "values": {"name": "item-1", "qty": 10}},
    {"ts": at(12), "table": "items", "op": "DELETE", "id": 6, "values": {}},
    {"ts": at(14), "table": "items", "op": "UPDATE", "id": 2, "values": {"name": "two", "qty": 20}},
    {"ts": at(15), "table": "items", "op": "UPDATE", "id": 3, "values": {"name": "three", "qty": 30}},
    {"ts": at(16), "table": "items", "op": "DELETE", "id": 5, "values": {}},
    {"ts": at(17), "table": "items", "op": "INSERT", "id": 8, "values": {"name": "item-8", "qty": 8}},
    {"ts": at(18), "table": "items", "op": "TRUNCATE", "id": 7, "values": {}},
]


def truth() -> dict[int, tuple]:
    rows: dict[int, tuple] = {}
    for change in CHANGES:
        if change["op"] == "DELETE":
            rows.pop(change["id"], None)
        elif change["op"] in ("INSERT", "UPDATE"):
            rows[change["id"]] = (change["values"]["name"], change["values"]["qty"])
    return rows


@pytest.fixture(scope="module")
def runs(airflow_db, warehouse, tmp_path_factory):
    import os
    import sys

    from airflow.dag_processing.dagbag import DagBag

    base = tmp_path_factory.mktemp("seam")
    log = base / "changes.json"
    log.write_text(json.dumps({"split_at": format_ts(SPLIT_AT), "changes": CHANGES}))
    bundle = base / "dags"
    bundle.mkdir()
    (bundle / "split_once_dag.py").write_text(DAG_FILE)
    local = "airflow.dag_processing.bundles.local.LocalDagBundle"
    saved_env, saved_path = dict(os.environ), list(sys.path)
    os.environ.update({
        "CDC_SEAM_LOG": str(log),
        "CDC_SEAM_WAREHOUSE": str(warehouse),
        "AIRFLOW_CDC_STATE_URL": f"sqlite:///{base / 'cdc_state.db'}",
        "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
        "PYSPARK_PYTHON": sys.executable,
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps([
            {"name": "dags-folder", "classpath": local, "kwargs": {}},
            {"name": "seam-tests", "classpath": local, "kwargs": {"path": str(bundle)}},
        ]),
    })
    sys.path.insert(0, str(PLUGINS))  # as Airflow puts the DAGs folder on sys.path
    try:
        bag = DagBag(str(bundle))
        assert not bag.import_errors, bag.import_errors
        dag = bag.dags["split_once_cdc"]
        first = [dag.test(logical_date=T0 + WINDOW * (i + 1)) for i in range(2)]
        yield {"dag": dag, "first": first, "state_url": os.environ["AIRFLOW_CDC_STATE_URL"]}
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path


def store(runs):
    from airflow_cdc.state import StateStore

    return StateStore(runs["state_url"])


def target(spark) -> dict[int, tuple]:
    rows = spark.sql("SELECT id, name, qty FROM lake.seam_current.items").collect()
    return {r.id: (r.name, r.qty) for r in rows}


def snapshots(spark, table: str) -> list[int]:
    return [r.snapshot_id for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()]


def test_both_windows_run_through_every_step_and_complete(runs):
    from airflow.utils.state import DagRunState

    assert [run.state for run in runs["first"]] == [DagRunState.SUCCESS, DagRunState.SUCCESS]
    with store(runs) as state:
        assert [w.state for w in state.list_windows(STREAM)] == [WindowState.COMPLETE] * 2


def test_the_target_equals_the_true_state_of_the_source(runs, spark):
    assert target(spark) == truth()


def test_the_partition_split_once_and_its_children_were_read_in_the_same_window(runs):
    with store(runs) as state:
        partitions = {p.partition_id: p for p in state.list_partitions(STREAM)}
        second = state.list_windows(STREAM)[1]

    assert partitions["root"].state is PartitionState.FINISHED
    assert sorted(p.parent_ids for p in (partitions["even"], partitions["odd"])) == [("root",)] * 2
    assert second.counts["rounds"] == 2 and second.counts["children"] == 2


def test_the_record_the_source_could_not_read_is_in_the_dead_letter_table(runs, spark):
    rows = spark.sql("SELECT partition_id, reason FROM lake.seam.items_dead_letters").collect()

    assert [(r.partition_id, "TRUNCATE" in r.reason) for r in rows] == [("odd", True)]


def test_running_the_first_window_again_changes_nothing(runs, spark):
    from airflow.utils.state import DagRunState

    with store(runs) as state:
        before = state.list_windows(STREAM)
    tables = ("lake.seam.items_changelog", "lake.seam_current.items", "lake.seam.items_dead_letters")
    snapshot_ids = {t: snapshots(spark, t) for t in tables}

    again = runs["dag"].test(logical_date=T0 + WINDOW)

    with store(runs) as state:
        after = state.list_windows(STREAM)
    assert again.state == DagRunState.SUCCESS
    assert [(w.state, w.changelog_snapshot_id, w.target_snapshot_ids, w.counts) for w in after] == [
        (w.state, w.changelog_snapshot_id, w.target_snapshot_ids, w.counts) for w in before
    ]
    assert {t: snapshots(spark, t) for t in tables} == snapshot_ids
    assert target(spark) == truth()
