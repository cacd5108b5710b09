"""A warm Spark driver: one Spark application that runs our jobs one after the other.

Usage (spark-submit, started by :class:`airflow_cdc.spark.warm.WarmSparkRunner`, never by hand):
``warm_driver.py --socket <path> --idle-seconds <s>``

A job submitted with spark-submit pays the JVM, the SparkSession, the Iceberg catalog, the
Python workers and the JIT's first compilations every time, most of a small window's cost
(bench/window.py, ``--cold`` against the default; docs/performance.md). This driver pays them once: it starts the session with the conf
it was submitted with, listens on a Unix socket only its user can reach, and runs each
request's entry point (``spark_jobs.<name>.main(args)``) in that session, so a small
window's jobs find the JVM, the catalog and the workers warm.

Protocol, one JSON object per line:

* the driver greets every connection: ``{"hello": {"pid", "application_id", "jobs"}}``;
* the runner sends ``{"run": {"module", "args", "conf", "name"}}`` or ``{"stop": true}``, where
  ``conf`` is the job's own (its secret file, OpenLineage's parent run), set on the session
  for this job only;
* the driver acknowledges (``{"started": n}``), streams the job's Python output
  (``{"line": text}``) and ends with ``{"exit": code}``.

One job at a time (a runner holds the busy lock meanwhile). If the runner's connection drops
during a job (its task was killed), the driver cancels the job's Spark jobs and, if the job
has not ended ``ABANDONED_GRACE_SECONDS`` later, exits: it never keeps running a job nobody
waits for. It also exits after ``--idle-seconds`` without a request. Its own log (Spark's JVM
log, every job's lines) is the file the runner started it with.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Sequence

# A job whose runner went away must end this long after its Spark jobs were cancelled, or
# the driver exits (a job stuck outside Spark, e.g. on a source's socket).
ABANDONED_GRACE_SECONDS = 60.0
# A folder: each job's driver side is profiled (cProfile) into job-<n>.prof there.
PROFILE_ENV = "AIRFLOW_CDC_WARM_PROFILE_DIR"


def _profiler():
    """A running cProfile profiler when :data:`PROFILE_ENV` names a folder, else None."""
    if not os.environ.get(PROFILE_ENV):
        return None
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    return profiler


class _JobOutput:
    """``sys.stdout`` and ``sys.stderr`` of the driver: every line goes to the driver's log and,
    while a job runs, to its runner. Installed once, so a handler that captured ``sys.stderr``
    during one job still writes to the job running now."""

    def __init__(self, log) -> None:
        self._log = log
        self._send = None
        self._partial = ""
        self._lock = threading.Lock()

    def attach(self, send) -> None:
        with self._lock:
            self._send = send

    def detach(self) -> None:
        self.flush()
        with self._lock:
            self._send = None

    def write(self, text: str) -> int:
        self._log.write(text)
        with self._lock:
            self._partial += text
            *lines, self._partial = self._partial.split("\n")
            send = self._send
        if send is not None:
            for line in lines:
                send({"line": line})
        return len(text)

    def flush(self) -> None:
        self._log.flush()
        with self._lock:
            rest, self._partial = self._partial, ""
            send = self._send
        if rest and send is not None:
            send({"line": rest})

    def isatty(self) -> bool:
        return False


class _Connection:
    """One runner's connection: JSON lines out (safe from several threads), lines in."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = sock.makefile("r", encoding="utf-8")
        self._lock = threading.Lock()
        self.gone = threading.Event()

    def send(self, message: dict) -> None:
        if self.gone.is_set():
            return
        data = (json.dumps(message) + "\n").encode("utf-8")
        with self._lock:
            try:
                self.sock.sendall(data)
            except OSError:
                self.gone.set()

    def receive(self) -> dict | None:
        try:
            line = self.reader.readline()
        except OSError:
            line = ""
        if not line:
            self.gone.set()
            return None
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        return message if isinstance(message, dict) else {"invalid": line[:200]}

    def close(self) -> None:
        try:
            self.reader.close()
            self.sock.close()
        except OSError:
            pass


