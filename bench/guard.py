"""Benchmark of a small window's apply against targets of growing size.

    .venv/bin/python bench/guard.py [--targets 200000,2000000] [--window-changes 1000] [--repeats 3]

For each target size K: a changelog whose first window inserts K keys of one Spanner-like
table (applied once, not timed), then windows of ``--window-changes`` updates each, spread
over the target's keys (half with partial images). The timed runs apply those windows one by
one, alternating the two ways of reading the fold's guard (``spark_jobs/apply/guard_keys.py``):
the guard rows of the window's own keys only (the default), and every key's guard rows
(``guard_filter_max_rows: 0``), so both are measured in the same warm session on the same
target. Medians of ``--repeats`` runs each. ``--write-mode merge-on-read`` runs it all on
targets that take the window's changes as delete files (``targets.write_mode``).

Prints one line per size and one for the growth (each run's timings go to stderr):
``bench guard: write_mode=<m> target_rows=<K> window_changes=<n> seconds=<s> unfiltered_seconds=<u>
ratio=<s/u>`` and ``bench guard: write_mode=<m> target_rows=<a>-><b> growth=<seconds b / seconds a>
unfiltered_growth=<...>``
Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from airflow_cdc.model import Window  # noqa: E402
from bench.apply import STREAM, T0, append_windows, bench_session, change_columns, create_changelog  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", default="200000,2000000", help="target sizes in rows, comma-separated")
    parser.add_argument("--window-changes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each way; medians are printed")
    parser.add_argument("--warmups", type=int, default=1, help="untimed runs of each way first, per size")
    parser.add_argument("--write-mode", default="copy-on-write", choices=("copy-on-write", "merge-on-read"),
                        help="the targets' targets.write_mode (default copy-on-write)")
    args = parser.parse_args(argv)
    try:
        args.targets = [int(size) for size in args.targets.split(",")]
    except ValueError:
        parser.error(f"--targets {args.targets!r} must be comma-separated integers, e.g. 200000,2000000")
    if min(args.targets) < args.window_changes or args.window_changes < 1 or args.repeats < 1:
        parser.error("each target size must be at least --window-changes (>= 1), and --repeats >= 1")
    return args


def window(index: int) -> Window:
    return Window(STREAM, T0 + timedelta(hours=index), T0 + timedelta(hours=index + 1))


def build(spark, table: str, keys: int, window_changes: int, small_windows: int) -> None:
    """Window 0 inserts ``keys`` keys; windows 1..``small_windows`` update ``window_changes``
    keys each (a different spread of keys per window)."""
    from pyspark.sql import functions as F

    t0_micros = int(T0.timestamp()) * 1_000_000
    hour = 3_600_000_000
    inserts = spark.range(keys).select(
        F.col("id").alias("key"), F.col("id").alias("n"), F.lit(0).cast("bigint").alias("w"),
        F.lit("INSERT").alias("op"), F.lit(False).alias("partial"),
    )
    updates = spark.range(window_changes * small_windows).select(
        (F.col("id") % window_changes).alias("j"), (F.col("id") / window_changes).cast("bigint").alias("w0"),
        F.col("id"),
    ).select(
        ((F.col("j") * 7919 + F.col("w0") * 104729) % keys).alias("key"),
        (F.col("id") + keys).alias("n"), (F.col("w0") + 1).alias("w"),
        F.lit("UPDATE").alias("op"), (F.col("id") % 2 == 0).alias("partial"),
    )
    frame = inserts.unionByName(updates)
    micros = F.lit(t0_micros) + F.col("w") * hour + F.col("n") % 3_000_000_000
    window_ids = [window(index).window_id for index in range(small_windows + 1)]
    window_id = F.element_at(F.array(*[F.lit(w) for w in window_ids]), (F.col("w") + 1).cast("int"))
    rows = frame.select(*change_columns(F.col("key"), F.col("n"), F.col("op"), F.col("partial"), micros, window_id))
    create_changelog(spark, table)
    append_windows(spark, table, rows, window_ids)


def apply_one(spark, namespace: str, index: int, unfiltered: bool, write_mode: str = "copy-on-write") -> float:
    from airflow_cdc.spark_jobs.apply import apply_window

    config = {
        "catalog": "lake",
        "stream": STREAM,
        "window_id": window(index).window_id,
        "changelog_table": f"{namespace}.changelog",
        "targets": {"namespace": namespace, "write_mode": write_mode},
        "policies": {"on_dead_letter": "fail"},
    }
    if unfiltered:
        config["guard_filter_max_rows"] = 0
    started = time.perf_counter()
    apply_window(spark, config)
    return time.perf_counter() - started


def measure(spark, keys: int, args) -> tuple[float, float]:
    namespace = f"g{keys}"
    runs = args.warmups + args.repeats
    build(spark, f"lake.{namespace}.changelog", keys, args.window_changes, 2 * runs)
    apply_one(spark, namespace, 0, unfiltered=False, write_mode=args.write_mode)  # the target's K rows
    filtered, unfiltered = [], []
    for run in range(runs):
        # Alternate the two ways, so a drift of the machine touches both alike.
        on = apply_one(spark, namespace, 2 * run + 1, unfiltered=False, write_mode=args.write_mode)
        off = apply_one(spark, namespace, 2 * run + 2, unfiltered=True, write_mode=args.write_mode)
        print(f"bench guard: target_rows={keys} run {run + 1}{' (warm-up)' if run < args.warmups else ''}: "
              f"seconds={on:.2f} unfiltered_seconds={off:.2f}", file=sys.stderr)
        if run >= args.warmups:
            filtered.append(on)
            unfiltered.append(off)
    return statistics.median(filtered), statistics.median(unfiltered)


def main(argv=None) -> int:
    args = parse_args(argv)
    warehouse = Path(tempfile.mkdtemp(prefix="cdc-bench-guard-"))
    spark = bench_session("bench-guard", warehouse)
    try:
        results = {}
        for keys in args.targets:
            seconds, unfiltered = measure(spark, keys, args)
            results[keys] = seconds, unfiltered
            print(f"bench guard: write_mode={args.write_mode} target_rows={keys} "
                  f"window_changes={args.window_changes} seconds={seconds:.2f} "
                  f"unfiltered_seconds={unfiltered:.2f} ratio={seconds / unfiltered:.2f}", flush=True)
        if len(args.targets) > 1:
            small, large = args.targets[0], args.targets[-1]
            print(f"bench guard: write_mode={args.write_mode} target_rows={small}->{large} "
                  f"growth={results[large][0] / results[small][0]:.2f} "
                  f"unfiltered_growth={results[large][1] / results[small][1]:.2f}", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(warehouse, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
