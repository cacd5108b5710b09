"""Benchmark of the extract job's read rate against the raw reader of the same data on the same cores.

    .venv/bin/python bench/extract.py            # quick (make bench): 100,000 changes
    .venv/bin/python bench/extract.py --full     # the issue's size: 1,000,000 changes

Two sources, each read twice in the same run, one reader at a time:

* ``spanner_change_stream``: one window of ``--changes`` changes over ``--partitions`` (16)
  partitions of a Spanner change stream, served by the emulator's gRPC server in this
  process from :class:`bench.support.spanner_scale.ScaleHistory` (records made on demand,
  no partition churn; single-row writes, 8-row batches and two-partition transactions).

  - extract: the extract job (``spark_jobs/extract.py``) as ``CdcExtractOperator`` submits it
    (``iceberg_job_spec``, ``LocalSparkRunner``, ``local[*]``), from ``spark-submit`` to its
    exit: the initial query, the partitions in parallel through the real
    ``google-cloud-spanner`` client, parsing into change rows, the transaction check, the
    one tagged changelog commit;
  - raw: the same partition queries (``build_query``, the same client set-up as the source,
    ``SpannerConnection.open_database``) in as many processes as Spark has cores, each
    iterating the rows the client decodes, nothing else; timed from the first query to the
    last row (the processes are started before).

* ``datastream``: one window of ``--changes`` Datastream MySQL events in ``--partitions``
  JSON-lines files (the seed's event shape: payload, source_metadata with log file and
  position, primary keys).

  - extract: the same extract job (Spark reads the files natively, ``read_window``);
  - raw: ``pyarrow.json.read_json`` of each file, in as many processes as Spark has cores.

The extract job's driver heap is ``--driver-memory`` (4g): with ``local[*]`` the executors are
threads of the driver, and the 1M-change window is not known to fit Spark's 1 GB default.

Raw read and extract alternate, ``--repeats`` times each (3), each extract on a fresh
changelog and state; the rates printed are the medians. The same read's time drifts on a
shared machine within minutes, so a raw read and an extract measured apart would compare two
machines: alternated, a slow spell slows both sides.

Prints one line per source (each run's figures on stderr):
``bench extract: source=<kind> changes=<n> extract_per_s=<r> raw_per_s=<r> ratio=<r>``
(``ratio`` = extract_per_s / raw_per_s, both on the same cores; the target is >= 0.8).
Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
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

QUICK_CHANGES = 100_000
FULL_CHANGES = 1_000_000
SOURCES = ("spanner_change_stream", "datastream")
OWNER = "bench-extract"
START = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help=f"{FULL_CHANGES:,} changes")
    parser.add_argument("--changes", type=int, help=f"changes in the window (default {QUICK_CHANGES:,})")
    parser.add_argument("--partitions", type=int, default=16, help="partitions / files (default 16)")
    parser.add_argument("--source", action="append", choices=SOURCES, help="only these sources")
    parser.add_argument("--base", help="working folder (default: a temporary one, removed)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="raw reads and extracts, alternated; medians are printed (default 3)")
    parser.add_argument("--driver-memory", default="4g",
                        help="the extract job's SPARK_DRIVER_MEMORY (default 4g; see above)")
    args = parser.parse_args(argv)
    args.changes = args.changes or (FULL_CHANGES if args.full else QUICK_CHANGES)
    args.source = args.source or list(SOURCES)
    if args.changes < args.partitions or args.partitions < 2:
        parser.error("--partitions must be at least 2 and at most --changes")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


def alternated(source: str, changes: int, repeats: int, raw, extract, folder: Path) -> str:
    """``raw()`` and ``extract(work)`` (each returns its seconds) run in turn ``repeats`` times,
    each extract in a fresh folder under ``folder``; the line of their median rates."""
    raw_seconds, extract_seconds = [], []
    for run in range(repeats):
        raw_seconds.append(raw())
        work = folder / f"run-{run}"
        shutil.rmtree(work, ignore_errors=True)  # a --base used before: its window is committed there
        work.mkdir(parents=True)
        extract_seconds.append(extract(work))
        print(f"bench extract: {source} run {run + 1}: raw read {raw_seconds[-1]:.1f} s in {cores()} "
              f"processes, extract job {extract_seconds[-1]:.1f} s", file=sys.stderr, flush=True)
    return line(source, changes, changes / statistics.median(extract_seconds),
                changes / statistics.median(raw_seconds))


def cores() -> int:
    return os.cpu_count() or 1


def run_extract_job(plan_path: Path, work: Path, catalog, changes: int) -> float:
    """The extract job as the operator submits it; its wall time (raises if it fails, or if it
    wrote other than ``changes`` changes)."""
    from airflow_cdc.spark.job import iceberg_job_spec
    from airflow_cdc.spark.runners import LocalSparkRunner

    spec = iceberg_job_spec(
        "extract", catalog,
        ["--plan", str(plan_path), "--outcome", str(work / "outcome.json"),
         "--result", str(work / "extract-result.json")],
        name="bench-extract",
    )
    runner = LocalSparkRunner(master="local[*]")
    log = work / "extract.log"
    started = time.perf_counter()
    with open(log, "w") as sink:
        done = subprocess.run(runner.command(spec), env=runner.environment(spec), stdout=sink,
                              stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"bench extract: the extract job failed, see {log}")
    written = json.loads((work / "extract-result.json").read_text())["counts"].get("changes")
    if written != changes:
        raise SystemExit(f"bench extract: the extract wrote {written} changes of {changes}")
    return seconds


def timed_pool(worker, initializer, initargs, items) -> tuple[float, list]:
    """Run ``worker`` over ``items`` in ``cores()`` spawned processes (started and warmed
    first, not timed); the wall time of the work and its results."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(cores(), initializer=initializer, initargs=initargs) as pool:
        pool.map(_ready, range(cores()))
        started = time.perf_counter()
        results = list(pool.imap_unordered(worker, items))
        return time.perf_counter() - started, results