def empty_table_caches(spark) -> list[str]:
    """Empty the table cache of every Iceberg catalog the session has loaded; their names.

    Iceberg's ``CachingCatalog`` keeps each loaded table (its metadata as of the load) until
    it is unused for ``cache.expiration-interval-ms``. Within one job that saves loading a table's
    metadata again for each statement (bench/window.py; docs/performance.md); across jobs it would hand a job the metadata of a table another application has since
    committed to. Neither Spark nor Iceberg exposes "forget every table", so the cache is
    reached by reflection (CatalogManager's loaded catalogs, CachingCatalog's ``tableCache``);
    if those fields change, this raises and the driver stops serving (see the caller).
    """
    manager = spark._jsparkSession.sessionState().catalogManager()
    loaded = _private_field(manager, "org.apache.spark.sql.connector.catalog.CatalogManager", "catalogs")
    emptied = []
    names = loaded.keysIterator()  # a Scala map: its iterator works on Scala 2.12 and 2.13
    while names.hasNext():
        name = names.next()
        plugin = loaded.get(name).get()
        try:
            iceberg = plugin.icebergCatalog()
        except Exception:  # noqa: BLE001 - not an Iceberg catalog: nothing of ours cached
            continue
        if _class_named(iceberg, "org.apache.iceberg.CachingCatalog") is not None:
            _private_field(iceberg, "org.apache.iceberg.CachingCatalog", "tableCache").invalidateAll()
            emptied.append(str(name))
    return emptied


def _class_named(instance, class_name: str):
    """The class ``class_name`` among ``instance``'s class and its superclasses, or None (the
    classes come from --jars: Spark's class loader, not the one Class.forName asks)."""
    found = instance.getClass()
    while found is not None and found.getName() != class_name:
        found = found.getSuperclass()
    return found


def _private_field(instance, class_name: str, field: str):
    owner = _class_named(instance, class_name)
    if owner is None:
        raise LookupError(f"{instance.getClass().getName()} is not a {class_name}")
    found = owner.getDeclaredField(field)
    found.setAccessible(True)
    return found.get(instance)


