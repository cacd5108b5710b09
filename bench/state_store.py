"""Benchmark of the state store: plan and commit windows of 10,000 partitions on SQLite and
PostgreSQL, each step against a 100-partition baseline measured in the same run.

    .venv/bin/python bench/state_store.py [--partitions 10000] [--baseline 100] [--repeats 3]
        [--databases sqlite,postgresql]

Per database and size, a fresh store (SQLite: a file in a temporary folder; PostgreSQL 15 on
127.0.0.1, trust auth, as ``bash .ci/ensure-postgres`` starts it: a throwaway database, or
``$AIRFLOW_CDC_BENCH_POSTGRES_URL``'s server) runs a stream's first two windows, timing each
``StateStore`` call as the protocol makes it:

1. ``plan_first``: ``plan_window`` of the first window with ``n`` initial positions (creates
   the partitions and the plan);
2. ``extract``: ``mark_extracted``;
3. ``commit_first``: ``commit_window`` with ``n`` outcomes, every partition continuing;
4. ``plan_next``: ``plan_window`` of the next window (reads the ``n`` RUNNING partitions);
5. ``commit_next``: ``commit_window`` of it, 1% of the partitions splitting into two children
   each (created READY), the others continuing;
6. ``gate_reads``: what the gate and the commit task read afterwards, ``window_partitions``
   and ``list_partitions``.

Each size runs ``--repeats`` times (a fresh stream each time); the median of each step is
printed. ``per_partition_ratio`` is (seconds / n) over (baseline seconds / baseline n): 1.0 is
linear, more is worse than linear (a step quadratic in n shows a ratio growing with n), less
means a fixed cost dominates the baseline. Lines on stdout::

    bench state_store: db=<db> partitions=<n> step=<step> seconds=<s> baseline_seconds=<b>
        per_partition_ratio=<r> us_per_partition=<u>
    bench state_store: db=<db> partitions=<n> plan_and_commit_seconds=<s>   (steps 1-5 summed)

Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from airflow_cdc.model import ChildPartition, PartitionOutcome, PartitionPosition, Window  # noqa: E402

POSTGRES_URL = os.environ.get(
    "AIRFLOW_CDC_BENCH_POSTGRES_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
)
T0 = datetime(2025, 1, 6, 8, tzinfo=timezone.utc)
HOUR = timedelta(hours=1)
STEPS = ("plan_first", "extract", "commit_first", "plan_next", "commit_next", "gate_reads")
SPLIT_EVERY = 100  # 1% of the partitions split in the second window


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--baseline", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--databases", default="sqlite,postgresql")
    args = parser.parse_args(argv)
    args.databases = tuple(d.strip() for d in args.databases.split(",") if d.strip())
    unknown = set(args.databases) - {"sqlite", "postgresql"}
    if unknown or not args.databases:
        parser.error(f"--databases {sorted(unknown)} unknown: use sqlite, postgresql or both")
    if args.baseline < 1 or args.partitions < args.baseline or args.repeats < 1:
        parser.error("need 1 <= --baseline <= --partitions and --repeats >= 1")
    return args


@contextmanager
def database(kind: str, folder: Path) -> Iterator[str]:
    """The URL of an empty database of ``kind``, removed afterwards."""
    if kind == "sqlite":
        path = folder / f"state-{uuid.uuid4().hex[:8]}.db"
        yield f"sqlite:///{path}"
        return
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    name = f"cdc_bench_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def token(stream: str, index: int) -> str:
    return f"{stream}-partition-{index:06d}"


def run_stream(url: str, partitions: int) -> dict[str, float]:
    """One stream's first two windows; seconds per step."""
    from airflow_cdc.state import StateStore

    stream = f"bench_{uuid.uuid4().hex[:8]}"
    first, second = Window(stream, T0, T0 + HOUR), Window(stream, T0 + HOUR, T0 + 2 * HOUR)
    owner = "bench-run"
    timings: dict[str, float] = {}

    def timed(step: str, call, *args):
        started = time.perf_counter()
        result = call(*args)
        timings[step] = time.perf_counter() - started
        return result

    with StateStore(url) as store:
        store.migrate()
        store.register_stream(stream, "spanner_change_stream", "fingerprint")
        initial = [PartitionPosition(token(stream, i), T0) for i in range(partitions)]
        plan = timed("plan_first", store.plan_window, first, owner, 3600, initial)
        assert len(plan.positions) == partitions
        timed("extract", store.mark_extracted, first, owner, 1)
        continuing = [
            PartitionOutcome(p.partition_id, False, first.end, records=10, resume_position=p.partition_id)
            for p in plan.positions
        ]
        timed("commit_first", store.commit_window, first, owner, continuing, {"changes": 10 * partitions})
        plan = timed("plan_next", store.plan_window, second, owner, 3600)
        assert len(plan.positions) == partitions
        store.mark_extracted(second, owner, 2)
        split_at = second.start + timedelta(minutes=30)
        outcomes = []
        for index, position in enumerate(plan.positions):
            if index % SPLIT_EVERY == 0:
                children = tuple(
                    ChildPartition(f"{position.partition_id}-{half}", split_at, (position.partition_id,))
                    for half in "ab"
                )
                outcomes.append(PartitionOutcome(position.partition_id, True, split_at, records=5, children=children))
            else:
                outcomes.append(PartitionOutcome(
                    position.partition_id, False, second.end, records=10, resume_position=position.partition_id))
        record = timed("commit_next", store.commit_window, second, owner, outcomes, {"changes": 10 * partitions})
        assert record.committed

        def gate_reads():
            return store.window_partitions(second), store.list_partitions(stream)

        read, known = timed("gate_reads", gate_reads)
        splits = len(range(0, partitions, SPLIT_EVERY))
        assert len(read) == partitions and len(known) == partitions + 2 * splits, (len(read), len(known))
    return timings


def measure(kind: str, partitions: int, repeats: int, folder: Path) -> dict[str, float]:
    runs = []
    for _ in range(repeats):
        with database(kind, folder) as url:
            runs.append(run_stream(url, partitions))
    return {step: statistics.median(run[step] for run in runs) for step in STEPS}


def main(argv=None) -> int:
    args = parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="cdc-bench-state-"))
    try:
        for kind in args.databases:
            print(f"bench state_store: {kind}: load1={os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
            measure(kind, args.baseline, 1, folder)  # warm: imports, first connections
            base = measure(kind, args.baseline, args.repeats, folder)
            full = measure(kind, args.partitions, args.repeats, folder)
            for step in STEPS:
                ratio = (full[step] / args.partitions) / (base[step] / args.baseline)
                print(
                    f"bench state_store: db={kind} partitions={args.partitions} step={step} "
                    f"seconds={full[step]:.3f} baseline_seconds={base[step]:.4f} "
                    f"per_partition_ratio={ratio:.2f} "
                    f"us_per_partition={full[step] / args.partitions * 1e6:.0f}",
                    flush=True,
                )
            total = sum(full[step] for step in STEPS if step != "gate_reads")
            print(f"bench state_store: db={kind} partitions={args.partitions} "
                  f"plan_and_commit_seconds={total:.2f}", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
