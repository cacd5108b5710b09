"""Run one DAG run of a window through real Airflow (``dag.test``), as its own OS process.

Usage: ``python tests/faults/run_window.py <dag_id> <window end, ISO>``. The run id is fixed by
the window (``run_after`` = the window end), so running it again after a crash replaces the
run with the same run id: the lease owner (``dag_id/run_id``) is the same, as after an
``airflow tasks clear`` of the whole run. Exit status 0 when the run ended in success, 1 when
it ended otherwise; a crash point kills this process (status -9).
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str]) -> int:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils.state import DagRunState

    dag_id, end = argv[0], datetime.fromisoformat(argv[1])
    bag = DagBag(str(ROOT / "dags"))
    dag = bag.get_dag(dag_id)
    if dag is None:
        print(f"run_window: DAG {dag_id!r} does not import: {bag.import_errors}", flush=True)
        return 2
    run = dag.test(logical_date=end, run_after=end)
    state = getattr(run, "state", None)
    for ti in sorted(run.get_task_instances(), key=lambda ti: ti.task_id):
        print(f"run_window: task {ti.task_id}: {ti.state}", flush=True)
    print(f"run_window: {dag_id} window ending {end.isoformat()}: {state}", flush=True)
    return 0 if state == DagRunState.SUCCESS else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