class WarmDriver:
    """The session, the listening socket and the loop that runs jobs."""

    def __init__(self, socket_path: str, idle_seconds: float) -> None:
        from pyspark.sql import SparkSession

        import airflow_cdc.spark_jobs.session

        airflow_cdc.spark_jobs.session.KEEP_SESSION = True
        self.spark = SparkSession.builder.getOrCreate()
        self.socket_path = socket_path
        self.idle_seconds = idle_seconds
        self.jobs = 0
        self.stopping = False  # set when a job leaves state the driver cannot clean
        self.output = _JobOutput(sys.__stderr__)
        sys.stdout = sys.stderr = self.output

    def serve(self) -> None:
        """Listen until idle for ``idle_seconds`` or asked to stop; then end the application."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # the socket: this user only
        try:
            listener.bind(self.socket_path + ".new")
        finally:
            os.umask(old_umask)
        listener.listen(8)
        # Bound under another name and renamed: a runner never connects to a half-made socket.
        os.replace(self.socket_path + ".new", self.socket_path)
        self._socket_inode = os.stat(self.socket_path).st_ino
        listener.settimeout(self.idle_seconds)
        print(f"warm driver: serving {self.socket_path} (application "
              f"{self.spark.sparkContext.applicationId}, idle limit {self.idle_seconds:.0f} s)",
              flush=True)
        try:
            while True:
                try:
                    sock, _ = listener.accept()
                except socket.timeout:
                    print(f"warm driver: idle for {self.idle_seconds:.0f} s, stopping", flush=True)
                    return
                sock.settimeout(None)
                if not self.handle(_Connection(sock)):
                    print("warm driver: asked to stop", flush=True)
                    return
                if self.stopping:
                    return
        finally:
            # The socket goes first: a runner connecting from now on starts a new driver.
            self._unlink_own_socket()
            listener.close()
            self.spark.stop()

    def _unlink_own_socket(self) -> None:
        """Remove the socket file if it is still this driver's (a new driver may have replaced it)."""
        try:
            if os.stat(self.socket_path).st_ino == self._socket_inode:
                os.unlink(self.socket_path)
        except OSError:
            pass

    def handle(self, connection: _Connection) -> bool:
        """Serve one connection; False when it asked the driver to stop."""
        try:
            connection.send({"hello": {"pid": os.getpid(), "jobs": self.jobs,
                                       "application_id": self.spark.sparkContext.applicationId}})
            request = connection.receive()
            if request is None:
                return True
            if request.get("stop"):
                connection.send({"exit": 0})
                return False
            run = request.get("run")
            if (not isinstance(run, dict) or not str(run.get("module", "")).isidentifier()
                    or run["module"] == "warm_driver"):
                connection.send({"line": f"warm driver: error: not a job request: {request!r:.200}"})
                connection.send({"exit": 2})
                return True
            code = self.run(connection, run)
            connection.send({"exit": code})
            return True
        finally:
            connection.close()

    def run(self, connection: _Connection, run: dict) -> int:
        """Run one job's entry point in the session; its exit code."""
        self.jobs += 1
        number = self.jobs
        context = self.spark.sparkContext
        group = f"airflow-cdc-warm-{number}"
        connection.send({"started": number})
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(connection, group, done),
                                   name="warm-driver-watch", daemon=True)
        watcher.start()
        self.output.attach(connection.send)
        started = time.monotonic()
        print(f"warm driver: job {number} {run.get('name', '')}: "
              f"spark_jobs.{run['module']} {' '.join(run.get('args', []))}", flush=True)
        job_conf = dict(run.get("conf") or {})
        code = 1
        profiler = _profiler()
        try:
            for key, value in job_conf.items():
                self.spark.conf.set(key, value)
            context.setJobGroup(group, run.get("name", group), interruptOnCancel=True)
            module = importlib.import_module(f"airflow_cdc.spark_jobs.{run['module']}")
            code = module.main(list(run.get("args", [])))
            code = 0 if code is None else int(code)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            if not isinstance(exit_.code, int) and exit_.code is not None:
                print(exit_.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - the job's failure is its runner's to report
            traceback.print_exc()
            code = 1
        finally:
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(os.path.join(os.environ[PROFILE_ENV], f"job-{number}.prof"))
            done.set()
            self._forget_job_state(job_conf)
            print(f"warm driver: job {number} ended with exit code {code} "
                  f"in {time.monotonic() - started:.1f} s", flush=True)
            self.output.detach()
        return code

    def _forget_job_state(self, job_conf: dict) -> None:
        """What one job leaves in the session and could mislead the next: its own conf, cached
        frames, and the tables Iceberg's catalogs cached (another application may commit to
        them before the next job). A driver that cannot clean them serves no further job."""
        if self.spark.sparkContext._jsc is None:  # the job stopped the session itself
            print("warm driver: the job stopped the Spark session; stopping", flush=True)
            self.stopping = True
            return
        try:
            for key in job_conf:
                self.spark.conf.unset(key)
            self.spark.catalog.clearCache()
            emptied = empty_table_caches(self.spark)
        except Exception as error:  # noqa: BLE001 - refuse to serve stale metadata
            print(f"warm driver: cannot clean the session after a job ({error}); stopping "
                  f"after this job so that the next one starts a new driver", flush=True)
            self.stopping = True
            return
        if emptied:
            print(f"warm driver: emptied the table caches of {', '.join(emptied)}", flush=True)

    def _watch(self, connection: _Connection, group: str, done: threading.Event) -> None:
        """If the runner goes away before the job ends, cancel the job; exit if it lingers."""
        while not done.is_set():
            if connection.receive() is None:
                break
        if done.is_set():
            return
        print(f"warm driver: the runner of {group} went away; cancelling its Spark jobs",
              file=sys.__stderr__, flush=True)
        try:
            self.spark.sparkContext.cancelJobGroup(group)
        except Exception:  # noqa: BLE001
            pass
        if not done.wait(ABANDONED_GRACE_SECONDS):
            print(f"warm driver: {group} still running {ABANDONED_GRACE_SECONDS:.0f} s after its "
                  f"runner went away; exiting", file=sys.__stderr__, flush=True)
            os._exit(3)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="warm_driver", description=__doc__.split("\n")[0])
    parser.add_argument("--socket", required=True, help="the Unix socket to listen on")
    parser.add_argument("--idle-seconds", type=float, required=True,
                        help="stop after this long without a request")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    WarmDriver(args.socket, args.idle_seconds).serve()
    return 0


if __name__ == "__main__":
    # Run as the module airflow_cdc.spark_jobs.warm_driver (as the jobs are): executors import the jobs'
    # modules once per worker, not a copy per task.
    from airflow_cdc.spark_jobs import warm_driver as _warm_driver_module

    sys.exit(_warm_driver_module.main())
