"""A throw-away Airflow deployment: api-server, scheduler, dag-processor and triggerer.

For runs on a real clock (``make live-datastream``): its own AIRFLOW_HOME (SQLite,
LocalExecutor), free ports, DAGs unpaused at creation, fast heartbeats, every service's
output in a log file, and a bounded wait that shows the logs' tails when it times out.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
AIRFLOW = str(Path(sys.executable).parent / "airflow")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AirflowServices:
    """Airflow's services on one machine, for the DAGs in ``dags_folder``."""

    def __init__(self, base: Path, dags_folder: Path, env: Mapping[str, str]) -> None:
        self.base = base
        self.logs = base / "logs-of-services"
        self.logs.mkdir(parents=True, exist_ok=True)
        api_port = self.api_port = free_port()
        self.db = base / "home" / "airflow.db"
        # Its own configuration only: none of the caller's Airflow settings or connections.
        inherited = {
            k: v for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_"))
        }
        self.env = {
            **inherited,
            "AIRFLOW_HOME": str(base / "home"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__API__WORKERS": "1",
            # One api-server worker answers every task's calls; on a small machine busy with
            # Spark a call can take longer than Airflow's default 5 s, and a task whose start
            # call times out fails before it runs. Waiting longer changes no result.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            **env,
        }
        self.processes: list[subprocess.Popen] = []

    def airflow(self, *args: str) -> str:
        proc = subprocess.run(
            [AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=300
        )
        if proc.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
        return proc.stdout

    def start(self, services: tuple[str, ...] = SERVICES) -> None:
        self.airflow("db", "migrate")
        for service in services:
            log = open(self.logs / f"{service}.log", "w")  # noqa: SIM115 - lives with the process
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

    def query(self, sql: str, *params) -> list:
        """Rows of a query on Airflow's metadata DB (empty before ``db migrate`` made it)."""
        if not self.db.exists():
            return []
        with sqlite3.connect(self.db, timeout=30) as conn:
            return conn.execute(sql, params).fetchall()

    def log_tails(self, lines: int = 15) -> str:
        return "\n".join(
            f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
            for log in sorted(self.logs.glob("*.log"))
        )

    def wait_for(self, what: str, check: Callable[[], object], timeout: float, every: float = 1.0):
        """Poll ``check`` until it returns something truthy; fail naming ``what`` and the logs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(every)
        raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}\n{self.log_tails()}")
