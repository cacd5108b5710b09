"""A runner that keeps one Spark driver warm on this machine and runs job after job in it.

:class:`LocalSparkRunner` starts a JVM, a SparkSession, the Iceberg catalog and Python
workers for every job; for a small window that start, and the JIT compiling the same plans
again, is most of the window's cost. :class:`WarmSparkRunner` submits the same spec to a
driver it started earlier (:mod:`airflow_cdc.spark_jobs.warm_driver`) over a Unix socket only this user
can reach, and streams the job's lines to the task log as spark-submit's would be.

* **Which driver.** A driver serves specs that would start the same application: the same
  master, conf, jars, py-files (their names carry a hash of their content, so a code change
  starts a new driver), memory, environment and secrets (by a hash, never the values). That
  key names its socket, log and locks under ``state_dir`` (0700). A spec that is not one of
  our entry points runs cold.
* **Start.** The first job of a key starts the driver (``spark-submit`` in a session of its
  own, so it outlives the task) and waits until it listens; a second runner meanwhile waits on
  the start lock and then uses it. A driver stops after ``idle_seconds`` without a job.
* **One job at a time.** A runner holds the key's busy lock while its job runs; another waits
  up to ``busy_wait_seconds``, then runs cold rather than wait longer.
* **Failures.** A driver found gone before it accepted the job is replaced, and the job sent
  once more (nothing of it ran). A driver that dies during the job (a lost JVM, a crash
  point) fails the job with :class:`SparkJobError` and the end of the driver's log, as a
  dead spark-submit does; the task's retry then starts a new driver. A task killed during its
  job closes the connection and the driver cancels the job's Spark jobs
  (:mod:`airflow_cdc.spark_jobs.warm_driver`).
* **A job's own conf** (:data:`PER_JOB_CONF_PREFIXES`) is not part of the key: it travels
  with the request and is set on the session for that job. Secrets travel as for a local
  spark-submit: an anonymous memory file of the task's process, named in that conf
  (``spark.airflow_cdc.secretConfFile``), read by the driver while the task waits.
* **Iceberg's table cache** is emptied after every job (:mod:`airflow_cdc.spark_jobs.warm_driver`):
  another application (a cold job, a user's own) may commit to the same tables between two
  jobs, and each job must start from their latest metadata.

No pyspark import: this runs in the Airflow task.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from airflow_cdc.model import CdcError
from airflow_cdc.spark.iceberg import CODEGEN_CACHE_CONF
from airflow_cdc.spark.job import (
    SECRET_CONF_FILE_KEY,
    SparkJobError,
    SparkJobResult,
    SparkJobSpec,
    spark_job_application,
)
from airflow_cdc.spark.runners import DEFAULT_LOG_TAIL_LINES, LocalSparkRunner, secret_conf_file

log = logging.getLogger(__name__)

DEFAULT_IDLE_SECONDS = 900.0
DEFAULT_BUSY_WAIT_SECONDS = 60.0
DEFAULT_START_TIMEOUT_SECONDS = 300.0
# Environment variables of the task that shape what a driver and its Python workers do (they
# are read when the driver starts, so a driver serves only tasks that agree on them).
_LAUNCH_ENV_PREFIXES = ("AIRFLOW_CDC_", "SPARK_", "PYSPARK_", "JAVA_", "HADOOP_", "GOOGLE_",
                        "AWS_", "PYTHONPATH")
_LAUNCH_ENV_SUFFIXES = ("_EMULATOR_HOST",)
# The warm driver's own Spark settings (a spec's conf overrides them), each a performance
# strategy (bench/window.py; docs/performance.md):
# - every SQL shuffle map task writes one sorted file, not Spark's "bypass" file per partition
#   (its choice up to 200 partitions): saves a small window's many tiny map tasks each creating
#   and concatenating 200 files. Shuffles of more partitions take the sorted writer anyway.
# - Spark keeps 1,000 compiled classes, not its default 100: saves compiling a window's
#   generated code again in every window (its jobs compile more than 100 distinct classes, so
#   the default cache evicts them before the next window).
WARM_DRIVER_CONF = {
    "spark.shuffle.sort.bypassMergeThreshold": "0",
    **CODEGEN_CACHE_CONF,
}
# Conf that belongs to one job, not to the application: sent with each request and set on
# the session for that job only (the secret file of this task; OpenLineage's parent run).
PER_JOB_CONF_PREFIXES = (SECRET_CONF_FILE_KEY, "spark.openlineage.parent", "spark.openlineage.root")


def per_job(key: str) -> bool:
    """Whether a conf key is the job's own (:data:`PER_JOB_CONF_PREFIXES`)."""
    return key.startswith(PER_JOB_CONF_PREFIXES)

