"""Recovery after a failed run, under real Airflow (dag.test): a window whose lease holder is a
DAG run Airflow no longer has is taken over by the next run of the window, at once."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone

import pytest

WINDOW = timedelta(seconds=30)

# The DAG of these tests, a file in a DAG bundle of its own (dag.test serializes a DAG from its
# bundle): a plan, then a task that fails as a killed extract would, so the run fails holding
# the window's lease.
TAKEOVER_DAGS = """
import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, task
from airflow.timetables.interval import DeltaDataIntervalTimetable

from airflow_cdc.operators.datastream import datastream_stream_config
from airflow_cdc.operators.window import CdcPlanOperator

with DAG("takeover", schedule=DeltaDataIntervalTimetable(timedelta(seconds=30)),
         start_date=datetime(2025, 1, 1, tzinfo=timezone.utc), catchup=False) as dag:
    plan = CdcPlanOperator(
        task_id="plan",
        stream=datastream_stream_config(
            stream_id="shop", prefix=os.environ["CDC_TEST_PREFIX"],
            settings={"settle_seconds": 0.5, "allowed_lateness_seconds": 2},
        ),
        deferrable=False,
        wait_poke_interval=0.5,
        wait_timeout=60,
    )

    @task
    def killed() -> None:
        raise RuntimeError("the extract's worker was killed")

    plan >> killed()
"""


@pytest.fixture
def takeover_env(airflow_db, tmp_path, monkeypatch):
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
    (bundle / "takeover_dags.py").write_text(TAKEOVER_DAGS)
    local = "airflow.dag_processing.bundles.local.LocalDagBundle"
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps([
        {"name": "dags-folder", "classpath": local, "kwargs": {}},
        {"name": "takeover-tests", "classpath": local, "kwargs": {"path": str(bundle)}},
    ]))
    store = StateStore(f"sqlite:///{state_path}")
    store.migrate()
    return {"prefix": prefix, "store": store, "bundle": bundle}


def takeover_dag(bundle):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(bundle))
    assert not bag.import_errors, bag.import_errors
    return bag.dags["takeover"]


def task_state(run, task_id: str) -> str:
    return next(str(ti.state) for ti in run.get_task_instances() if ti.task_id == task_id)


def test_a_window_leased_to_a_deleted_dag_run_is_taken_over_by_the_rerun_of_its_date(takeover_env):
    from airflow_cdc.sources.datastream.writer import write_json_events
    from tests.datastream.support import mysql

    end = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
    path = write_json_events(takeover_env["prefix"] / "orders" / "a.jsonl",
                             [mysql({"id": 1}, read=end + timedelta(minutes=1))])
    old = time.time() - 120
    os.utime(path, (old, old))
    dag = takeover_dag(takeover_env["bundle"])
    first = dag.test(logical_date=end)
    held = takeover_env["store"].get_window("shop", end - WINDOW)
    assert (task_state(first, "plan"), held.lease_owner) == ("success", f"takeover/{first.run_id}")

    # dag.test, as `airflow dags test`, deletes the earlier run of the same logical date.
    again = dag.test(logical_date=end)

    assert task_state(again, "plan") == "success"
    record = takeover_env["store"].get_window("shop", end - WINDOW)
    assert (record.lease_owner, record.attempt) == (f"takeover/{again.run_id}", 2)
