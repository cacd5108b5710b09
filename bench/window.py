"""Benchmark of one window end to end through real Airflow, against the floor of a Spark step.

    .venv/bin/python bench/window.py            # windows of 0 and 1,000 changes (make bench)
    .venv/bin/python bench/window.py --full     # 0, 1,000, 100,000 and 1,000,000 changes

For each size, a fresh world (not timed): an Airflow home (a copy of one migrated metadata
DB), a state store, an Iceberg warehouse, and the Spanner emulator on 127.0.0.1 serving a
generated history with no partition churn (``--partitions`` partitions) at a rate that puts
the requested number of changes in each measured window. The example DAG
(``dags/spanner_change_stream_to_iceberg.py``, configured by environment as ``make demo``
configures it, plus the warm driver: ``CDC_WARM_DRIVER_IDLE_SECONDS``) then runs its windows
through ``dag.test``, all in one process of their own (as a long-running Airflow runs window
after window, the measured windows pay neither an interpreter start nor Airflow's one-time
set-up such as its in-process API app):

1. ``--warm-ups`` windows of one minute each (default 3), ending at T0, each holding a
   tenth of a measured window's changes: the stream's first window creates its changelog and
   target tables, and the first job starts the warm Spark driver
   (:mod:`airflow_cdc.spark.warm`), whose JIT then compiles the plans every window runs;
2. ``--measured`` windows of ten minutes each from T0 (default 3 up to 10,000 changes, else
   1): the stream's steady state, each right after one floor.

``window_seconds`` is the wall time of the median measured window's ``dag.test`` call (its
five protocol tasks and the DAG's ``report`` task, as Airflow ran them); the per-task
figures are the durations of that window's task instances as Airflow recorded them. The
floor, measured in the same run (the median of the floors, one right before each measured
window): one bare ``spark-submit`` (the local runner's command line) of an empty PySpark
application with the same Iceberg configuration (``iceberg_job_spec``), from its start to its
exit: the JVM and the SparkSession every Spark step pays at least once.

With ``--cold``, each size also runs in a world of its own with a spark-submit per job (the
warm driver off; apply fused and the empty-window rule on), printed with
``design=spark-submit``. With ``--baseline``, also with all three strategies off (two Spark
applications per window), printed first with ``design=baseline``.

Prints one line per size (details on stderr):
``bench window: changes=<n> window_seconds=<s> floor_seconds=<s> ratio=<r> plan=<s>
extract=<s> commit=<s> apply=<s> gate=<s>``, where ``changes`` is the number the window
recorded. The target is ratio <= 2.0 for 0 and 1,000 changes. Not a test: nothing here
asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DAG_ID = "spanner_change_stream_to_iceberg"
DAG_FILE = ROOT / "dags" / "spanner_change_stream_to_iceberg.py"
GROUP = "all_changes"
STEPS = ("plan", "extract", "commit", "apply", "gate")
# The measured window starts at T0; the warm-up window is the minute before it.
T0 = datetime(2025, 1, 6, 8, 10, tzinfo=timezone.utc)
WARM_UP = timedelta(minutes=1)
MEASURED = timedelta(minutes=10)
QUICK_SIZES = (0, 1_000)
FULL_SIZES = (0, 1_000, 100_000, 1_000_000)
# The example DAG's switches for two of the window's strategies (apply fused into the extract's
# Spark application; the empty-window rule): --baseline turns both off.
BASELINE = {"CDC_FUSE_APPLY": "false", "CDC_EMPTY_WINDOW_PROBE_LIMIT": "-1"}
# The warm driver (airflow_cdc.spark.warm), on in the default design: started by the warm-up
# window's job, it runs the measured window's jobs. --cold measures the same window with a
# spark-submit per job instead (design=spark-submit).
WARM_IDLE_SECONDS = "600"
EMPTY_APPLICATION = "from pyspark.sql import SparkSession\nSparkSession.builder.getOrCreate().stop()\n"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="the issue's sizes: 0, 1k, 100k, 1M")
    parser.add_argument("--sizes", help="comma-separated change counts (overrides --full)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the stream (default 4)")
    parser.add_argument("--base", help="working folder (default: a temporary one, removed)")
    parser.add_argument("--driver-memory", default="4g",
                        help="SPARK_DRIVER_MEMORY of every spark-submit (default 4g)")
    parser.add_argument("--baseline", action="store_true",
                        help="also each window with both strategies off (a line with design=baseline)")
    parser.add_argument("--warm-ups", type=int, default=3,
                        help="one-minute windows run before the measured one (default 3)")
    parser.add_argument("--measured", type=int, default=0,
                        help="ten-minute windows measured, the median reported (default 3 for "
                             "sizes up to 10,000, else 1)")
    parser.add_argument("--cold", action="store_true",
                        help="also each window with a spark-submit per job, the warm driver off "
                             "(a line with design=spark-submit)")
    parser.add_argument("--verbose", action="store_true",
                        help="INFO task logs in <base>/changes-<n>/windows.log (default: warnings)")
    parser.add_argument("--profile", action="store_true",
                        help="cProfile each dag.test into <base>/changes-<n>/window-<end>.prof")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: run one window's DAG run
    args = parser.parse_args(argv)
    if args.sizes:
        args.sizes = tuple(int(s) for s in args.sizes.split(","))
    else:
        args.sizes = FULL_SIZES if args.full else QUICK_SIZES
    if any(s < 0 for s in args.sizes) or args.partitions < 1 or args.warm_ups < 1:
        parser.error("--sizes must be counts >= 0, --partitions and --warm-ups at least 1")
    return args


# --- the child: the two windows of one size, in one process ------------------------------------
def run_child(plan_json: str) -> int:
    """Run the warm-up window, the floor, then the measured window, each window with ``dag.test``
    in this process (as a long-running Airflow would, the measured window pays no interpreter
    start nor Airflow's one-time set-up); print the figures as JSON."""
    plan = json.loads(plan_json)
    for warm_up_end in plan["warm_up_ends"]:
        warm = run_dag_window(datetime.fromisoformat(warm_up_end), plan["warm_up_minutes"])
        print(f"bench window: warm-up window ending {warm_up_end}: {warm['seconds']:.1f} s",
              file=sys.stderr, flush=True)
    # Each measured window follows a floor (a bare spark-submit): the figures are those of the
    # median window and the median floor (on a shared machine single runs vary widely).
    floors, windows = [], []
    for end_text in plan["ends"]:
        end = datetime.fromisoformat(end_text)
        floors.append(floor_seconds(Path(plan["base"])))
        window = run_dag_window(end, plan["minutes"])
        windows.append({**window, "changes": recorded_changes(end)})
        print(f"bench window: window ending {end_text}: {window['seconds']:.1f} s",
              file=sys.stderr, flush=True)
    print(f"bench window: floors {', '.join(f'{f:.1f}' for f in floors)} s", file=sys.stderr, flush=True)
    measured = sorted(windows, key=lambda w: w["seconds"])[len(windows) // 2]
    measured.update(floor_seconds=statistics.median(floors))
    print("BENCH-WINDOW " + json.dumps(measured), flush=True)
    return 0


def run_dag_window(end: datetime, minutes: int) -> dict:
    """The DAG's window ending ``end`` (``minutes`` long) through ``dag.test``: its wall time
    and the durations of its task instances; raises unless the run succeeded."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    os.environ["CDC_WINDOW_MINUTES"] = str(minutes)  # read when the DAG file is parsed
    bag = DagBag(str(DAG_FILE))
    dag = bag.get_dag(DAG_ID)
    if dag is None:
        raise SystemExit(f"bench window: the DAG does not import: {bag.import_errors}")
    profile_to = os.environ.get("BENCH_WINDOW_PROFILE")
    profiler = None
    if profile_to:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    started = time.perf_counter()
    run = dag.test(logical_date=end, run_after=end)
    seconds = time.perf_counter() - started
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(f"{profile_to}/window-{end:%H%M}.prof")
    if not str(run.state).lower().endswith("success"):
        raise SystemExit(f"bench window: the run ending {end} ended {run.state}")
    with create_session() as session:
        instances = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == DAG_ID, TaskInstance.run_id == run.run_id)
        ).all()
        tasks = {ti.task_id: ti.duration for ti in instances}
    return {"seconds": seconds, "tasks": tasks}


def floor_seconds(work: Path) -> float:
    """One bare spark-submit of an empty PySpark application with the pipeline's Iceberg conf."""
    from dataclasses import replace

    from airflow_cdc.spark.iceberg import IcebergCatalog
    from airflow_cdc.spark.job import iceberg_job_spec
    from airflow_cdc.spark.runners import LocalSparkRunner

    application = work / "empty_application.py"
    application.write_text(EMPTY_APPLICATION)
    spec = iceberg_job_spec("extract", IcebergCatalog(warehouse=str(work / "floor-warehouse")), [],
                            name="bench-floor")
    spec = replace(spec, application=str(application))
    runner = LocalSparkRunner(master="local[*]")
    command, env = runner.command(spec), runner.environment(spec)
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def recorded_changes(end: datetime) -> int:
    """The changes the state store recorded for the window ending ``end``."""
    from airflow_cdc.state import StateStore

    record = StateStore(os.environ["AIRFLOW_CDC_STATE_URL"]).get_window("allchanges", end - MEASURED)
    return int((record.counts or {}).get("changes", 0))


# --- the parent ---------------------------------------------------------------------------------
def migrated_airflow_db(folder: Path) -> Path:
    """One migrated Airflow metadata DB, copied into each size's Airflow home."""
    home = folder / "airflow-template"
    home.mkdir(parents=True)
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                   check=True, stdout=subprocess.DEVNULL, env=env)
    return home / "airflow.db"


def window_env(base: Path, history, emulator_host: str, template_db: Path, args) -> dict[str, str]:
    home = base / "airflow"
    home.mkdir(parents=True)
    shutil.copy(template_db, home / "airflow.db")
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO" if args.verbose else "WARNING",
        **({"BENCH_WINDOW_PROFILE": str(base)} if args.profile else {}),
        "AIRFLOW_CDC_WAREHOUSE": str(base / "warehouse"),
        "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
        "AIRFLOW_CDC_STATE_URL": f"sqlite:///{base / 'cdc_state.db'}",
        "CDC_START": history.created_at.isoformat(),
        "CDC_SPANNER_STREAM": history.stream_name,
        "CDC_SPANNER_TABLES": ",".join(t.name for t in history.tables),
        "CDC_DEFERRABLE": "false",
        "SPANNER_EMULATOR_HOST": emulator_host,
        "PYSPARK_PYTHON": sys.executable,
        # Every spark-submit's driver heap (floor included); the default 1 GB does not hold a
        # window of 1M changes (see bench/extract.py).
        "SPARK_DRIVER_MEMORY": args.driver_memory,
    }