def _ready(_: int) -> None:
    return None


# --- Spanner ----------------------------------------------------------------------------------
_DATABASE = None
_QUERY: dict = {}


def _open_spanner(host: str, stream_name: str, start_iso: str, end_iso: str) -> None:
    global _DATABASE
    from airflow_cdc.sources.spanner.reader import SpannerConnection

    _DATABASE = SpannerConnection("p", "i", "db", emulator_host=host).open_database()
    _QUERY.update(stream=stream_name, start=datetime.fromisoformat(start_iso),
                  end=datetime.fromisoformat(end_iso))


def _read_spanner_partition(token: str) -> int:
    """Raw: one partition's query through the client; the data change records it returned."""
    from airflow_cdc.sources.spanner.query import GOOGLE_SQL, build_query

    query = build_query(GOOGLE_SQL, _QUERY["stream"], _QUERY["start"],
                        _QUERY["end"] - timedelta(microseconds=1), token, 10_000)
    records = 0
    with _DATABASE.snapshot() as snapshot:
        for row in snapshot.execute_sql(query.sql, params=query.params, param_types=query.param_types):
            for record in row[0]:
                records += len(record[0])
    return records


def bench_spanner(args, folder: Path) -> str:
    from airflow_cdc.spark.iceberg import IcebergCatalog
    from airflow_cdc_emulators.spanner import SpannerEmulator
    from airflow_cdc.model import PartitionPosition, Window
    from airflow_cdc.pipeline.protocol import StreamConfig, plan_window
    from airflow_cdc.sources.spanner.query import INITIAL_PARTITION
    from airflow_cdc.state import StateStore
    from bench.support.spanner_scale import ScaleHistory

    history = ScaleHistory(args.changes, args.partitions, start=START)
    stream_id = "bench_spanner"
    with SpannerEmulator(history) as emulator:
        window = Window(stream_id, history.created_at, history.end)

        def raw() -> float:
            seconds, found = timed_pool(
                _read_spanner_partition, _open_spanner,
                (emulator.emulator_host, history.stream_name, window.start.isoformat(),
                 window.end.isoformat()),
                [p.token for p in history.partitions],
            )
            if sum(found) != history.record_count:
                raise SystemExit(f"bench extract: the raw reader saw {sum(found)} data change records, "
                                 f"the history has {history.record_count}")
            return seconds

        def extract(work: Path) -> float:
            catalog = IcebergCatalog(warehouse=str(work / "warehouse"))
            store = StateStore(f"sqlite:///{work / 'state.db'}")
            store.migrate()
            config = StreamConfig(
                stream_id, "spanner_change_stream",
                {"kind": "spanner_change_stream", "stream_id": stream_id,
                 "stream_name": history.stream_name, "dialect": "GOOGLE_STANDARD_SQL",
                 "heartbeat_milliseconds": 10_000,
                 "connection": {"project": "p", "instance": "i", "database": "db",
                                "emulator_host": emulator.emulator_host}},
                work_root=str(work / "windows"),
            )
            plan_window(store, config, window, OWNER, 6 * 3600,
                        [PartitionPosition(INITIAL_PARTITION, window.start)], catalog.name)
            return run_extract_job(config.plan_path(window), work, catalog, history.change_count)

        return alternated("spanner_change_stream", history.change_count, args.repeats, raw, extract, folder)


