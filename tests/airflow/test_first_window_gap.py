"""No interval of the schedule is left without a window (rule: a stream's first window refuses
to start after an interval whose plan did not succeed), under real Airflow (dag.test)."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone

import pytest

from tests.datastream.support import bundle_dag, dag_bundle_env

from airflow_cdc.model import format_ts

WINDOW = timedelta(seconds=30)

# The DAG of these tests, a file in a DAG bundle of its own (dag.test serializes a DAG from its
# bundle): one plan task whose wait for the source's evidence gives up after 3 seconds.
GAP_DAGS = """
import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG
from airflow.timetables.interval import DeltaDataIntervalTimetable

from airflow_cdc.operators.datastream import datastream_stream_config
from airflow_cdc.operators.plan import CdcPlanOperator

with DAG("gap", schedule=DeltaDataIntervalTimetable(timedelta(seconds=30)),
         start_date=datetime(2025, 1, 1, tzinfo=timezone.utc), catchup=False) as dag:
    CdcPlanOperator(
        task_id="plan",
        stream=datastream_stream_config(
            stream_id="shop", prefix=os.environ["CDC_TEST_PREFIX"],
            settings={"settle_seconds": 0.5, "allowed_lateness_seconds": 2},
        ),
        deferrable=False,
        wait_poke_interval=0.5,
        wait_timeout=3,
    )
"""


@pytest.fixture
def gap_env(airflow_db, tmp_path, monkeypatch):
    return dag_bundle_env(tmp_path, monkeypatch, "gap-tests", GAP_DAGS)


def gap_dag(bundle):
    return bundle_dag(bundle, "gap")


def task_state(run, task_id: str) -> str:
    return next(str(ti.state) for ti in run.get_task_instances() if ti.task_id == task_id)


def settled_event(prefix, read: datetime) -> None:
    """One Datastream event read at ``read``, in a file old enough to be settled."""
    from airflow_cdc.sources.datastream.writer import write_json_events
    from tests.datastream.support import mysql

    path = write_json_events(prefix / "orders" / "a.jsonl", [mysql({"id": 1}, read=read)])
    old = time.time() - 120
    os.utime(path, (old, old))


def test_a_first_window_after_an_interval_whose_plan_timed_out_is_refused_naming_it(
        gap_env, capfd):
    first_end = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
    dag = gap_dag(gap_env["bundle"])
    timed_out = dag.test(logical_date=first_end)  # no evidence yet: the wait gives up
    assert task_state(timed_out, "plan") == "failed"
    settled_event(gap_env["prefix"], first_end + timedelta(minutes=1))

    capfd.readouterr()
    refused = dag.test(logical_date=first_end + WINDOW)

    assert task_state(refused, "plan") == "failed"
    assert gap_env["store"].list_windows("shop") == []
    shown = "".join(capfd.readouterr())
    interval = (f"[{format_ts(first_end - WINDOW)}, {format_ts(first_end)})")
    assert (f"WindowOrderError: window {format_ts(first_end)}/{format_ts(first_end + WINDOW)} "
            f"of 'shop' would be the stream's first window, but the interval before it, "
            f"{interval}, has no window: its plan task 'plan' in DAG run "
            f"'{timed_out.run_id}' is failed") in shown
    assert f"Clear 'plan' of '{timed_out.run_id}' so it plans {interval} first" in shown


def test_a_reset_streams_first_window_after_a_planned_interval_is_planned(gap_env):
    first_end = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
    settled_event(gap_env["prefix"], first_end + timedelta(minutes=1))
    dag = gap_dag(gap_env["bundle"])
    planned = dag.test(logical_date=first_end)
    assert task_state(planned, "plan") == "success"
    gap_env["store"].reset_stream("shop")

    again = dag.test(logical_date=first_end + WINDOW)

    assert task_state(again, "plan") == "success"
    assert [w.start for w in gap_env["store"].list_windows("shop")] == [first_end]
