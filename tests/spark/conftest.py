"""Fixtures for the Spark layer: a reader session for Iceberg tables, a standalone cluster."""

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

from airflow_cdc.spark.iceberg import IcebergCatalog, local_session, provision_iceberg_jars

from .support import TEST_SPARK_CONF, free_port, spark_class


@pytest.fixture(scope="session")
def iceberg_jars() -> list[str]:
    return provision_iceberg_jars()


@pytest.fixture(scope="session")
def reader(tmp_path_factory, iceberg_jars):
    """A Spark session in the test process that reads the tables submitted jobs write."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession()
    boot = IcebergCatalog(name="reader_boot", warehouse=str(tmp_path_factory.mktemp("reader")))
    spark = local_session(boot, "tests-spark-reader", extra_conf=TEST_SPARK_CONF)
    yield spark
    if existing is None:  # a session someone else started is theirs to stop
        spark.stop()
        # Close the JVM gateway now, while log streams are open: py4j otherwise logs from
        # __del__ at interpreter exit, into streams pytest (and Airflow's logging) closed.
        gateway = SparkContext._gateway
        if gateway is not None:
            gateway.shutdown()
            SparkContext._gateway = None
            SparkContext._jvm = None


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
