"""What the race tests share: DAG runs started as OS processes, and what they left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

RUNNER = Path(__file__).with_name("run_dag.py")
RUN_TIMEOUT = 15 * 60


@dataclass
class DagRunProcess:
    """A DAG run in its own OS process; ``log`` holds everything it printed."""

    process: subprocess.Popen
    log: Path

    def result(self) -> dict:
        """The run's summary (run_id, state, tasks) once the process has ended."""
        self.process.wait(timeout=RUN_TIMEOUT)
        lines = [line for line in self.output().splitlines() if line.startswith('{"dag_id"')]
        assert lines, f"the DAG run printed no summary (status {self.process.returncode}):\n" \
                      f"{self.output()[-4000:]}"
        return json.loads(lines[-1])

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def sync_dags(env: dict) -> None:
    """Write the DAGs folder's DAGs (configured by ``env``) to Airflow's metadata DB."""
    subprocess.run([sys.executable, str(RUNNER), "--sync"], env={**os.environ, **env},
                   check=True, stdout=subprocess.DEVNULL, timeout=RUN_TIMEOUT)


def start_dag_run(env: dict, dag_id: str, logical_date: datetime, log: Path) -> DagRunProcess:
    """Start one DAG run of ``dag_id`` at ``logical_date`` (``run_dag.py``) with ``env`` added."""
    sink = open(log, "w")
    process = subprocess.Popen(
        [sys.executable, str(RUNNER), dag_id, logical_date.isoformat()],
        env={**os.environ, **env}, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
    )
    sink.close()
    return DagRunProcess(process, log)


def wait_for_files(paths: list[Path], processes: list[subprocess.Popen], timeout: float = 120) -> None:
    """Wait until every path exists (each process signals it is ready); fail if one died."""
    import time

    deadline = time.monotonic() + timeout
    while not all(path.exists() for path in paths):
        dead = [p for p in processes if p.poll() is not None]
        assert not dead, f"a process ended before it was ready: {dead[0].communicate()}"
        assert time.monotonic() < deadline, f"waited {timeout} s for {paths}"
        time.sleep(0.01)
