"""Benchmark: one window of millions of Spanner changes over 1,000 partitions, extract and apply
as the operators run them, and the drivers' peak memory at each size.

    .venv/bin/python bench/scale.py            # quick (make bench): 72k and 288k changes
    .venv/bin/python bench/scale.py --full     # 0.5M, 2M and 5M changes
    .venv/bin/python bench/scale.py --changes 100000,400000 --partitions 1000 --master local

For each size, a fresh stream reads one window [08:00, 09:00) of a Spanner change stream
history (:class:`bench.support.spanner_scale.ScaleHistory`: ``--partitions`` partitions, each
with single-row writes, batch writes of 8 rows and transactions over two partitions; 3.6
changes per commit; inserts, partial and full updates, deletes; the emulator's three tables and
its four value capture types; heartbeats every 10 s, the operators' default) served by the
emulator's gRPC server in this process. A size is rounded up to whole cycles of 72 changes
per partition (72,000 over 1,000 partitions): 0.5M is 504,000, 2M 2,016,000, 5M 5,040,000. The
history is built on demand per queried partition; the stock ``generate_history`` holds every
change in memory, which does not fit the large sizes.

The window runs the protocol's real steps: ``plan_window`` (SQLite state store; the stream's
first window, so it starts from the initial query), then the extract job
(``spark_jobs/extract.py``) through ``LocalSparkRunner`` with ``iceberg_job_spec``, exactly
the spec ``CdcExtractOperator`` submits (round 1 reads the initial query, round 2 the 1,000
partitions through the real ``google-cloud-spanner`` client), ``commit_window``, then the
apply job (``spark_jobs/apply_job.py``, the config ``CdcApplyOperator`` writes) into three
target tables, then ``mark_applied``. The result is checked against the history: the
changelog holds every change and each target as many rows as the history has live at the end.

``--master standalone`` (default) submits to a Spark standalone master and worker started on
127.0.0.1 (client deploy mode), so the driver is its own JVM and the executors run in the
worker's; ``--master local`` runs ``local[2]``, where executors are threads of the driver JVM
and its memory mixes both. Driver memory: this process samples ``/proc/<pid>/status`` every
0.2 s for the spark-submit JVM (``org.apache.spark.deploy.SparkSubmit``) and the Python driver
it starts (its child that is not a ``pyspark.daemon`` worker), keeping each one's ``VmHWM``
(the kernel's peak resident set). Printed per job: ``*_driver_rss_mb`` = JVM peak + Python
peak, and each part (``*_jvm_mb``, ``*_py_mb``). The JVM's peak also depends on its heap size
(``spark.driver.memory``, 2g here): the JVM takes heap from the OS as it allocates and keeps
it, so its RSS measures how much the driver allocated between collections, not only what it
holds; the Python driver's peak is what it held.

Lines on stdout (details and the Spark logs' paths on stderr)::

    bench scale: changes=<n> partitions=<p> extract_s=<s> apply_s=<s> extract_driver_rss_mb=<m>
        apply_driver_rss_mb=<m> extract_jvm_mb=<m> extract_py_mb=<m> apply_jvm_mb=<m>
        apply_py_mb=<m> changes_per_s=<n>          (one line per size)
    bench scale: rss_growth changes=<a>-><b> extract=<x> apply=<y> extract_py=<x> apply_py=<y>

``rss_growth`` is the largest size's peak over the smallest's (1.00 = flat). The machine has 2
cores; ``load1`` before each size goes to stderr. Not a test: nothing here asserts on time;
it fails only when the result differs from the history.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from airflow_cdc.model import PartitionPosition, Window, format_ts  # noqa: E402

# A size is rounded up to whole cycles of 72 changes per partition (72,000 over 1,000 partitions).
QUICK_SIZES = (72_000, 288_000)
FULL_SIZES = (500_000, 2_000_000, 5_000_000)
OWNER = "bench-scale"
LEASE_SECONDS = 6 * 3600
DRIVER_MEMORY = "2g"
EXECUTOR_MEMORY = "3g"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="0.5M, 2M and 5M changes (the issue's figures)")
    parser.add_argument("--changes", help="comma-separated sizes (default: 72000,288000; --full: 500000,2000000,5000000)")
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--master", choices=("standalone", "local"), default="standalone")
    parser.add_argument("--keep", help="keep everything (warehouse, logs, state) in this folder")
    args = parser.parse_args(argv)
    if args.changes:
        try:
            args.sizes = tuple(int(n) for n in args.changes.split(","))
        except ValueError:
            parser.error(f"--changes {args.changes!r} is not a comma-separated list of integers")
    else:
        args.sizes = FULL_SIZES if args.full else QUICK_SIZES
    if any(n <= 0 for n in args.sizes) or args.partitions < 2:
        parser.error("sizes must be positive and --partitions at least 2")
    return args


# --- the drivers' memory -----------------------------------------------------------------------
def _status_kb(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


class DriverMemory:
    """Samples the peak resident set (VmHWM) of the spark-submit JVM and its Python driver
    among this process's descendants, every ``interval`` seconds, while the block runs."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.jvm_kb: dict[int, int] = {}
        self.python_kb: dict[int, int] = {}
        self._stop = threading.Event()

    def _sample(self) -> None:
        import psutil

        try:
            processes = psutil.Process(os.getpid()).children(recursive=True)
        except psutil.Error:
            return
        drivers = set()
        for process in processes:
            try:
                if "org.apache.spark.deploy.SparkSubmit" in " ".join(process.cmdline()):
                    drivers.add(process.pid)
            except psutil.Error:
                continue
        for process in processes:
            try:
                pid, parent = process.pid, process.ppid()
                if pid in drivers:
                    target = self.jvm_kb
                elif parent in drivers and "pyspark.daemon" not in " ".join(process.cmdline()):
                    target = self.python_kb
                else:
                    continue
            except psutil.Error:
                continue
            peak = _status_kb(pid, "VmHWM")
            if peak is not None:
                target[pid] = max(target.get(pid, 0), peak)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    @contextmanager
    def measuring(self):
        thread = threading.Thread(target=self._run, name="driver-memory", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()

    @property
    def jvm_mb(self) -> float:
        return max(self.jvm_kb.values(), default=0) / 1024

    @property
    def python_mb(self) -> float:
        return max(self.python_kb.values(), default=0) / 1024


# --- one window ----------------------------------------------------------------------------------
def spark_conf(master: str) -> dict:
    conf = {
        "spark.driver.memory": DRIVER_MEMORY,
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "false",
    }
    if master != "local":
        conf.update({"spark.executor.memory": EXECUTOR_MEMORY, "spark.executor.cores": "2"})
    return conf


def run_job(runner, spec, log_path: Path) -> tuple[float, DriverMemory]:
    """Run ``spec`` through ``runner`` measuring its drivers; its log goes to ``log_path``."""
    logger = logging.getLogger(f"bench.scale.{log_path.stem}")
    logger.propagate = False
    handler = logging.FileHandler(log_path)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    runner.log = logger
    memory = DriverMemory()
    started = time.perf_counter()
    try:
        with memory.measuring():
            runner.run(spec)
    finally:
        logger.removeHandler(handler)
        handler.close()
    return time.perf_counter() - started, memory


def run_window(changes: int, partitions: int, master_url: str, master: str, folder: Path, catalog) -> dict:
    from airflow_cdc_emulators.spanner import SpannerEmulator
    from airflow_cdc.pipeline.protocol import StreamConfig, commit_window, plan_window
    from airflow_cdc.sources.spanner.query import INITIAL_PARTITION
    from airflow_cdc.spark.job import iceberg_job_spec
    from airflow_cdc.spark.runners import LocalSparkRunner
    from airflow_cdc.state import StateStore
    from bench.support.spanner_scale import ScaleHistory

    history = ScaleHistory(changes, partitions)
    stream_id = f"scale_{history.change_count}_{uuid.uuid4().hex[:6]}"
    store = StateStore(f"sqlite:///{folder / (stream_id + '.db')}")
    store.migrate()
    runner = LocalSparkRunner(master=master_url)
    conf = spark_conf(master)
    with SpannerEmulator(history) as emulator:
        config = StreamConfig(
            stream_id,
            "spanner_change_stream",
            {
                "kind": "spanner_change_stream",
                "stream_id": stream_id,
                "stream_name": history.stream_name,
                "dialect": "GOOGLE_STANDARD_SQL",
                "heartbeat_milliseconds": 10_000,
                "connection": {"project": "p", "instance": "i", "database": "db",
                               "emulator_host": emulator.emulator_host},
            },
            namespace="cdc",
            work_root=str(folder / "work"),
        )
        window = Window(stream_id, history.created_at, history.end)
        plan_window(store, config, window, OWNER, LEASE_SECONDS,
                    [PartitionPosition(INITIAL_PARTITION, window.start)], catalog.name)
        job_folder = config.window_dir(window)
        extract_result = job_folder / "extract-result.json"
        spec = iceberg_job_spec(
            "extract", catalog,
            ["--plan", str(config.plan_path(window)), "--outcome", str(config.outcome_path(window)),
             "--result", str(extract_result)],
            name=f"cdc-extract-{stream_id}", conf=conf,
        )
        extract_s, extract_memory = run_job(runner, spec, folder / f"{stream_id}-extract.log")
    result = json.loads(extract_result.read_text())
    store.mark_extracted(window, OWNER, int(result["snapshot_id"]))
    commit_window(store, config, window, OWNER)

    apply_config = job_folder / "apply.json"
    apply_result = job_folder / "apply-result.json"
    apply_config.write_text(json.dumps({
        "catalog": catalog.name,
        "stream": stream_id,
        "window_id": window.window_id,
        "window_end": format_ts(window.end),
        "changelog_table": config.changelog_table,
        # Each size's stream has its own target tables (the same window id in shared tables
        # would find the earlier size's commits and apply nothing).
        "targets": {"namespace": f"current_{stream_id}", "dead_letter_table": config.dead_letter_table},
        "policies": {"on_dead_letter": "fail", "tombstone_horizon_seconds": 7 * 24 * 3600},
    }, indent=1))
    spec = iceberg_job_spec(
        "apply_job", catalog, ["--job-config", str(apply_config), "--result", str(apply_result)],
        name=f"cdc-apply-{stream_id}", conf=conf,
    )
    apply_s, apply_memory = run_job(runner, spec, folder / f"{stream_id}-apply.log")
    applied = json.loads(apply_result.read_text())
    store.mark_applied(window, OWNER, {
        t["target_table"]: int(t["target_snapshot_id"]) for t in applied["tables"]
        if t.get("target_snapshot_id") is not None
    })
    check(history, result, applied)
    return {
        "changes": history.change_count,
        "extract_s": extract_s,
        "apply_s": apply_s,
        "extract_jvm_mb": extract_memory.jvm_mb,
        "extract_py_mb": extract_memory.python_mb,
        "apply_jvm_mb": apply_memory.jvm_mb,
        "apply_py_mb": apply_memory.python_mb,
    }


def check(history, extracted: dict, applied: dict) -> None:
    """The window against the history: every change in the changelog, each target's live rows."""
    counts = extracted.get("counts", {})
    problems = []
    if counts.get("changes") != history.change_count:
        problems.append(f"changelog has {counts.get('changes')} changes, the history {history.change_count}")
    live = history.live_rows()
    upserts = {t["source_table"]: t["upserts"] for t in applied["tables"]}
    if upserts != live:
        problems.append(f"targets got {upserts} live rows, the history has {live}")
    if applied.get("dead_letter_rows"):
        problems.append(f"{applied['dead_letter_rows']} rows went to the dead letters")
    if problems:
        raise SystemExit("bench scale: the window does not match its history: " + "; ".join(problems))


def load1() -> float:
    return os.getloadavg()[0]


def main(argv=None) -> int:
    args = parse_args(argv)
    # SIGTERM (make interrupted, a CI timeout) unwinds like Ctrl-C: the standalone master and
    # worker are stopped and the temporary folder removed.
    signal.signal(signal.SIGTERM, _interrupted)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from airflow_cdc.spark.environment import use_java_home
    from airflow_cdc.spark.iceberg import IcebergCatalog

    use_java_home()  # the standalone master and worker find Java through this environment

    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="cdc-bench-scale-"))
    folder.mkdir(parents=True, exist_ok=True)
    catalog = IcebergCatalog(name="lake", warehouse=str(folder / "warehouse"))
    print(f"bench scale: working in {folder} (Spark logs there)", file=sys.stderr)
    rows = []
    try:
        with cluster(args.master, folder) as master_url:
            for changes in args.sizes:
                print(f"bench scale: {changes} changes, load1={load1():.2f}", file=sys.stderr, flush=True)
                found = run_window(changes, args.partitions, master_url, args.master, folder, catalog)
                rows.append(found)
                print(
                    f"bench scale: changes={found['changes']} partitions={args.partitions} "
                    f"extract_s={found['extract_s']:.1f} apply_s={found['apply_s']:.1f} "
                    f"extract_driver_rss_mb={found['extract_jvm_mb'] + found['extract_py_mb']:.0f} "
                    f"apply_driver_rss_mb={found['apply_jvm_mb'] + found['apply_py_mb']:.0f} "
                    f"extract_jvm_mb={found['extract_jvm_mb']:.0f} extract_py_mb={found['extract_py_mb']:.0f} "
                    f"apply_jvm_mb={found['apply_jvm_mb']:.0f} apply_py_mb={found['apply_py_mb']:.0f} "
                    f"changes_per_s={found['changes'] / (found['extract_s'] + found['apply_s']):.0f}",
                    flush=True,
                )
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    if len(rows) > 1:
        low, high = rows[0], rows[-1]

        def growth(key_jvm: str, key_py: str | None = None) -> str:
            before = low[key_jvm] + (low[key_py] if key_py else 0)
            after = high[key_jvm] + (high[key_py] if key_py else 0)
            return f"{after / before:.2f}" if before else "n/a"

        print(
            f"bench scale: rss_growth changes={low['changes']}->{high['changes']} "
            f"extract={growth('extract_jvm_mb', 'extract_py_mb')} apply={growth('apply_jvm_mb', 'apply_py_mb')} "
            f"extract_py={growth('extract_py_mb')} apply_py={growth('apply_py_mb')}",
            flush=True,
        )
    return 0


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def cluster(master: str, folder: Path):
    """The master URL to submit to: ``local[2]``, or a standalone master and worker here."""
    if master == "local":
        yield "local[2]"
        return
    from demo.cluster import StandaloneSpark

    with StandaloneSpark(folder / "standalone", cores=2, memory="4g") as spark:
        yield spark.master_url


if __name__ == "__main__":
    sys.exit(main())
