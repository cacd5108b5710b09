"""The deferrable gate under real Airflow services: api-server, scheduler, dag-processor, triggerer.

``dags/cdc_window_gate.py`` is triggered for a window whose apply has not committed yet. The
gate must defer (the worker slot is freed), the triggerer must poll the state store, and once
apply commits the task must resume, complete the window and emit the Asset event, which the
scheduler turns into a run of ``dags/cdc_asset_consumer.py``. Everything runs in its own
AIRFLOW_HOME (SQLite, LocalExecutor) with a bounded wait at every step.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_cdc.model import Window, WindowState, format_ts
from airflow_cdc.state import StateStore

from cdc_airflow_support import T0, W1, applied

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).parent / "airflow")
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
STEP_TIMEOUT = 240  # seconds for any one step on a loaded 2-core machine


def parse_db_time(text: str):
    """A timestamp as Airflow's SQLite metadata DB stores it (UTC, no offset)."""
    from datetime import datetime, timezone

    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(what: str, check, logs: Path, timeout: float = STEP_TIMEOUT):
    """Poll ``check`` until it returns something truthy; fail naming ``what`` and the logs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    tails = "\n".join(
        f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        for log in sorted(logs.glob("*.log"))
    )
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{tails}")


class Deployment:
    """A throw-away Airflow with only the gate DAG, and the metadata DB it writes."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.logs = base / "logs-of-services"
        self.logs.mkdir(parents=True)
        dags = base / "dags"
        dags.mkdir()
        for dag_file in ("cdc_window_gate.py", "cdc_asset_consumer.py"):
            shutil.copy(ROOT / "dags" / dag_file, dags)
        api_port = free_port()
        self.state_url = f"sqlite:///{base / 'cdc_state.db'}"
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": str(base / "home"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW_CDC_STATE_URL": self.state_url,
            "CDC_GATE_STREAM": "orders",
            "CDC_GATE_START": T0.isoformat(),
            "CDC_GATE_END": W1.end.isoformat(),  # no scheduled runs: only the one triggered
            "CDC_GATE_POLL_SECONDS": "1",
            "CDC_GATE_TABLES": "current.orders",
            "CDC_CONSUMER_TABLE": "current.orders",
        }
        self.processes: list[subprocess.Popen] = []
        self.db = f"{base / 'home' / 'airflow.db'}"

    def airflow(self, *args: str) -> str:
        proc = subprocess.run(
            [AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, f"airflow {' '.join(args)} failed:\n{proc.stderr[-3000:]}"
        return proc.stdout

    def start(self) -> None:
        self.airflow("db", "migrate")
        for service in SERVICES:
            log = open(self.logs / f"{service}.log", "w")
            self.processes.append(
                subprocess.Popen(
                    [AIRFLOW, service], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def stop(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.processes:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)

    def query(self, sql: str, *params):
        import sqlite3

        with sqlite3.connect(self.db, timeout=30) as conn:
            return conn.execute(sql, params).fetchall()


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
            )) == 2
            if Path(deployment.db).exists() else None,
            deployment.logs,
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
            deployment.logs,
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
            deployment.logs,
        )
        store.mark_applied(window, "run", {"lake.current.orders": 7})
        final = wait_for(
            "the DAG run to finish",
            lambda: deployment.query(
                "select state from dag_run where run_id = 'gate_under_test' "
                "and state in ('success', 'failed')"
            ),
            deployment.logs,
        )
        consumed = wait_for(
            "the asset consumer's run to finish",
            lambda: deployment.query(
                "select r.state, x.value from dag_run r left join xcom x on x.run_id = r.run_id "
                "and x.dag_id = r.dag_id and x.key = 'return_value' "
                "where r.dag_id = 'cdc_asset_consumer' and r.state in ('success', 'failed')"
            ),
            deployment.logs,
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
