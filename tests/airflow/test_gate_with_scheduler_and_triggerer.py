"""The deferrable gate under real Airflow services: api-server, scheduler, dag-processor, triggerer.

``dags/cdc_window_gate.py`` is triggered for a window whose apply has not committed yet. The
gate must defer (the worker slot is freed), the triggerer must poll the state store, and once
apply commits the task must resume, complete the window and emit the Asset event, which the
scheduler turns into a run of ``dags/cdc_asset_consumer.py``. Everything runs in its own
AIRFLOW_HOME (SQLite, LocalExecutor) with a bounded wait at every step.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from demo.services import AirflowServices
from airflow_cdc.model import Window, WindowState, format_ts
from airflow_cdc.state import StateStore

from cdc_airflow_support import T0, W1, applied

ROOT = Path(__file__).resolve().parents[2]
STEP_TIMEOUT = 240  # seconds for any one step on a loaded 2-core machine


def parse_db_time(text: str):
    """A timestamp as Airflow's SQLite metadata DB stores it (UTC, no offset)."""
    from datetime import datetime, timezone

    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


class Deployment(AirflowServices):
    """A throw-away Airflow with only the gate DAG and its consumer."""

    def __init__(self, base: Path) -> None:
        dags = base / "dags"
        dags.mkdir(parents=True)
        for dag_file in ("cdc_window_gate.py", "cdc_asset_consumer.py"):
            shutil.copy(ROOT / "dags" / dag_file, dags)
        self.state_url = f"sqlite:///{base / 'cdc_state.db'}"
        super().__init__(base, dags, {
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW_CDC_STATE_URL": self.state_url,
            "CDC_GATE_STREAM": "orders",
            "CDC_GATE_START": T0.isoformat(),
            "CDC_GATE_END": W1.end.isoformat(),  # no scheduled runs: only the one triggered
            "CDC_GATE_POLL_SECONDS": "1",
            "CDC_GATE_TABLES": "current.orders",
            "CDC_CONSUMER_TABLE": "current.orders",
        })


def wait_for(what: str, check, deployment: Deployment, timeout: float = STEP_TIMEOUT):
    return deployment.wait_for(what, check, timeout)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    base = tmp_path_factory.mktemp("deployment")
    deployment = Deployment(base)
    store = StateStore(deployment.state_url)
    store.migrate()
    store.register_stream("orders", "test", "f")
    deployment.start()
    try:
        wait_for(
            "the dag-processor to register both DAGs",
            lambda: len(deployment.query(
                "select 1 from dag where dag_id in ('cdc_window_gate', 'cdc_asset_consumer')"
            )) == 2,
            deployment,
        )
        deployment.airflow(
            "dags", "trigger", "cdc_window_gate", "--logical-date", W1.end.isoformat(),
            "--run-id", "gate_under_test",
        )
        # A manual run's data interval ends when it was triggered: the window is planned,
        # extracted and committed for that interval once the run exists.
        start, end = wait_for(
            "the triggered run's data interval",
            lambda: deployment.query(
                "select data_interval_start, data_interval_end from dag_run "
                "where run_id = 'gate_under_test'"
            ),
            deployment,
        )[0]
        window = Window("orders", parse_db_time(start), parse_db_time(end))
        applied(store, window=window, apply=False)  # committed, apply still running
        deferred = wait_for(
            "the gate task to defer",
            lambda: deployment.query(
                "select ti.state, t.classpath from task_instance ti "
                "join trigger t on t.id = ti.trigger_id where ti.run_id = 'gate_under_test' "
                "and ti.task_id = 'window_complete' and ti.state = 'deferred'"
            ),
            deployment,
        )
        store.mark_applied(window, "run", {"lake.current.orders": 7})
        final = wait_for(
            "the DAG run to finish",
            lambda: deployment.query(
                "select state from dag_run where run_id = 'gate_under_test' "
                "and state in ('success', 'failed')"
            ),
            deployment,
        )
        consumed = wait_for(
            "the asset consumer's run to finish",
            lambda: deployment.query(
                "select r.state, x.value from dag_run r left join xcom x on x.run_id = r.run_id "
                "and x.dag_id = r.dag_id and x.key = 'return_value' "
                "where r.dag_id = 'cdc_asset_consumer' and r.state in ('success', 'failed')"
            ),
            deployment,
        )
        yield {
            "store": store, "deployment": deployment, "deferred": deferred, "final": final,
            "window": window, "consumed": consumed,
        }
    finally:
        deployment.stop()


def test_gate_deferred_to_the_packaged_trigger_while_apply_was_running(deployment):
    assert deployment["deferred"] == [
        ("deferred", "airflow_cdc.triggers.gate.CdcWindowCompleteTrigger")
    ]


def test_triggerer_resumed_the_gate_once_apply_committed_and_the_run_succeeded(deployment):
    assert deployment["final"] == [("success",)]
    window = deployment["window"]
    assert deployment["store"].get_window("orders", window.start).state is WindowState.COMPLETE


def test_resumed_gate_emitted_the_asset_event_with_the_window_extra(deployment):
    rows = deployment["deployment"].query(
        "select a.name, e.extra from asset_event e join asset a on a.id = e.asset_id "
        "where e.source_run_id = 'gate_under_test'"
    )
    window = deployment["window"]
    assert [(name, json.loads(extra)) for name, extra in rows] == [
        (
            "lake.current.orders",
            {
                "stream": "orders",
                "window_start": format_ts(window.start),
                "window_end": format_ts(window.end),
                "low_watermark": format_ts(window.end),
                "changes": 5,
                "changelog_snapshot_id": 11,
                "target_snapshot_ids": {"lake.current.orders": 7},
                "completeness": "evidence",
                "interval_start": format_ts(window.start),
                "interval_end": format_ts(window.end),
                "partition_key": f"{window.start:%Y-%m-%dT%H:%M:%S}",
            },
        )
    ]


def test_the_asset_event_runs_the_consumer_dag_which_reads_the_window_from_its_extra(deployment):
    window = deployment["window"]
    (state, value), = deployment["consumed"]
    assert state == "success"
    assert json.loads(value) == {
        "windows": [{"window_end": format_ts(window.end), "snapshot_id": 7}]
    }
