"""``make demo-cluster``: the Spanner demo with its Spark jobs on a cluster, through Dataproc.

What runs where, as on Cloud Composer with Dataproc, on this one machine:

1. A Spark standalone cluster (:class:`StandaloneSpark`: a master and a worker on 127.0.0.1).
2. The Dataproc stand-in (:mod:`airflow_cdc_emulators.dataproc`) serving the real
   ``google.cloud.dataproc.v1`` API, whose cluster ``cdc-cluster`` submits every job to that
   master (client mode: the driver runs beside the stand-in, executors on the worker).
3. A GCS emulator (``gcp-storage-emulator``): the work root is ``gs://cdc-work/demo``, so plan,
   outcome and result files, and the staged entry points, py-files archive and jars, live
   there; the Airflow side and the Spark side share nothing else but the warehouse (the
   catalog's, as on a real deployment).
4. ``dags/spanner_change_stream_to_iceberg.py`` through real Airflow (``dag.test``) with
   ``CDC_DATAPROC_CLUSTER`` set: extract and apply are Dataproc jobs submitted through the
   google provider's ``DataprocHook`` (:class:`~airflow_cdc.hooks.dataproc.CdcDataprocHook`),
   waited for in the triggerer (deferrable).

Then the targets are compared with the emulator's truth (as ``make demo`` does) and the
master's list of completed applications proves the jobs ran there. Last line:
``demo-cluster: OK windows=<n> jobs=<n> master=spark://127.0.0.1:<port> work_root=gs://...
target_rows=<n> mismatches=0``. Everything lives under ``.demo-cluster/``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

from demo.spanner import compare, prepare_environment, run_windows

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "cdc-work"
CLUSTER = "cdc-cluster"
REGION = "europe-west1"
PROJECT = "demo-project"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class StandaloneSpark:
    """A Spark standalone master and one worker on 127.0.0.1 (pyspark's own scripts)."""

    def __init__(self, folder: Path, cores: int = 2, memory: str = "2g") -> None:
        self.folder = folder
        self.cores, self.memory = cores, memory
        self.port, self.webui_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self._processes: list[subprocess.Popen] = []

    def state(self) -> dict:
        """The master's JSON status page: workers, active and completed applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=5) as answer:
            return json.load(answer)

    def _start(self, log_name: str, *args: str) -> None:
        import pyspark

        spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(self.folder)}
        with (self.folder / log_name).open("w") as log:
            self._processes.append(subprocess.Popen(
                [str(spark_class), *args], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, start_new_session=True))

    def __enter__(self) -> StandaloneSpark:
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._start("master.log", "org.apache.spark.deploy.master.Master", "--host",
                        "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.webui_port))
            self._start("worker.log", "org.apache.spark.deploy.worker.Worker", self.master_url,
                        "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                        "--webui-port", str(free_port()), "--work-dir", str(self.folder / "work"))
            deadline = time.monotonic() + 120  # a readiness limit, not a speed assertion
            while True:
                try:
                    if any(w.get("state") == "ALIVE" for w in self.state().get("workers", [])):
                        return self
                except OSError:
                    pass  # the web UI is not up yet
                if time.monotonic() > deadline or any(p.poll() is not None for p in self._processes):
                    raise RuntimeError(f"standalone Spark did not come up: see {self.folder}/*.log")
                time.sleep(0.5)
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc_info) -> None:
        for process in reversed(self._processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


class GcsEmulator:
    """``gcp-storage-emulator`` in memory on 127.0.0.1 with one bucket. A client that drops a
    connection early (gcsfs does after a HEAD) is not an error worth a traceback on stderr."""

    def __init__(self, bucket: str) -> None:
        self.bucket = bucket
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = None

    def __enter__(self) -> GcsEmulator:
        from gcp_storage_emulator.server import create_server

        self._server = create_server("127.0.0.1", self.port, in_memory=True,
                                     default_bucket=self.bucket)
        self._server.start()
        httpd = self._server._api._httpd
        report = httpd.handle_error

        def handle_error(request, client_address):
            if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                report(request, client_address)

        httpd.handle_error = handle_error
        return self

    def __exit__(self, *exc_info) -> None:
        self._server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=str(ROOT / ".demo-cluster"), help="working folder")
    parser.add_argument("--hours", type=float, default=1.0, help="history length")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    base = Path(args.base).resolve()
    prepare_environment(base)
    work_root = f"gs://{BUCKET}/demo"

    from airflow_cdc_emulators.dataproc import DataprocEmulator
    from airflow_cdc_emulators.spanner import SpannerChangeStreamEmulator, generate_history

    started = time.monotonic()
    history = generate_history(seed=args.seed, duration=timedelta(hours=args.hours))
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True,
                   stdout=subprocess.DEVNULL)
    with GcsEmulator(BUCKET) as gcs, StandaloneSpark(base / "spark") as spark, \
            SpannerChangeStreamEmulator(history) as spanner:
        os.environ.update({"STORAGE_EMULATOR_HOST": gcs.url,
                           "SPANNER_EMULATOR_HOST": spanner.emulator_host})
        print(f"demo-cluster: standalone Spark at {spark.master_url}, GCS emulator at {gcs.url}, "
              f"work root {work_root}", flush=True)
        with DataprocEmulator(master=spark.master_url, clusters=[CLUSTER],
                              work_dir=base / "dataproc",
                              driver_env={"STORAGE_EMULATOR_HOST": gcs.url,
                                          "PYSPARK_PYTHON": sys.executable}) as dataproc:
            os.environ.update({
                "DATAPROC_EMULATOR_HOST": dataproc.emulator_host,
                "AIRFLOW_CDC_WORK_ROOT": work_root,
                "CDC_DATAPROC_CLUSTER": CLUSTER, "CDC_DATAPROC_REGION": REGION,
                "CDC_DATAPROC_PROJECT": PROJECT,
                "CDC_SPANNER_STREAM": history.stream_name,
                "CDC_START": history.created_at.isoformat(),
                "CDC_DEFERRABLE": "true",
            })
            windows = run_windows(history)
            jobs = list(dataproc.job_client().list_jobs(project_id=PROJECT, region=REGION))
        applications = spark.state().get("completedapps", [])
    result = compare(base, history)
    local_work = base / "work"
    for job in jobs:
        print(f"demo-cluster: Dataproc job {job.reference.job_id}: {job.status.state.name}, "
              f"driver output {job.driver_output_resource_uri}", flush=True)
    print(f"demo-cluster: the master {spark.master_url} completed {len(applications)} "
          f"applications: {sorted(a.get('name') for a in applications)}", flush=True)
    ran_on_master = len(applications) >= len(jobs) > 0 and all(
        j.status.state.name == "DONE" for j in jobs)
    nothing_local = not local_work.exists()
    print(f"demo-cluster: {windows} windows in {time.monotonic() - started:.0f} s; hand-over "
          f"files only under {work_root} (no local work folder: {nothing_local})", flush=True)
    ok = result["mismatches"] == 0 and ran_on_master and nothing_local
    print(f"demo-cluster: {'OK' if ok else 'FAILED'} windows={windows} jobs={len(jobs)} "
          f"master={spark.master_url} work_root={work_root} "
          f"target_rows={result['target_rows']} mismatches={result['mismatches']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
