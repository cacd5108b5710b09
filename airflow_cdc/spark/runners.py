"""Runners submit a :class:`~airflow_cdc.spark.job.SparkJobSpec` and wait for it to end.

* :class:`LocalSparkRunner`: ``spark-submit --master local[*]`` as a subprocess, the embedded
  default (no cluster, no Airflow connection).
* :class:`SparkSubmitHookRunner`: the Spark provider's ``SparkSubmitHook`` on the cluster an
  Airflow connection names (standalone, YARN, Kubernetes).

Both stream the job's log to the Python logger, keep its last lines, and raise
:class:`~airflow_cdc.spark.job.SparkJobError` (with those lines) when the job fails. A spec's
``secret_conf`` never reaches the command line: both write it to a file only this user can
read, name the file in the public conf, and delete it when the job ends
(:func:`secret_conf_file`).
Neither Airflow nor pyspark is imported at module level: executors import ``airflow_cdc.spark``.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from airflow_cdc.spark.job import (
    SECRET_CONF_FILE_KEY,
    SparkJobError,
    SparkJobResult,
    SparkJobSpec,
)
from airflow_cdc.spark.secrets import process_files_supported, process_secret_file

log = logging.getLogger(__name__)

DEFAULT_LOG_TAIL_LINES = 200
SPARK_SUBMIT_BINARIES = ("spark-submit", "spark2-submit", "spark3-submit")


class SparkRunner(Protocol):
    """What operators need from a runner."""

    def run(self, spec: SparkJobSpec) -> SparkJobResult: ...

    def kill(self) -> None: ...


@contextmanager
def secret_conf_file(spec: SparkJobSpec, ship: bool = False) -> Iterator[SparkJobSpec]:
    """``spec`` to submit: its ``secret_conf`` in a file readable by this user only, named by
    the public conf ``spark.airflow_cdc.secretConfFile``. For a driver on this machine the file
    is an anonymous memory file of this process (:mod:`airflow_cdc.spark.secrets`: nothing
    survives even a SIGKILL of the task); ``ship`` (a driver on another machine, cluster
    deploy mode) writes a 0600 file instead, sent with the job (``--files``) and deleted when
    the block ends.

    A spec without secrets is yielded unchanged.
    """
    if not spec.secret_conf:
        yield spec
        return
    if not ship and process_files_supported():
        # The driver runs on this machine: an anonymous memory file a SIGKILL cannot leave behind.
        with process_secret_file(json.dumps(dict(spec.secret_conf))) as path:
            yield replace(spec, conf={**spec.conf, SECRET_CONF_FILE_KEY: path}, secret_conf={})
        return
    handle, path = tempfile.mkstemp(prefix="cdc-secret-conf-", suffix=".json")
    try:
        with os.fdopen(handle, "w") as file:
            json.dump(dict(spec.secret_conf), file)
        yield replace(
            spec,
            conf={**spec.conf, SECRET_CONF_FILE_KEY: path},
            files=(*spec.files, path) if ship else spec.files,
            secret_conf={},
        )
    finally:
        Path(path).unlink(missing_ok=True)


def killed_detail(return_code: int | None) -> str:
    """Why a spark-submit ended with ``return_code`` when a signal ended it (a negative code:
    Popen's -N for signal N), since a killed process writes no error line; "" otherwise."""
    if return_code is None or return_code >= 0:
        return ""
    import signal

    try:
        signame = signal.Signals(-return_code).name
    except ValueError:
        signame = f"signal {-return_code}"
    return (f"spark-submit was killed by {signame} from outside the job (the out-of-memory "
            f"killer, a worker shutting down, a kill by hand), so it wrote no error line")


def bundled_spark_submit() -> str | None:
    """The ``spark-submit`` of this interpreter's pyspark, if pyspark is installed.

    The copy inside the pyspark package, not the venv's ``bin/`` one: that one asks
    ``python3`` from PATH where Spark lives and fails when that interpreter has no pyspark.
    """
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.origin is not None:
        inside = Path(spec.origin).parent / "bin" / "spark-submit"
        if inside.is_file():
            return str(inside)
    return None


def find_spark_submit() -> str:
    """This interpreter's pyspark ``spark-submit`` (it matches the provisioned Iceberg jars), else PATH's."""
    found = bundled_spark_submit() or shutil.which("spark-submit")
    if found is None:
        raise FileNotFoundError(
            "spark-submit was found neither in this interpreter's pyspark nor on PATH: "
            "install pyspark in this environment or pass spark_submit='/path/to/spark-submit'"
        )
    return found


class LocalSparkRunner:
    """Runs a job with ``spark-submit --master <master>`` in a subprocess on this machine.

    ``spark_submit`` defaults to the one of this interpreter's pyspark (else PATH's). The driver
    and executors use this interpreter (``PYSPARK_PYTHON``) unless the environment, the spec's
    ``env_vars`` or ``spark.pyspark.python`` say otherwise.
    """

    driver_is_local = True  # the driver can read this process's files (secrets.py)

    def __init__(
        self,
        master: str = "local[*]",
        spark_submit: str | None = None,
        log_tail_lines: int = DEFAULT_LOG_TAIL_LINES,
        logger: logging.Logger | None = None,
        class_archive: bool = True,
    ) -> None:
        self.master = master
        self.spark_submit = spark_submit
        self.log_tail_lines = log_tail_lines
        self.log = logger or log
        self.class_archive = class_archive
        self._process: subprocess.Popen[str] | None = None

    def command(self, spec: SparkJobSpec) -> list[str]:
        """The spark-submit command line for ``spec`` (the driver maps the machine's class
        archive when it has one and ``class_archive`` is on: :mod:`.class_archive`)."""
        from airflow_cdc.spark.class_archive import with_class_archive

        conf = with_class_archive(spec.conf) if self.class_archive else spec.conf
        cmd = [self.spark_submit or find_spark_submit(), "--master", self.master, "--name", spec.name]
        for key, value in conf.items():
            cmd += ["--conf", f"{key}={value}"]
        for option, values in (
            ("--jars", spec.jars),
            ("--packages", spec.packages),
            ("--py-files", spec.py_files),
            ("--files", spec.files),
        ):
            if values:
                cmd += [option, ",".join(values)]
        for option, value in (
            ("--driver-memory", spec.driver_memory),
            ("--executor-memory", spec.executor_memory),
            ("--executor-cores", spec.executor_cores),
            ("--num-executors", spec.num_executors),
            ("--total-executor-cores", spec.total_executor_cores),
        ):
            if value is not None:
                cmd += [option, str(value)]
        return [*cmd, spec.application, *spec.application_args]

    def environment(self, spec: SparkJobSpec) -> dict[str, str]:
        from airflow_cdc.spark.environment import with_java

        env = with_java({**os.environ, **spec.env_vars})
        if "spark.pyspark.python" not in spec.conf:
            env.setdefault("PYSPARK_PYTHON", sys.executable)
        return env

    def run(self, spec: SparkJobSpec) -> SparkJobResult:
        """Submit ``spec``, stream its log, wait; raise SparkJobError unless it exits 0."""
        with secret_conf_file(spec) as public:
            return self._run(public)

    def _run(self, spec: SparkJobSpec) -> SparkJobResult:
        cmd = self.command(spec)
        self.log.info("Submitting Spark job %r: %s", spec.name, _masked(cmd))
        tail: collections.deque[str] = collections.deque(maxlen=self.log_tail_lines)
        started = time.monotonic()
        self._process = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            bufsize=1,
            env=self.environment(spec),
        )
        try:
            assert self._process.stdout is not None
            for raw in self._process.stdout:
                line = raw.rstrip("\n")
                tail.append(line)
                self.log.info("%s", line)
            return_code = self._process.wait()
        except BaseException:
            # Interrupted (task killed, KeyboardInterrupt): leave no JVM behind.
            self.kill()
            raise
        finally:
            self._process = None
        duration = time.monotonic() - started
        if return_code != 0:
            raise SparkJobError(spec.name, return_code, tail, detail=killed_detail(return_code))
        self.log.info("Spark job %r finished in %.1f s", spec.name, duration)
        return SparkJobResult(spec.name, return_code, tuple(tail), duration)

    def kill(self) -> None:
        """Stop the running spark-submit, if any (operators call this from ``on_kill``)."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class SparkSubmitHookRunner:
    """Runs a job through the Spark provider's ``SparkSubmitHook`` on the connection ``conn_id``.

    The connection gives the master (``spark://host:port``, ``yarn``, ``k8s://...``) and, in
    its extras, deploy mode, queue, namespace and spark binary. When no spark-submit is on
    PATH, the one this interpreter's pyspark ships is used. Executors run the Python their
    cluster provides: set ``spark.pyspark.python`` in the spec's conf if it must be another.
    """

    def __init__(
        self,
        conn_id: str = "spark_default",
        *,
        spark_binary: str | None = None,
        deploy_mode: str | None = None,
        properties_file: str | None = None,
        status_poll_interval: int = 1,
        verbose: bool = False,
        log_tail_lines: int = DEFAULT_LOG_TAIL_LINES,
    ) -> None:
        self.conn_id = conn_id
        self.spark_binary = spark_binary
        self.deploy_mode = deploy_mode
        self.properties_file = properties_file
        self.status_poll_interval = status_poll_interval
        self.verbose = verbose
        self.log_tail_lines = log_tail_lines
        self._hook: Any = None

    def _binary(self) -> str | None:
        if self.spark_binary:
            return self.spark_binary
        if any(shutil.which(name) for name in SPARK_SUBMIT_BINARIES):
            return None  # the hook's own choice (connection extra, else spark-submit) works
        return bundled_spark_submit()

    def hook(self, spec: SparkJobSpec) -> Any:
        """The ``SparkSubmitHook`` that submits ``spec`` (Airflow imported here, not at import)."""
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        def joined(values: tuple[str, ...]) -> str | None:
            return ",".join(values) or None

        return SparkSubmitHook(
            conf=dict(spec.conf),
            conn_id=self.conn_id,
            files=joined(spec.files),
            py_files=joined(spec.py_files),
            jars=joined(spec.jars),
            packages=joined(spec.packages),
            total_executor_cores=spec.total_executor_cores,
            executor_cores=spec.executor_cores,
            executor_memory=spec.executor_memory,
            driver_memory=spec.driver_memory,
            name=spec.name,
            num_executors=spec.num_executors,
            status_poll_interval=self.status_poll_interval,
            application_args=list(spec.application_args),
            env_vars=dict(spec.env_vars) or None,
            verbose=self.verbose,
            spark_binary=self._binary(),
            properties_file=self.properties_file,
            deploy_mode=self.deploy_mode,
        )

    def run(self, spec: SparkJobSpec) -> SparkJobResult:
        """Submit ``spec`` through the hook and wait; raise SparkJobError if it fails."""
        ship = bool(spec.secret_conf) and self.effective_deploy_mode() == "cluster"
        with secret_conf_file(spec, ship=ship) as public:
            return self._run(public)

    @property
    def driver_is_local(self) -> bool:
        """Whether the driver runs on this machine (client deploy mode)."""
        return self.effective_deploy_mode() != "cluster"

    def effective_deploy_mode(self) -> str | None:
        """``deploy_mode``, else the connection's ``deploy-mode`` extra (as the hook reads it)."""
        if self.deploy_mode:
            return self.deploy_mode
        from airflow.providers.common.compat.sdk import BaseHook

        return BaseHook.get_connection(self.conn_id).extra_dejson.get("deploy-mode")

    def _run(self, spec: SparkJobSpec) -> SparkJobResult:
        from airflow_cdc.spark.environment import use_java_home

        use_java_home()  # the hook runs spark-submit in this process's environment
        hook = self.hook(spec)
        tail: collections.deque[str] = collections.deque(maxlen=self.log_tail_lines)
        # The hook logs every line of spark-submit's output through ``hook.log`` and raises
        # without them; a tee on its logger keeps the tail for our error.
        hook._log = _TailingLogger(hook.log, tail)
        self._hook = hook
        started = time.monotonic()
        try:
            hook.submit(spec.application)
        except Exception as error:
            process = getattr(hook, "_submit_sp", None)
            return_code = getattr(process, "returncode", None)
            raise SparkJobError(spec.name, return_code, tail, detail=str(error)) from error
        finally:
            self._hook = None
        duration = time.monotonic() - started
        return SparkJobResult(spec.name, 0, tuple(tail), duration)

    def kill(self) -> None:
        """Kill the job being submitted (driver on the cluster included), if any."""
        if self._hook is not None:
            self._hook.on_kill()


class _TailingLogger:
    """Forwards to the hook's logger and keeps the last ``info`` lines (spark-submit's output)."""

    def __init__(self, inner: Any, tail: collections.deque[str]) -> None:
        self._inner = inner
        self._tail = tail

    def info(self, msg: object, *args: object, **kwargs: object) -> Any:
        try:
            self._tail.append(str(msg) % args if args else str(msg))
        except (TypeError, ValueError):
            self._tail.append(str(msg))
        return self._inner.info(msg, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _masked(cmd: list[str]) -> str:
    """The command for the log, without secrets: a second line of defence, since secrets
    travel in ``secret_conf``, never as ``--conf``."""
    shown = []
    for part in cmd:
        key, sep, _ = part.partition("=")
        if sep and any(
            word in key.lower() for word in ("password", "secret", "token", "credential")
        ):
            part = f"{key}=******"
        shown.append(part)
    return " ".join(shown)
