"""The completeness gate as an Airflow task (dag.test runs its trigger inline).

``dags/cdc_window_gate.py`` runs only the gate, against a state store prepared here: a
complete window, a stalled one, one that catches up while its gate is deferred, and the same
gate in poke mode.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from airflow_cdc.model import Window, WindowState
from airflow_cdc.state import StateStore

from cdc_airflow_support import T0, TARGET, W1, applied

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "cdc_window_gate.py"
W2 = Window("orders", W1.end, W1.end + timedelta(hours=1))
W3 = Window("orders", W2.end, W2.end + timedelta(hours=1))


def gate_dag(**env):
    """The gate DAG as parsed with ``env`` (its settings are read at parse time)."""
    from airflow.dag_processing.dagbag import DagBag

    os.environ.update(
        {
            "CDC_GATE_STREAM": "orders",
            "CDC_GATE_START": T0.isoformat(),
            "CDC_GATE_POLL_SECONDS": "0.2",
            "CDC_GATE_TABLES": "current.orders",
            "CDC_GATE_TIMEOUT_SECONDS": "600",
            "CDC_GATE_SOFT_FAIL": "false",
            "CDC_GATE_DEFERRABLE": "true",
            **env,
        }
    )
    return DagBag(str(DAG_FILE)).get_dag("cdc_window_gate")


def task_state(run, task_id="window_complete"):
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(
            select(TaskInstance.state).where(
                TaskInstance.run_id == run.run_id, TaskInstance.task_id == task_id
            )
        )


@pytest.fixture(scope="module")
def sandbox(airflow_db, tmp_path_factory):
    """A state store (through $AIRFLOW_CDC_STATE_URL) and the gate DAG's environment."""
    saved = dict(os.environ)
    url = f"sqlite:///{tmp_path_factory.mktemp('gate') / 'cdc_state.db'}"
    os.environ["AIRFLOW_CDC_STATE_URL"] = url
    store = StateStore(url)
    store.migrate()
    store.register_stream("orders", "test", "f")
    yield store
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="module")
def completed(sandbox):
    """W1 applied, then its deferrable gate run through dag.test."""
    applied(sandbox, window=W1)
    return gate_dag().test(logical_date=W1.end)


def test_deferrable_gate_completes_a_window_already_proven_complete_without_deferring(
    completed, audit_events
):
    assert audit_events(completed, "window_complete") == ["running", "success"]
    assert task_state(completed) == "success"


def test_deferrable_gate_marks_the_window_complete(completed, sandbox):
    assert sandbox.get_window("orders", W1.start).state is WindowState.COMPLETE


def test_gate_emits_the_asset_event_unkeyed_with_the_window_and_interval_extra(completed):
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        events = session.execute(
            select(AssetModel.name, AssetEvent.partition_key, AssetEvent.extra)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetEvent.source_run_id == completed.run_id)
        ).all()
    assert events == [
        (
            "lake.current.orders",
            None,  # keyed only with asset_partitions: Airflow queues keyed events for partitioned DAGs only
            {
                "stream": "orders",
                "window_start": "2024-05-01T09:00:00.000000Z",
                "window_end": "2024-05-01T10:00:00.000000Z",
                "low_watermark": "2024-05-01T10:00:00.000000Z",
                "changes": 5,
                "changelog_snapshot_id": 11,
                "target_snapshot_ids": {TARGET: 7},
                "completeness": "evidence",
                "interval_start": "2024-05-01T09:00:00.000000Z",
                "interval_end": "2024-05-01T10:00:00.000000Z",
                "partition_key": "2024-05-01T09:00:00",
            },
        )
    ]


def test_gate_mirrors_the_low_watermark_and_window_progress_into_airflow_state(completed):
    from airflow.utils.session import create_session
    from sqlalchemy import text

    with create_session() as session:
        asset_state = dict(
            session.execute(
                text(
                    "select s.key, s.value from asset_state_store s join asset a "
                    "on a.id = s.asset_id where a.name = 'lake.current.orders'"
                )
            ).all()
        )
        task_state_value = session.execute(
            text(
                "select value from task_state_store where run_id = :run "
                "and task_id = 'window_complete' and key = 'cdc_gate'"
            ),
            {"run": completed.run_id},
        ).scalar()
    assert asset_state["low_watermark"] == '"2024-05-01T10:00:00.000000Z"'
    assert '"state": "COMPLETE"' in task_state_value and '"changes": 5' in task_state_value


def test_stalled_window_fails_the_gate_at_its_timeout_naming_the_partition(sandbox, capfd):
    applied(sandbox, window=W2, b_watermark=W2.start + timedelta(minutes=20))
    run = gate_dag(CDC_GATE_TIMEOUT_SECONDS="1").test(logical_date=W2.end)
    output = capfd.readouterr().out
    assert task_state(run) == "failed"
    assert "AirflowSensorTimeout" in output
    assert "partition b at 2024-05-01T10:20:00.000000Z since" in output
    assert sandbox.get_window("orders", W2.start).state is WindowState.APPLIED


def test_stalled_window_with_soft_fail_skips_the_gate(sandbox):
    run = gate_dag(CDC_GATE_TIMEOUT_SECONDS="1", CDC_GATE_SOFT_FAIL="true").test(
        logical_date=W2.end
    )
    assert task_state(run) == "skipped"
    assert task_state(run, "report") == "skipped"


def test_deferrable_gate_defers_while_a_partition_lags_and_resumes_when_it_catches_up(
    sandbox, audit_events, monkeypatch
):
    # W2's partition b stalled; W3, committed while W2's gate is deferred, carries it to W3's
    # end, past W2's end. W3 is applied right after the trigger's first poll (which can only
    # run once the gate has deferred), so no machine's speed decides whether it defers.
    from airflow_cdc.triggers.gate import CdcWindowCompleteTrigger

    poll, polls = CdcWindowCompleteTrigger._poll, []

    def poll_then_catch_up(trigger):
        status = poll(trigger)
        if not polls:
            applied(store=sandbox, window=W3)
        polls.append(status)
        return status

    monkeypatch.setattr(CdcWindowCompleteTrigger, "_poll", poll_then_catch_up)
    run = gate_dag().test(logical_date=W2.end)
    assert polls, "the gate never deferred to its trigger"
    assert audit_events(run, "window_complete") == ["running", "deferred", "running", "success"]
    assert sandbox.get_window("orders", W2.start).state is WindowState.COMPLETE


def test_poke_mode_gate_completes_the_window_without_deferring(sandbox, audit_events):
    run = gate_dag(CDC_GATE_DEFERRABLE="false").test(logical_date=W3.end)
    assert "deferred" not in audit_events(run, "window_complete")
    assert task_state(run) == "success"
    assert sandbox.get_window("orders", W3.start).state is WindowState.COMPLETE


def test_default_deferrable_setting_makes_the_gate_deferrable(monkeypatch):
    from airflow_cdc.sensors.gate import CdcWindowCompleteSensor

    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    assert CdcWindowCompleteSensor(task_id="gate", stream_id="orders").deferrable is True
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "False")
    assert CdcWindowCompleteSensor(task_id="gate", stream_id="orders").deferrable is False