def run_windows(env: dict[str, str], plan: dict, log: Path) -> dict:
    """The child process of one size; its figures (exits if a window did not succeed)."""
    with open(log, "w") as sink:  # the tasks' logs
        done = subprocess.run([sys.executable, __file__, "--child", json.dumps(plan)],
                              env=env, stdout=sink, stderr=subprocess.STDOUT)
    found = [line for line in log.read_text().splitlines() if line.startswith("BENCH-WINDOW ")]
    if done.returncode != 0 or not found:
        raise SystemExit(f"bench window: the windows of {plan['base']} failed; see {log}")
    return json.loads(found[-1].split(" ", 1)[1])


def measure(size: int, folder: Path, template_db: Path, args) -> list[str]:
    from airflow_cdc_emulators.spanner import SpannerChangeStreamEmulator, generate_history
    from airflow_cdc.spark.warm import stop_warm_drivers

    base = folder / f"changes-{size}"
    base.mkdir()
    # The warm-up minute holds a tenth of the changes (a tenth of the measured window's rate
    # x length), so both windows read the same kind of history; an empty window's history
    # ends at T0 and the emulator's clock stands at its end.
    measured_windows = args.measured if args.measured else (3 if size <= 10_000 else 1)
    duration = WARM_UP * args.warm_ups + (MEASURED * measured_windows if size else timedelta(0))
    rate = size / MEASURED.total_seconds() if size else 200 / WARM_UP.total_seconds()
    began = time.perf_counter()
    history = generate_history(
        seed=27, start=T0 - WARM_UP * args.warm_ups, duration=duration, changes_per_second=rate,
        initial_partitions=args.partitions, splits=0, merges=0, three_way_merges=0, quiet_periods=0,
    )
    print(f"bench window: {size}: history of {history.change_count} changes in "
          f"{time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
    designs = [("", {"CDC_WARM_DRIVER_IDLE_SECONDS": WARM_IDLE_SECONDS})]
    if args.cold:  # in a world of its own: fused apply and the empty-window rule, no warm driver
        designs.insert(0, ("spark-submit", {}))
    if args.baseline:  # first, in a world of its own: all three strategies off
        designs.insert(0, ("baseline", BASELINE))
    lines = []
    with SpannerChangeStreamEmulator(history, now=T0 + MEASURED * measured_windows) as emulator:
        for design, knobs in designs:
            world = base / (design or "default")
            world.mkdir()
            env = {**window_env(world, history, emulator.emulator_host, template_db, args),
                   "AIRFLOW_CDC_WARM_DIR": str(world / "warm"), **knobs}
            plan = {
                "base": str(world),
                "warm_up_ends": [(T0 - WARM_UP * (args.warm_ups - 1 - n)).isoformat()
                                 for n in range(args.warm_ups)],
                "warm_up_minutes": int(WARM_UP.total_seconds() // 60),
                "ends": [(T0 + MEASURED * (n + 1)).isoformat() for n in range(measured_windows)],
                "minutes": int(MEASURED.total_seconds() // 60),
            }
            try:
                measured = run_windows(env, plan, world / "windows.log")
            finally:
                stop_warm_drivers(world / "warm")
            tasks, seconds, floor = measured["tasks"], measured["seconds"], measured["floor_seconds"]
            steps = " ".join(f"{step}={tasks.get(f'{GROUP}.{step}') or 0:.2f}" for step in STEPS)
            lines.append(
                f"bench window: changes={measured['changes']} "
                + (f"design={design} " if design else "")
                + f"window_seconds={seconds:.2f} floor_seconds={floor:.2f} "
                f"ratio={seconds / floor:.2f} {steps}"
            )
    return lines


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args.child)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    own = args.base is None
    folder = Path(args.base or tempfile.mkdtemp(prefix="cdc-bench-window-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        template_db = migrated_airflow_db(folder)
        floor_seconds(folder)  # the first spark-submit of the run warms the page cache
        for size in args.sizes:
            for line in measure(size, folder, template_db, args):
                print(line, flush=True)
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
