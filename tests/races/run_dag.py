"""One DAG run through real Airflow (``dag.test``), as its own OS process, for the race tests.

Usage: ``python tests/races/run_dag.py <dag_id> <logical date, ISO>``. Runs of one DAG whose
logical dates fall in the same data interval are different DAG runs (run ids
``manual__<logical date>``) of the same window. The last stdout line is JSON: ``{"dag_id",
"run_id", "state", "tasks": {task_id: state}}``; the exit status is 0 when the run succeeded.

``python tests/races/run_dag.py --sync`` only writes the DAGs folder's DAGs to Airflow's
metadata DB, as ``dag.test`` does first: processes that then run at once find them there, and
do not insert the same DAGs and Assets side by side (which one of them would fail on).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def sync() -> int:
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.utils.session import create_session

    manager = DagBundlesManager()
    with create_session() as session:
        manager.sync_bundles_to_db(session=session)
    for bundle in manager.get_all_dag_bundles():
        if not bundle.is_initialized:
            bundle.initialize()
        bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
        sync_bag_to_db(bag, bundle.name, bundle.version)
    return 0


def main(argv: list[str]) -> int:
    if argv == ["--sync"]:
        return sync()
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    dag_id, logical_date = argv[0], datetime.fromisoformat(argv[1])
    bag = DagBag(str(ROOT / "dags"))
    dag = bag.get_dag(dag_id)
    if dag is None:
        print(f"run_dag: DAG {dag_id!r} does not import: {bag.import_errors}", flush=True)
        return 2
    run = dag.test(logical_date=logical_date, run_after=logical_date)
    with create_session() as session:
        instances = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run.run_id)
        )
        tasks = {ti.task_id: str(getattr(ti.state, "value", ti.state)) for ti in instances}
    state = str(getattr(run.state, "value", run.state))
    print(json.dumps({"dag_id": dag_id, "run_id": run.run_id, "state": state, "tasks": tasks}),
          flush=True)
    return 0 if state == "success" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
