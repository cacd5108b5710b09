"""Fixtures for the Spark layer: a real standalone Spark cluster on 127.0.0.1.

Tables the submitted jobs write are read back through the suite's one session (``spark``,
tests/conftest.py), each warehouse registered as a catalog of its own (support.open_warehouse).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from .support import free_port, spark_class


@dataclass(frozen=True)
class StandaloneCluster:
    master_url: str
    port: int
    webui_port: int

    def state(self) -> dict:
        """The master's JSON status page: workers, active and completed applications."""
        url = f"http://127.0.0.1:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.load(answer)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory) -> Iterator[StandaloneCluster]:
    """A Spark standalone master and one worker (1 core, 1 GB) on 127.0.0.1, stopped at the end."""
    folder = tmp_path_factory.mktemp("standalone")
    port, webui_port, worker_webui_port = free_port(), free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(folder)}
    started: list[subprocess.Popen] = []

    def start(log_name: str, *args: str) -> None:
        with (folder / log_name).open("w") as log_file:
            started.append(
                subprocess.Popen(
                    [spark_class(), *args],
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,  # own process group: stopped with what it forks
                )
            )

    cluster = StandaloneCluster(f"spark://127.0.0.1:{port}", port, webui_port)
    try:
        start(
            "master.log", "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(webui_port),
        )
        start(
            "worker.log", "org.apache.spark.deploy.worker.Worker", cluster.master_url,
            "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
            "--webui-port", str(worker_webui_port), "--work-dir", str(folder / "work"),
        )
        deadline = time.monotonic() + 120  # a readiness limit, not an assertion on speed
        while True:
            try:
                if any(w.get("state") == "ALIVE" for w in cluster.state().get("workers", [])):
                    break
            except OSError:
                pass  # the master's web UI is not up yet
            exited = [p.args[1] for p in started if p.poll() is not None]
            if exited or time.monotonic() > deadline:
                logs = "\n".join(
                    (folder / name).read_text()[-3000:] for name in ("master.log", "worker.log")
                )
                raise RuntimeError(f"standalone Spark did not come up (exited: {exited}):\n{logs}")
            time.sleep(0.5)
        yield cluster
    finally:
        for process in reversed(started):
            _stop(process)