# Drivers this process started, polled so that an exited one does not stay a zombie.
_STARTED: list[subprocess.Popen] = []


def default_state_dir() -> Path:
    """``$AIRFLOW_CDC_WARM_DIR``, else ``<temp>/airflow-cdc-warm-<uid>``."""
    given = os.environ.get("AIRFLOW_CDC_WARM_DIR")
    return Path(given) if given else Path(tempfile.gettempdir()) / f"airflow-cdc-warm-{os.getuid()}"


def warm_module(application: str) -> str | None:
    """The ``spark_jobs`` module an application path runs, if a warm driver can run it."""
    path = Path(application)
    if path.suffix != ".py" or path.stem == "warm_driver" or not path.stem.isidentifier():
        return None
    try:
        if path.resolve() != Path(spark_job_application(path.stem)).resolve():
            return None
    except (FileNotFoundError, CdcError):  # not one of ours: run cold
        return None
    return path.stem


def driver_key(spec: SparkJobSpec, master: str, environ: dict[str, str] | None = None) -> str:
    """The key of the driver that can run ``spec``: what its spark-submit would start with."""
    environ = dict(os.environ if environ is None else environ)
    launch_env = {k: v for k, v in environ.items()
                  if k.startswith(_LAUNCH_ENV_PREFIXES) or k.endswith(_LAUNCH_ENV_SUFFIXES)}
    secrets = hashlib.sha256(json.dumps(dict(spec.secret_conf), sort_keys=True).encode()).hexdigest()
    described = {
        "master": master,
        "conf": {k: v for k, v in spec.conf.items() if not per_job(k)},
        "jars": spec.jars, "packages": spec.packages, "py_files": spec.py_files,
        "files": spec.files, "env_vars": dict(spec.env_vars), "launch_env": launch_env,
        "memory": [spec.driver_memory, spec.executor_memory, spec.executor_cores,
                   spec.num_executors, spec.total_executor_cores],
        "secrets": secrets,
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:20]


class WarmDriverGone(Exception):
    """The driver went away before it accepted the job (nothing of the job ran)."""


