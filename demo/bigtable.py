"""``make demo-bigtable``: the Bigtable change stream pipeline end to end on the emulator.

1. Generate a deterministic 2-hour history (splits, merges of two and three partitions, two
   clusters with a lag episode that holds one partition's low watermark back across a window
   end, conflicting writes, chunked values, GC, a DropRowRange) and serve it from the
   Bigtable emulator (:mod:`airflow_cdc_emulators.bigtable`) on 127.0.0.1.
2. Run ``dags/bigtable_change_stream_to_iceberg.py`` through real Airflow (``dag.test``),
   one DAG run per 30-minute window, with the emulator's clock a few seconds past the
   window end (the lagging window waits for its cluster, then completes).
3. Compare the ``cells`` and ``latest`` tables with the emulator's true state at the last
   window end.

Last line: ``demo-bigtable: OK windows=<n> mutations=<n> partitions=<n> splits=<n>
merges=<n> gc=<n> chunked=<n> stalled_windows=<n> target_cells=<n> mismatches=0``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from demo.spanner import prepare_environment

ROOT = Path(__file__).resolve().parents[1]
DAG_ID = "bigtable_change_stream_to_iceberg"
WINDOW = timedelta(minutes=30)
CLOCK_LEAD = timedelta(seconds=3)  # the emulator's clock at a run's start: window end + this


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=str(ROOT / ".demo-bigtable"), help="working folder")
    parser.add_argument("--hours", type=float, default=2.0, help="history length")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    base = Path(args.base).resolve()
    prepare_environment(base)

    from airflow_cdc_emulators.bigtable import BigtableEmulator, generate_history

    started = time.monotonic()
    history = generate_history(seed=args.seed, hours=args.hours)
    stats = history.stats()
    print(f"demo-bigtable: history from {history.start.isoformat()}: {stats}", flush=True)
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                   check=True, stdout=subprocess.DEVNULL)
    with BigtableEmulator(history) as emulator:
        os.environ.update({
            "BIGTABLE_EMULATOR_HOST": emulator.emulator_host,
            "CDC_START": history.start.isoformat(),
            "CDC_BIGTABLE_TABLE": history.config.table_id,
        })
        windows, stalled, last_end = run_windows(emulator, history)
        result = compare(base, emulator, last_end)
    print(f"demo-bigtable: {windows} windows in {time.monotonic() - started:.0f} s", flush=True)
    status = "OK" if result["mismatches"] == 0 and stalled >= 1 else "MISMATCH"
    print(
        f"demo-bigtable: {status} windows={windows} mutations={stats['mutations']} "
        f"partitions={stats['partitions']} splits={stats['splits']} merges={stats['merges']} "
        f"gc={stats['gc']} chunked={stats['chunked']} stalled_windows={stalled} "
        f"target_cells={result['target_cells']} mismatches={result['mismatches']}"
    )
    return 0 if status == "OK" else 1


def run_windows(emulator, history):
    """One DAG run per window; a window whose partitions lag at its start counts as stalled."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils.state import DagRunState

    from airflow_cdc.model import Window
    from airflow_cdc.sources.bigtable.connection import BigtableConnection
    from airflow_cdc.sources.bigtable.readiness import lagging_partitions

    bag = DagBag(str(ROOT / "dags"))
    if bag.import_errors:
        raise SystemExit(f"demo-bigtable: the example DAG does not import: {bag.import_errors}")
    dag = bag.get_dag(DAG_ID)
    connection = BigtableConnection(history.config.project, history.config.instance,
                                    history.config.table_id, "default", emulator.emulator_host)
    count = stalled = 0
    end = history.start + WINDOW
    while end <= history.end:
        emulator.set_now(end + CLOCK_LEAD)
        lagging = lagging_partitions(connection, Window("demo", end - WINDOW, end), 2.0)
        if lagging:
            stalled += 1
            print(f"demo-bigtable: window ending {end.isoformat()} starts with "
                  f"{len(lagging)} lagging partition(s): {lagging[0].describe(Window('demo', end - WINDOW, end), None)}",
                  flush=True)
        began = time.monotonic()
        run = dag.test(logical_date=end)
        state = getattr(run, "state", None)
        print(f"demo-bigtable: window ending {end.isoformat()}: {state} in "
              f"{time.monotonic() - began:.0f} s", flush=True)
        if state != DagRunState.SUCCESS:
            raise SystemExit(f"demo-bigtable: the DAG run for the window ending {end} ended {state}")
        count += 1
        last_end = end
        end += WINDOW
    return count, stalled, last_end


def compare(base: Path, emulator, last_end, log=print, prefix: str = "demo-bigtable") -> dict:
    """The ``cells`` and ``latest`` tables against the true state at the last window end."""
    from demo.compare import read_iceberg_rows

    truth = emulator.true_state(last_end)
    expected_cells = {
        (row, family, qualifier, ts): value
        for row, families in truth.items() for family, columns in families.items()
        for qualifier, versions in columns.items() for ts, value in versions.items()
    }
    expected_latest = {}
    for (row, family, qualifier, ts), value in expected_cells.items():
        known = expected_latest.get((row, family, qualifier))
        if known is None or ts > known[0]:
            expected_latest[(row, family, qualifier)] = (ts, value)
    table = emulator.history.config.table_id
    warehouse = base / "warehouse" / "bigtable"
    cells = {(r["row_key"], r["family"], r["qualifier"], r["cell_ts"]): r["value"]
             for r in read_iceberg_rows(warehouse / f"{table}_cells")}
    latest = {(r["row_key"], r["family"], r["qualifier"]): (r["cell_ts"], r["value"])
              for r in read_iceberg_rows(warehouse / f"{table}_latest")}
    mismatches = 0
    for name, expected, actual in (("cells", expected_cells, cells), ("latest", expected_latest, latest)):
        missing = [k for k in expected if k not in actual]
        unexpected = [k for k in actual if k not in expected]
        different = [k for k in expected if k in actual and expected[k] != actual[k]]
        mismatches += len(missing) + len(unexpected) + len(different)
        log(f"{prefix}: {name}: expected {len(expected)}, target {len(actual)}, missing "
              f"{len(missing)}, unexpected {len(unexpected)}, different {len(different)}"
              + (f" e.g. missing {missing[0]}" if missing else "")
              + (f" e.g. unexpected {unexpected[0]}" if unexpected else ""))
    return {"target_cells": len(cells), "mismatches": mismatches}


if __name__ == "__main__":
    sys.exit(main())
