"""Run the Dataproc emulator in-process: a gRPC server on 127.0.0.1 (port 0 = any free port).

    with DataprocEmulator(master="spark://127.0.0.1:7077", work_dir=tmp) as emulator:
        jobs = emulator.job_client()          # google.cloud.dataproc_v1.JobControllerClient
        batches = emulator.batch_client()     # BatchControllerClient (create_batch().result())
        emulator.emulator_host                # "127.0.0.1:<port>", for DATAPROC_EMULATOR_HOST

Stopping kills every driver still running (SIGTERM, then SIGKILL after the grace) and marks
its job CANCELLED / batch CANCELLED; the work folder (driver outputs) stays.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from concurrent import futures
from pathlib import Path

import grpc

from airflow_cdc_emulators.listening import EmulatorStartError, listen

from .batches import BatchStore
from .clients import DATAPROC_EMULATOR_HOST, dataproc_client
from .driver import DriverSetup
from .jobs import JobStore
from .operations import OperationStore
from .servicer import DataprocServicer
from .workload import find_spark_submit

DEFAULT_CLUSTERS = ("cdc-cluster",)
DEFAULT_MASTER = "local[2]"
DEFAULT_KILL_GRACE_SECONDS = 10.0


def driver_environment(base: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """The drivers' environment: ``base`` + ``extra``; Python and bind address set if unset.

    Drivers and executors run this interpreter (``PYSPARK_PYTHON``) and bind 127.0.0.1
    (``SPARK_LOCAL_IP``: a standalone master on 127.0.0.1 must reach them there).
    """
    env = {**base, **extra}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


class DataprocEmulator:
    """``google.cloud.dataproc.v1`` JobController and BatchController on a local Spark master.

    ``clusters`` are the names jobs may be placed on (in any project and region); every job and
    batch runs ``spark-submit --master <master>`` (``local[2]``, or a standalone
    ``spark://127.0.0.1:7077``). ``work_dir`` holds the driver outputs (default: a new temporary
    folder, kept after stop). ``gcs_dir`` makes ``gs://bucket/path`` mean
    ``<gcs_dir>/bucket/path``. ``driver_env`` is added to this process's environment for the
    drivers.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        master: str = DEFAULT_MASTER,
        clusters: tuple[str, ...] | list[str] = DEFAULT_CLUSTERS,
        work_dir: str | Path | None = None,
        gcs_dir: str | Path | None = None,
        spark_submit: str | None = None,
        driver_env: Mapping[str, str] | None = None,
        kill_grace_seconds: float = DEFAULT_KILL_GRACE_SECONDS,
        max_workers: int = 16,
    ) -> None:
        if not clusters:
            raise ValueError("clusters is empty: name at least one cluster, e.g. ['cdc-cluster']")
        if not master:
            raise ValueError("master is empty: use local[2] or spark://127.0.0.1:7077")
        self.host = host
        self.master = master
        self.clusters = tuple(clusters)
        self.work_dir = Path(
            work_dir if work_dir is not None else tempfile.mkdtemp(prefix="dataproc-emulator-")
        ).resolve()
        self.gcs_dir = Path(gcs_dir).resolve() if gcs_dir is not None else None
        self._requested_port = port
        self._max_workers = max_workers
        setup = DriverSetup(
            spark_submit=find_spark_submit(spark_submit),
            master=master,
            env=driver_environment(os.environ, driver_env or {}),
            kill_grace_seconds=kill_grace_seconds,
        )
        self.operations = OperationStore()
        self.jobs = JobStore(
            clusters=self.clusters,
            work_dir=self.work_dir,
            setup=setup,
            operations=self.operations,
            gcs_dir=self.gcs_dir,
        )
        self.batches = BatchStore(
            work_dir=self.work_dir, setup=setup, operations=self.operations, gcs_dir=self.gcs_dir
        )
        self.servicer = DataprocServicer(self.jobs, self.batches, self.operations)
        self._server: grpc.Server | None = None
        self._clients: list = []
        self.port: int | None = None

    # -- endpoint -------------------------------------------------------------------------------
    @property
    def emulator_host(self) -> str:
        """``host:port``, the value for ``DATAPROC_EMULATOR_HOST``."""
        if self.port is None:
            raise EmulatorStartError(
                "the emulator is not started: call start() or use it as a context manager"
            )
        return f"{self.host}:{self.port}"

    def environ(self) -> dict[str, str]:
        """``{"DATAPROC_EMULATOR_HOST": "<host>:<port>"}`` for a client process."""
        return {DATAPROC_EMULATOR_HOST: self.emulator_host}

    def client(self, client_class: type):
        """Any ``google.cloud.dataproc_v1`` client class connected to the emulator."""
        client = dataproc_client(client_class, self.emulator_host)
        if not client_class.__name__.endswith("AsyncClient"):  # async channels close in their loop
            self._clients.append(client)
        return client

    def job_client(self):
        """A ``google.cloud.dataproc_v1.JobControllerClient`` on a plain-text channel."""
        from google.cloud.dataproc_v1 import JobControllerClient

        return self.client(JobControllerClient)

    def batch_client(self):
        """A ``google.cloud.dataproc_v1.BatchControllerClient`` on a plain-text channel."""
        from google.cloud.dataproc_v1 import BatchControllerClient

        return self.client(BatchControllerClient)

    # -- drivers --------------------------------------------------------------------------------
    def job_driver_pid(self, project_id: str, region: str, job_id: str) -> int | None:
        """The process (group) id of a job's spark-submit, None before it started."""
        return self.jobs.driver_pid(project_id, region, job_id)

    def batch_driver_pid(self, name: str) -> int | None:
        """The process (group) id of a batch's spark-submit, None before it started."""
        return self.batches.driver_pid(name)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> DataprocEmulator:
        if self._server is not None:
            return self
        self.work_dir.mkdir(parents=True, exist_ok=True)
        # No SO_REUSEPORT: a second server on a busy port must fail, not share the port.
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._max_workers),
            handlers=self.servicer.handlers(),
            options=[("grpc.so_reuseport", 0)],
        )
        port = listen(server, self.host, self._requested_port)
        server.start()
        self._server, self.port = server, port
        return self

    def stop(self, grace: float | None = None) -> None:
        """Kill every running driver (its job or batch ends CANCELLED), then stop serving."""
        runs = self.jobs.cancel_all() + self.batches.cancel_all()
        for run in runs:
            run.join()
        for client in self._clients:
            client.transport.close()
        self._clients.clear()
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None

    def wait(self) -> None:
        """Block until the server stops (used by the command line)."""
        if self._server is not None:
            self._server.wait_for_termination()

    def __enter__(self) -> DataprocEmulator:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
