"""``make demo-commit-ts``: Spanner tables read by their commit-timestamp columns, end to end.

1. Generate a deterministic 2-hour history of tables with commit-timestamp columns (a plain
   table with every column type and hard deletes, a change-log table interleaved in its
   parent, a table with a soft-delete column, a table whose commit timestamp leads its key,
   commits exactly on minute boundaries, transactions sharing a commit timestamp) and serve
   it from the Spanner emulator (:mod:`airflow_cdc_emulators.spanner`) on 127.0.0.1.
2. Run ``dags/spanner_commit_ts_to_iceberg.py`` through real Airflow (``dag.test``), one DAG
   run per 20-minute window, the emulator's clock a few seconds past each window's end (its
   version retention, one hour, is then never in the way), a key reconciliation every 3
   windows, so the last window reconciles.
3. Compare the targets with the emulator's truth at the last window end: plain tables equal
   the rows alive then (soft-deleted ones gone), change-log tables hold every row ever
   committed before it (appended, never deleted by the source's purges).

Last line: ``demo-commit-ts: OK windows=<n> rows=<n> partitions_read=<n> deletes=<n>
target_rows=<n> mismatches=0``: ``rows`` the rows read, ``partitions_read`` the Spanner
partitions executed as Spark tasks, ``deletes`` the DELETE changes (soft deletes and keys
the reconciliation found gone); every hard delete of a plain table must have been found.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

from demo.spanner import prepare_environment

ROOT = Path(__file__).resolve().parents[1]
DAG_ID = "spanner_commit_ts_to_iceberg"
STREAM_ID = "shop_commit_ts"
WINDOW = timedelta(minutes=20)
RECONCILE_EVERY = 3
CLOCK_LEAD = timedelta(seconds=3)  # the emulator's clock at a run's start: window end + this
NAMESPACE = "commit_ts"
CHANGELOG_TABLES = ("DocumentHistory", "Events")  # the DAG's change-log tables (appended)
SOFT_DELETE = {"Customers": "Deleted"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=str(ROOT / ".demo-commit-ts"), help="working folder")
    parser.add_argument("--hours", type=float, default=2.0, help="history length")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    base = Path(args.base).resolve()
    prepare_environment(base)

    from airflow_cdc_emulators.spanner import SpannerEmulator, generate_commit_timestamp_tables

    started = time.monotonic()
    database = generate_commit_timestamp_tables(seed=args.seed,
                                                duration=timedelta(hours=args.hours))
    summary = database.summary()
    print(f"demo-commit-ts: history {summary['created_at']} .. {summary['now']}: "
          f"{summary['commits']} commits, {summary['changes_by_mod_type']}, "
          f"{summary['soft_deletes']} soft deletes, {summary['shared_commit_timestamps']} shared "
          f"commit timestamps, {len(summary['whole_minute_commits'])} commits on whole minutes",
          flush=True)
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                   check=True, stdout=subprocess.DEVNULL)
    with SpannerEmulator(tables=database) as emulator:
        os.environ.update({
            "SPANNER_EMULATOR_HOST": emulator.emulator_host,
            "CDC_START": database.created_at.isoformat(),
            "CDC_WINDOW_MINUTES": str(int(WINDOW.total_seconds() // 60)),
            "CDC_RECONCILE_EVERY": str(RECONCILE_EVERY),
            "CDC_STREAM_ID": STREAM_ID,
        })
        windows, last_end = run_windows(emulator, database.created_at, database.now)
    counts = window_counts(STREAM_ID)
    result = compare(base, database, window_ends(database.created_at, last_end))
    plain_hard_deletes = sum(
        1 for c in database.hard_deletes_between(database.created_at, last_end)
        if c.table not in CHANGELOG_TABLES)
    found_all = result["hard_deletes_missed"] == 0
    print(f"demo-commit-ts: {windows} windows in {time.monotonic() - started:.0f} s; "
          f"{plain_hard_deletes} hard deletes of plain tables, reconciliation found "
          f"{counts['reconciled_deletes']}, {counts['soft_deletes']} soft deletes read", flush=True)
    status = "OK" if result["mismatches"] == 0 and found_all else "MISMATCH"
    print(
        f"demo-commit-ts: {status} windows={windows} rows={counts['rows']} "
        f"partitions_read={counts['partitions_read']} "
        f"deletes={counts['soft_deletes'] + counts['reconciled_deletes']} "
        f"target_rows={result['target_rows']} mismatches={result['mismatches']}"
    )
    return 0 if status == "OK" else 1


def run_windows(emulator, start, end_of_history):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils.state import DagRunState

    bag = DagBag(str(ROOT / "dags"))
    if bag.import_errors:
        raise SystemExit(f"demo-commit-ts: the example DAG does not import: {bag.import_errors}")
    dag = bag.get_dag(DAG_ID)
    count, end, last_end = 0, start + WINDOW, None
    while end <= end_of_history:
        emulator.now = end + CLOCK_LEAD
        began = time.monotonic()
        run = dag.test(logical_date=end)
        state = getattr(run, "state", None)
        print(f"demo-commit-ts: window ending {end.isoformat()}: {state} in "
              f"{time.monotonic() - began:.0f} s", flush=True)
        if state != DagRunState.SUCCESS:
            raise SystemExit(f"demo-commit-ts: the DAG run for the window ending {end} ended {state}")
        count, last_end, end = count + 1, end, end + WINDOW
    return count, last_end


def window_counts(stream_id: str) -> dict:
    """The stream's window counts summed over its windows (from the state store)."""
    from airflow_cdc.state import StateStore

    totals = dict.fromkeys(("rows", "partitions_read", "soft_deletes", "reconciled_deletes"), 0)
    for record in StateStore(StateStore.default_url()).list_windows(stream_id):
        for name in totals:
            totals[name] += int((record.counts or {}).get(name, 0))
    return totals


