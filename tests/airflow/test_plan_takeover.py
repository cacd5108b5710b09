"""Recovery after a failed run, under real Airflow (dag.test): a window whose lease holder is a
DAG run Airflow no longer has is taken over by the next run of the window, at once."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone

import pytest

from tests.datastream.support import bundle_dag, dag_bundle_env

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
from airflow_cdc.operators.plan import CdcPlanOperator

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
    return dag_bundle_env(tmp_path, monkeypatch, "takeover-tests", TAKEOVER_DAGS)


def takeover_dag(bundle):
    return bundle_dag(bundle, "takeover")


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
