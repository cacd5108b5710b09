"""The ``open`` stall policy through real Airflow: a window whose partition lags is read with
what arrived, flagged unconfirmed (state store, XCom, Asset extra), and the late records the
next window reads are applied in order per cell, so the targets end equal to the truth."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc_emulators.bigtable import BigtableEmulator, generate_history
from tests.warm import stop_warm_drivers, warm_driver_env

pytestmark = pytest.mark.long  # make test-long (CI runs it); make test keeps the Spanner DAG's run

START = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
WINDOW = timedelta(minutes=30)
STREAM = "events"

DAG_FILE = """
import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG
from airflow.timetables.interval import DeltaDataIntervalTimetable

from airflow_cdc.operators.bigtable import BigtableChangeStreamPipeline
from airflow_cdc.spark.iceberg import IcebergCatalog

with DAG("bigtable_stall_open", schedule=DeltaDataIntervalTimetable(timedelta(minutes=30)),
         start_date=datetime(2025, 1, 6, 8, tzinfo=timezone.utc), catchup=False) as dag:
    BigtableChangeStreamPipeline(
        group_id="cdc", project_id="demo-project", instance_id="demo-instance",
        table_id="events", app_profile_id="default",
        heartbeat_seconds=0.5, evidence_delay_seconds=0,
        stall_policy={"policy": "open", "after_minutes": 0},
        catalog=IcebergCatalog(name="lake", kind="hadoop", warehouse=os.environ["CDC_BT_WAREHOUSE"]),
        namespace="btstall",
        targets={"namespace": "btstall_t"},
        spark_conf={"spark.default.parallelism": "2", "spark.sql.shuffle.partitions": "2"},
        deferrable=False, gate_poke_interval=1, gate_timeout=120, wait_poke_interval=1,
        warm_driver_idle_seconds=float(os.environ.get("CDC_WARM_DRIVER_IDLE_SECONDS") or 0) or None,
    )
"""


@pytest.fixture(scope="module")
def runs(airflow_db, warehouse, tmp_path_factory):
    import os

    from airflow.dag_processing.dagbag import DagBag

    # the lag holds 10 minutes past the boundary (75 s by default): the emulator's clock runs
    # with wall time, and a slow machine took more than 75 s to reach the first window's gate
    history = generate_history(seed=3, start=START, hours=1.0, commits_per_second=0.2,
                               lag_hold_after_boundary=timedelta(minutes=10))
    episode = history.lag_episodes[0]
    assert episode.boundary == START + WINDOW
    assert START + 2 * WINDOW > episode.hold_until
    base = tmp_path_factory.mktemp("bigtable_stall")
    bundle = base / "dags"
    bundle.mkdir()
    (bundle / "bigtable_stall_dag.py").write_text(DAG_FILE)
    local = "airflow.dag_processing.bundles.local.LocalDagBundle"
    saved = dict(os.environ)
    with BigtableEmulator(history) as emulator:
        os.environ.update({
            **warm_driver_env(base),
            "BIGTABLE_EMULATOR_HOST": emulator.emulator_host,
            "CDC_BT_WAREHOUSE": str(warehouse),
            "AIRFLOW_CDC_STATE_URL": f"sqlite:///{base / 'cdc_state.db'}",
            "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps([
                {"name": "dags-folder", "classpath": local, "kwargs": {}},
                {"name": "bigtable-stall-tests", "classpath": local,
                 "kwargs": {"path": str(bundle)}},
            ]),
        })
        try:
            bag = DagBag(str(bundle))
            assert not bag.import_errors, bag.import_errors
            dag = bag.dags["bigtable_stall_open"]
            emulator.set_now(START + WINDOW + timedelta(seconds=3))  # the lag still holds
            first = dag.test(logical_date=START + WINDOW)
            emulator.set_now(START + 2 * WINDOW + timedelta(seconds=3))  # it caught up
            second = dag.test(logical_date=START + 2 * WINDOW)
            yield {"runs": [first, second], "emulator": emulator, "history": history,
                   "state_url": os.environ["AIRFLOW_CDC_STATE_URL"]}
        finally:
            stop_warm_drivers(base)
            os.environ.clear()
            os.environ.update(saved)


def test_both_windows_complete(runs):
    from airflow.utils.state import DagRunState

    assert [run.state for run in runs["runs"]] == [DagRunState.SUCCESS] * 2


def test_the_stalled_window_is_flagged_unconfirmed_in_the_state_store_and_its_summary(runs):
    from airflow_cdc.state import StateStore

    with StateStore(runs["state_url"]) as store:
        first, second = store.list_windows(STREAM)
    gate = next(ti for ti in runs["runs"][0].get_task_instances() if ti.task_id == "cdc.gate")
    summary = gate.xcom_pull(task_ids="cdc.gate", key="window_summary")

    assert first.completeness_note.startswith("unconfirmed")
    assert summary["completeness"] == "unconfirmed"
    assert not (second.completeness_note or "").startswith("unconfirmed")


def test_late_records_read_by_the_next_window_leave_the_cells_equal_to_the_truth(runs, spark):
    truth = {
        (row, family, qualifier, ts): value
        for row, families in runs["emulator"].true_state(START + 2 * WINDOW).items()
        for family, columns in families.items()
        for qualifier, versions in columns.items() for ts, value in versions.items()
    }
    rows = spark.table("lake.btstall_t.events_cells").collect()

    assert {(bytes(r.row_key), r.family, bytes(r.qualifier), r.cell_ts): bytes(r.value)
            for r in rows} == truth