class WarmSparkRunner:
    """Runs our Spark jobs in a warm driver on this machine (``master``, default ``local[*]``).

    The same spec a :class:`LocalSparkRunner` takes; ``idle_seconds`` is how long a driver
    waits for its next job before it stops (pick more than the schedule's interval, so that
    every window finds it warm).
    """

    driver_is_local = True

    def __init__(
        self,
        master: str = "local[*]",
        *,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        state_dir: str | Path | None = None,
        busy_wait_seconds: float = DEFAULT_BUSY_WAIT_SECONDS,
        start_timeout_seconds: float = DEFAULT_START_TIMEOUT_SECONDS,
        spark_submit: str | None = None,
        log_tail_lines: int = DEFAULT_LOG_TAIL_LINES,
        logger: logging.Logger | None = None,
    ) -> None:
        if idle_seconds <= 0:
            raise ValueError(f"idle_seconds={idle_seconds!r}: a warm driver needs a positive idle "
                             f"limit (seconds); use LocalSparkRunner for no warm driver")
        self.master = master
        self.idle_seconds = float(idle_seconds)
        self.state_dir = Path(state_dir) if state_dir else default_state_dir()
        self.busy_wait_seconds = busy_wait_seconds
        self.start_timeout_seconds = start_timeout_seconds
        self.log_tail_lines = log_tail_lines
        self.log = logger or log
        self.cold = LocalSparkRunner(master=master, spark_submit=spark_submit,
                                     log_tail_lines=log_tail_lines, logger=self.log)
        self._connection: socket.socket | None = None
        self.last_driver: dict | None = None  # the hello of the driver that ran the last job

    # --- paths ------------------------------------------------------------------------------
    def paths(self, key: str) -> dict[str, Path]:
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        return {name: self.state_dir / f"{key}.{name}"
                for name in ("sock", "log", "busy", "start")}

    # --- running ----------------------------------------------------------------------------
    def run(self, spec: SparkJobSpec) -> SparkJobResult:
        module = warm_module(spec.application)
        if module is None:
            self.log.info("Spark job %r is not an airflow-cdc entry point: running it cold", spec.name)
            return self.cold.run(spec)
        key = driver_key(spec, self.master)
        paths = self.paths(key)
        with _flock(paths["busy"], self.busy_wait_seconds) as held:
            if not held:
                self.log.info("The warm Spark driver %s is busy for more than %.0f s: running "
                              "%r cold", key, self.busy_wait_seconds, spec.name)
                return self.cold.run(spec)
            with secret_conf_file(spec) as public:
                job_conf = {k: v for k, v in public.conf.items() if per_job(k)}
                try:
                    return self._run_warm(spec, module, paths, job_conf)
                except WarmDriverGone as gone:
                    self.log.info("The warm Spark driver went away before the job started (%s): "
                                  "starting another", gone)
                try:
                    return self._run_warm(spec, module, paths, job_conf)
                except WarmDriverGone as again:
                    raise SparkJobError(spec.name, None, _last_lines(paths["log"], 80), detail=(
                        f"two warm Spark drivers in a row went away before the job started "
                        f"({again}); their log is {paths['log']}")) from again

    def _run_warm(self, spec: SparkJobSpec, module: str, paths: dict[str, Path],
                  job_conf: dict[str, str]) -> SparkJobResult:
        started = time.monotonic()
        sock = self._connect_or_start(spec, paths)
        self._connection = sock
        tail: collections.deque[str] = collections.deque(maxlen=self.log_tail_lines)
        try:
            messages = _messages(sock)
            hello = next(messages, None)
            if hello is None or "hello" not in hello:
                raise WarmDriverGone("no greeting")
            self.last_driver = hello["hello"]
            request = {"run": {"module": module, "args": list(spec.application_args),
                               "name": spec.name, "conf": job_conf}}
            try:
                sock.sendall((json.dumps(request) + "\n").encode("utf-8"))
            except OSError as error:
                raise WarmDriverGone(f"sending the job: {error}") from error
            accepted = next(messages, None)
            if accepted is None or "started" not in accepted:
                raise WarmDriverGone("the job was not accepted")
            pid = self.last_driver["pid"]
            self.log.info("Spark job %r runs in the warm driver pid %s (application %s, job %s)",
                          spec.name, pid, self.last_driver["application_id"], accepted["started"])
            code = None
            for message in messages:
                if "line" in message:
                    tail.append(message["line"])
                    self.log.info("%s", message["line"])
                elif "exit" in message:
                    code = int(message["exit"])
                    break
        finally:
            self._connection = None
            sock.close()
        duration = time.monotonic() - started
        if code is None:
            tail.extend(f"[warm driver log] {line}" for line in _last_lines(paths["log"], 40))
            raise SparkJobError(spec.name, None, tail,
                                detail=f"the warm Spark driver (pid {pid}) ended during the job; "
                                       f"its log is {paths['log']}")
        if code != 0:
            raise SparkJobError(spec.name, code, tail,
                                detail=f"Spark's own log of the warm driver: {paths['log']}")
        self.log.info("Spark job %r finished in %.1f s (warm driver)", spec.name, duration)
        return SparkJobResult(spec.name, code, tuple(tail), duration)

    def _connect_or_start(self, spec: SparkJobSpec, paths: dict[str, Path]) -> socket.socket:
        sock = _connect(paths["sock"])
        if sock is not None:
            return sock
        with _flock(paths["start"], self.start_timeout_seconds) as held:
            if not held:
                raise SparkJobError(spec.name, None, [], detail=(
                    f"no warm Spark driver started within {self.start_timeout_seconds:.0f} s "
                    f"(another task holds {paths['start']})"))
            sock = _connect(paths["sock"])  # another runner may have started it meanwhile
            if sock is not None:
                return sock
            return self._start(spec, paths)

    def _start(self, spec: SparkJobSpec, paths: dict[str, Path]) -> socket.socket:
        paths["sock"].unlink(missing_ok=True)  # a dead driver's
        server = replace(
            spec,
            application=spark_job_application("warm_driver"),
            application_args=("--socket", str(paths["sock"]),
                              "--idle-seconds", f"{self.idle_seconds:g}"),
            name="airflow-cdc-warm-driver",
            conf={**WARM_DRIVER_CONF, **{k: v for k, v in spec.conf.items() if not per_job(k)}},
            secret_conf={},
        )
        cmd = self.cold.command(server)
        self.log.info("Starting a warm Spark driver (log %s, idle limit %.0f s)",
                      paths["log"], self.idle_seconds)
        for process in list(_STARTED):
            if process.poll() is not None:
                _STARTED.remove(process)
        with open(paths["log"], "ab") as log_file:
            os.chmod(paths["log"], 0o600)
            process = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=self.cold.environment(spec),
                                       start_new_session=True, cwd=str(self.state_dir))
        _STARTED.append(process)
        deadline = time.monotonic() + self.start_timeout_seconds
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise SparkJobError(spec.name, process.returncode, _last_lines(paths["log"], 80),
                                    detail=f"the warm Spark driver exited while starting; its "
                                           f"log is {paths['log']}")
            sock = _connect(paths["sock"])
            if sock is not None:
                return sock
            time.sleep(0.1)
        process.kill()
        raise SparkJobError(spec.name, None, _last_lines(paths["log"], 80),
                            detail=f"the warm Spark driver did not listen within "
                                   f"{self.start_timeout_seconds:.0f} s; its log is {paths['log']}")

    def kill(self) -> None:
        """Give up the running job: the driver sees the connection close and cancels it."""
        sock = self._connection
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def stop_warm_drivers(state_dir: str | Path | None = None, timeout: float = 60.0) -> int:
    """Ask every warm driver under ``state_dir`` to stop (after its current job); how many
    were asked."""
    folder = Path(state_dir) if state_dir else default_state_dir()
    asked = 0
    for path in sorted(folder.glob("*.sock")):
        sock = _connect(path, timeout=timeout)
        if sock is None:
            continue
        with sock:
            messages = _messages(sock)
            if next(messages, None) is None:
                continue
            with contextlib.suppress(OSError):
                sock.sendall(b'{"stop": true}\n')
                next(messages, None)
                asked += 1
    return asked


def _connect(path: Path, timeout: float | None = None) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    sock.settimeout(timeout)
    return sock


def _messages(sock: socket.socket) -> Iterator[dict]:
    """The driver's JSON lines until it closes the connection."""
    buffer = b""
    while True:
        try:
            data = sock.recv(65536)
        except OSError:
            return
        if not data:
            return
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)


@contextlib.contextmanager
def _flock(path: Path, wait_seconds: float) -> Iterator[bool]:
    """Hold an exclusive lock on ``path``, waiting at most ``wait_seconds``; yields whether held."""
    handle = open(path, "a+b")  # noqa: SIM115 - closed below
    try:
        os.chmod(path, 0o600)
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.2)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()


def _last_lines(path: Path, count: int) -> list[str]:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 256 * 1024))
            return handle.read().decode("utf-8", "replace").splitlines()[-count:]
    except OSError:
        return []
