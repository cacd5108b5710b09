"""The Datastream plan task under real Airflow (dag.test runs its trigger inline): it waits for
the window's evidence, and it takes a window over from a DAG run that has finished."""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_cdc.model import PartitionPosition, Window
from airflow_cdc.pipeline.protocol import StreamConfig
from airflow_cdc.sources.datastream import PROGRESS_PARTITION

from .support import bundle_dag, dag_bundle_env, mysql

WINDOW = timedelta(seconds=30)


# The plan DAGs of these tests, as files in a DAG bundle of their own (dag.test serializes a
# DAG from its bundle). CDC_TEST_* settings are read when the bundle is parsed.
PLAN_DAGS = """
import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, task
from airflow.timetables.interval import DeltaDataIntervalTimetable

from airflow_cdc.operators.datastream import datastream_stream_config
from airflow_cdc.operators.plan import CdcPlanOperator

for dag_id in ("ds_wait", "ds_first", "ds_second", "ds_third"):
    with DAG(dag_id, schedule=DeltaDataIntervalTimetable(timedelta(seconds=30)),
             start_date=datetime(2025, 1, 1, tzinfo=timezone.utc), catchup=False) as dag:
        plan = CdcPlanOperator(
            task_id="plan",
            stream=datastream_stream_config(
                stream_id="shop", prefix=os.environ["CDC_TEST_PREFIX"],
                settings={"settle_seconds": 0.5, "allowed_lateness_seconds": 2},
            ),
            deferrable=True,
            wait_poke_interval=0.5,
            wait_timeout=120,
        )
        if dag_id == "ds_first":
            @task
            def killed() -> None:
                raise RuntimeError("the extract's worker was killed")

            plan >> killed()
    globals()[dag_id] = dag
"""


@pytest.fixture
def stream_env(airflow_db, tmp_path, monkeypatch):
    return dag_bundle_env(tmp_path, monkeypatch, "plan-wait-tests", PLAN_DAGS)


def plan_dag(dag_id: str, bundle: Path):
    return bundle_dag(bundle, dag_id)


def task_state(run, task_id: str) -> str:
    return next(str(ti.state) for ti in run.get_task_instances() if ti.task_id == task_id)


def test_a_plan_defers_until_the_windows_evidence_lands_then_plans_it(stream_env):
    from airflow.utils.state import DagRunState

    end = datetime.now(timezone.utc).replace(microsecond=0)
    landed: list[datetime] = []

    def writer():  # Datastream writes the evidence 4 s after the window end
        time.sleep(max(0.0, (end - datetime.now(timezone.utc)).total_seconds() + 4))
        read = datetime.now(timezone.utc)
        path = stream_env["prefix"] / "orders" / "a.jsonl"
        from airflow_cdc.sources.datastream.writer import write_json_events

        write_json_events(path, [mysql({"id": 1}, read=read)])
        landed.append(datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc))

    thread = threading.Thread(target=writer)
    thread.start()
    run = plan_dag("ds_wait", stream_env["bundle"]).test(logical_date=end)
    thread.join()

    assert run.state == DagRunState.SUCCESS
    record = stream_env["store"].get_window("shop", end - WINDOW)
    assert record.created_at > landed[0]
    planned = [p.partition_id for p in stream_env["store"].list_partitions("shop")]
    assert str(stream_env["prefix"] / "orders" / "a.jsonl") in planned


def test_a_window_leased_to_a_failed_run_is_taken_over_by_the_next_run(stream_env):
    from airflow.utils.state import DagRunState

    end = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
    # Evidence for the window is there already: the plan does not wait.
    from airflow_cdc.sources.datastream.writer import write_json_events

    path = write_json_events(stream_env["prefix"] / "orders" / "a.jsonl",
                             [mysql({"id": 1}, read=end + timedelta(minutes=1))])
    old = time.time() - 120
    os.utime(path, (old, old))
    first = plan_dag("ds_first", stream_env["bundle"]).test(logical_date=end)
    assert first.state == DagRunState.FAILED
    held = stream_env["store"].get_window("shop", end - WINDOW)
    assert held.lease_owner == f"ds_first/{first.run_id}"

    second = plan_dag("ds_second", stream_env["bundle"]).test(logical_date=end)

    assert second.state == DagRunState.SUCCESS
    record = stream_env["store"].get_window("shop", end - WINDOW)
    assert (record.lease_owner, record.attempt) == (f"ds_second/{second.run_id}", 2)


def test_a_window_leased_to_a_run_airflow_does_not_know_as_finished_stays_held(stream_env):
    end = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
    window = Window("shop", end - WINDOW, end)
    config = StreamConfig("shop", "datastream", {"kind": "datastream", "stream_id": "shop",
                                                  "prefix": str(stream_env["prefix"])})
    stream_env["store"].register_stream("shop", "datastream", config.fingerprint)
    stream_env["store"].plan_window(window, "ds_elsewhere/still-running", 600,
                                    [PartitionPosition(PROGRESS_PARTITION, window.start)])

    run = plan_dag("ds_third", stream_env["bundle"]).test(logical_date=end)

    assert task_state(run, "plan") == "failed"
    record = stream_env["store"].get_window("shop", window.start)
    assert (record.lease_owner, record.attempt) == ("ds_elsewhere/still-running", 1)