def window_ends(start, last_end) -> list:
    """The ends of the demo's windows from ``start`` to ``last_end``."""
    ends, end = [], start + WINDOW
    while end <= last_end:
        ends.append(end)
        end += WINDOW
    return ends


def expected_rows(database, table, ends) -> dict:
    """What a target holds after the windows ending at ``ends``: a change-log table every row
    some window's read saw (its commit timestamp in that window, the row still there at the
    window's end: a history row written and purged between two reads is seen by none); a
    plain table its rows alive at the last end, without soft-deleted ones."""
    if table.name in CHANGELOG_TABLES:
        column = next(c.name for c in table.columns if c.allow_commit_timestamp)
        rows, start = {}, database.created_at
        for end in ends:
            for key, row in database.rows_at(table.name, end):
                if start <= row[column] < end:
                    rows[key] = row
            start = end
        return rows
    alive = database.state_at(ends[-1] - timedelta(microseconds=1))[table.name]
    flag = SOFT_DELETE.get(table.name)
    return {key: row for key, row in alive.items() if not (flag and row.get(flag))}


def compare(base: Path, database, ends, log=print, prefix: str = "demo-commit-ts") -> dict:
    """Every target after the windows ending at ``ends`` against :func:`expected_rows`, value
    by value (read with pyiceberg); the hard deletes of plain tables must all be gone."""
    from demo.compare import compare_table, read_iceberg_rows

    total = mismatches = missed = 0
    gone = {(c.table, c.key) for c in database.hard_deletes_between(database.created_at, ends[-1])}
    for table in database.schema.tables:
        described = SimpleNamespace(name=table.name, columns=[
            SimpleNamespace(name=c.name, type=c.type, primary_key=c.name in table.primary_key)
            for c in table.columns])
        target_dir = base / "warehouse" / NAMESPACE / table.name
        rows = read_iceberg_rows(target_dir) if target_dir.exists() else []
        expected = expected_rows(database, table, ends)
        result = compare_table(described, expected, rows)
        keys = [c for c in described.columns if c.primary_key]
        deleted = {tuple(c.type.encode(v) for c, v in zip(keys, key))
                   for t, key in gone if t == table.name and key not in expected}
        missed += len(deleted & set(result.unexpected))
        total += result.target_rows
        mismatches += result.mismatches
        log(f"{prefix}: {table.name}: expected {result.expected_rows} rows, target "
            f"{result.target_rows}, missing {len(result.missing)}, unexpected "
            f"{len(result.unexpected)}, different {len(result.different)}"
            + (f" e.g. {result.different[0]}" if result.different else "")
            + (f" e.g. missing {result.missing[0]}" if result.missing else "")
            + (f" e.g. unexpected {result.unexpected[0]}" if result.unexpected else ""))
    return {"target_rows": total, "mismatches": mismatches, "hard_deletes_missed": missed}


if __name__ == "__main__":
    sys.exit(main())