# --- Datastream -------------------------------------------------------------------------------
def _read_json_file(path: str) -> int:
    """Raw: one event file read into Arrow; its rows."""
    from pyarrow import json as pyarrow_json

    return pyarrow_json.read_json(path).num_rows


def datastream_files(folder: Path, changes: int, files: int) -> list[Path]:
    """``changes`` MySQL CDC events of one table (insert, then updates, some deletes and
    re-inserts per key) in ``files`` JSON-lines files, binlog positions in order."""
    shutil.rmtree(folder, ignore_errors=True)  # a --base used before
    folder.mkdir(parents=True)
    keys = max(1, changes // 5)
    paths = []
    per_file = -(-changes // files)
    number = 0
    for index in range(files):
        path = folder / f"shop_orders_{index:04d}.jsonl"
        with open(path, "w") as out:
            for _ in range(min(per_file, changes - number)):
                key, visit = number % keys, number // keys
                change = ("INSERT", "UPDATE", "UPDATE", "DELETE", "INSERT")[visit % 5]
                when = START + timedelta(microseconds=number * 3000 + 1)
                out.write(json.dumps({
                    "stream_name": "projects/p/locations/l/streams/shop",
                    "read_method": "mysql-cdc-binlog",
                    "object": "shop_orders",
                    "schema_key": "shop_orders-schema",
                    "uuid": f"00000000-0000-4000-8000-{number:012d}",
                    "read_timestamp": (when + timedelta(seconds=2)).isoformat(),
                    "source_timestamp": when.isoformat(),
                    "sort_keys": [],
                    "source_metadata": {
                        "log_file": "mysql-bin.000001", "log_position": 100 + number,
                        "primary_keys": ["id"], "is_deleted": change == "DELETE",
                        "database": "shop", "table": "orders", "change_type": change,
                    },
                    "payload": {"id": key, "status": f"s{visit}", "amount": f"{number % 1000}.50",
                                "note": f"order {key} visit {visit}"},
                }) + "\n")
                number += 1
        paths.append(path)
    return paths


def bench_datastream(args, folder: Path) -> str:
    from airflow_cdc.spark.iceberg import IcebergCatalog
    from airflow_cdc.model import PartitionPosition, Window, format_ts
    from airflow_cdc.pipeline.files import WindowPlanFile, write_private
    from airflow_cdc.pipeline.protocol import StreamConfig
    from airflow_cdc.sources.datastream import PROGRESS_PARTITION
    from airflow_cdc.sources.datastream.discovery import event_file_format

    files = datastream_files(folder / "files", args.changes, args.partitions)
    stream_id = "bench_datastream"
    window = Window(stream_id, START, START + timedelta(hours=1))
    config = StreamConfig.for_source("datastream", stream_id, {"prefix": str(folder / "files")})

    def raw() -> float:
        seconds, found = timed_pool(_read_json_file, None, (), [str(p) for p in files])
        if sum(found) != args.changes:
            raise SystemExit(f"bench extract: pyarrow read {sum(found)} events of {args.changes}")
        return seconds

    def extract(work: Path) -> float:
        catalog = IcebergCatalog(warehouse=str(work / "warehouse"))
        plan = WindowPlanFile(
            window=window,
            positions=tuple(PartitionPosition(str(f), window.start, resume_position=event_file_format(str(f)))
                            for f in files) + (PartitionPosition(PROGRESS_PARTITION, window.start),),
            pending_children=(),
            source=config.source_spec,
            changelog_table=f"{catalog.name}.{config.changelog_table}",
            options={"planned_at": format_ts(window.end + timedelta(hours=1)),
                     "allowed_lateness_seconds": 0, "idle_timeout_seconds": None,
                     "dead_letter_table": f"{catalog.name}.{config.dead_letter_table}"},
        )
        plan_path = work / "datastream-plan.json"
        write_private(plan_path, plan.to_json())
        return run_extract_job(plan_path, work, catalog, args.changes)

    return alternated("datastream", args.changes, args.repeats, raw, extract, folder)


def line(source: str, changes: int, extract_per_s: float, raw_per_s: float) -> str:
    return (f"bench extract: source={source} changes={changes} extract_per_s={extract_per_s:.0f} "
            f"raw_per_s={raw_per_s:.0f} ratio={extract_per_s / raw_per_s:.2f}")


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["SPARK_DRIVER_MEMORY"] = args.driver_memory  # spark-submit reads it
    own = args.base is None
    folder = Path(args.base or tempfile.mkdtemp(prefix="cdc-bench-extract-"))
    try:
        for source in args.source:
            bench = bench_spanner if source == "spanner_change_stream" else bench_datastream
            print(bench(args, folder / source), flush=True)
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
