"""``make demo``: the Spanner change stream pipeline end to end on embedded defaults.

1. Generate a deterministic 2-hour history (splits, merges, every value capture type) and
   serve it from the Spanner emulator on 127.0.0.1.
2. Run ``dags/spanner_change_stream_to_iceberg.py`` through real Airflow (``dag.test``), one
   DAG run per 30-minute window: plan, Spark extract, commit, Spark apply, gate, report.
3. Compare every target table with the emulator's true state at the last window end.

Last line: ``demo: OK windows=<n> changes=<n> partitions=<n> splits=<n> merges=<n>
target_rows=<n> mismatches=0``; the exit code is non-zero on any mismatch or failed run.
Everything lives under ``.demo/`` (recreated each time): AIRFLOW_HOME with its SQLite DBs,
the Iceberg warehouse, the plan/outcome files.

``--catalog rest`` (``make demo CATALOG=rest``) keeps the tables in an Iceberg REST catalog
server on 127.0.0.1 instead (:mod:`demo.rest_catalog`, under ``.demo/rest-catalog``), reached
through an ``iceberg_catalog`` Airflow connection with an OAuth2 client id and secret, and
reads the targets back through its REST API.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DAG_ID = "spanner_change_stream_to_iceberg"
WINDOW = timedelta(minutes=30)


def prepare_environment(base: Path) -> None:
    if base.exists():
        shutil.rmtree(base)
    (base / "airflow").mkdir(parents=True)
    os.environ.update(
        {
            "AIRFLOW_HOME": str(base / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "AIRFLOW_CDC_WAREHOUSE": str(base / "warehouse"),
            "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
            "PYSPARK_PYTHON": sys.executable,
        }
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=str(ROOT / ".demo"), help="working folder")
    parser.add_argument("--hours", type=float, default=2.0, help="history length")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--catalog", choices=("hadoop", "rest"), default="hadoop",
                        help="the local Hadoop warehouse, or a REST catalog server on 127.0.0.1")
    args = parser.parse_args(argv)
    base = Path(args.base).resolve()
    prepare_environment(base)

    from airflow_cdc_emulators.spanner import SpannerChangeStreamEmulator, generate_history

    started = time.monotonic()
    history = generate_history(seed=args.seed, duration=timedelta(hours=args.hours))
    summary = history.summary()
    print(
        f"demo: history {summary['start']} .. {summary['end']}: {summary['changes']} changes, "
        f"{summary['partitions']} partitions, {summary['splits']} splits, "
        f"{summary['merges']} merges, capture types {sorted(summary['changes_by_value_capture_type'])}",
        flush=True,
    )
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        check=True, stdout=subprocess.DEVNULL,
    )
    with ExitStack() as stack:
        rest = stack.enter_context(rest_catalog(base)) if args.catalog == "rest" else None
        with SpannerChangeStreamEmulator(history) as emulator:
            os.environ["SPANNER_EMULATOR_HOST"] = emulator.emulator_host
            os.environ["CDC_SPANNER_STREAM"] = history.stream_name
            os.environ["CDC_START"] = history.created_at.isoformat()
            windows = run_windows(history)
        result = compare(base, history, rest)
    elapsed = time.monotonic() - started
    print(f"demo: {windows} windows in {elapsed:.0f} s", flush=True)
    status = "OK" if result["mismatches"] == 0 else "MISMATCH"
    print(
        f"demo: {status} windows={windows} changes={history.change_count} "
        f"partitions={summary['partitions']} splits={summary['splits']} "
        f"merges={summary['merges']} target_rows={result['target_rows']} "
        f"mismatches={result['mismatches']}"
    )
    return 0 if status == "OK" else 1


REST_CONN_ID = "demo_rest_catalog"


@contextmanager
def rest_catalog(base: Path):
    """A REST catalog server for the run and the ``iceberg_catalog`` connection the DAG uses
    (``CDC_ICEBERG_CONN_ID``), kept in Airflow's metadata DB so its client secret is in no
    environment and on no command line; yields pyiceberg's client of the same catalog."""
    from airflow.models import Connection
    from airflow.utils.session import create_session
    from pyiceberg.catalog.rest import RestCatalog

    from demo.rest_catalog import RestCatalogServer

    client_id, client_secret, warehouse = "demo-pipeline", secrets.token_hex(16), "demo"
    with RestCatalogServer(base / "rest-catalog", client_id=client_id,
                           client_secret=client_secret, warehouse_name=warehouse) as server:
        with create_session() as session:
            session.add(Connection(
                conn_id=REST_CONN_ID, conn_type="iceberg_catalog", host=server.uri,
                schema=warehouse, login=client_id, password=client_secret,
                extra=json.dumps({"oauth2_server_uri": server.token_uri}),
            ))
        os.environ["CDC_ICEBERG_CONN_ID"] = REST_CONN_ID
        print(f"demo: REST catalog at {server.uri} (warehouse {warehouse!r}, "
              f"files under {server.warehouse})", flush=True)
        yield RestCatalog("demo", uri=server.uri, warehouse=warehouse,
                          credential=f"{client_id}:{client_secret}",
                          **{"oauth2-server-uri": server.token_uri})


def run_windows(history) -> int:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils.state import DagRunState

    bag = DagBag(str(ROOT / "dags"))
    if bag.import_errors:
        raise SystemExit(f"demo: the example DAG does not import: {bag.import_errors}")
    dag = bag.get_dag(DAG_ID)
    count = 0
    end = history.created_at + WINDOW
    while end <= history.end:
        began = time.monotonic()
        run = dag.test(logical_date=end)
        state = getattr(run, "state", None)
        print(
            f"demo: window ending {end.isoformat()}: {state} in {time.monotonic() - began:.0f} s",
            flush=True,
        )
        if state != DagRunState.SUCCESS:
            raise SystemExit(f"demo: the DAG run for the window ending {end} ended {state}")
        count += 1
        end += WINDOW
    return count


def compare(base: Path, history, rest=None) -> dict:
    """Every target against the truth at the last window end, read from the Hadoop warehouse
    under ``base`` or, with ``rest`` (pyiceberg's REST catalog client), through the catalog."""
    from demo.compare import compare_table, read_iceberg_rows
    from datetime import timedelta as td

    last_end = history.created_at + WINDOW * int((history.end - history.created_at) / WINDOW)
    truth = history.state_at(last_end - td(microseconds=1))
    total_rows = mismatches = 0
    for table in history.tables:
        if rest is not None:
            name = f"current.{table.name}"
            rows = rest.load_table(name).scan().to_arrow().to_pylist() if rest.table_exists(name) else []
        else:
            target_dir = base / "warehouse" / "current" / table.name
            rows = read_iceberg_rows(target_dir) if target_dir.exists() else []
        result = compare_table(table, truth[table.name], rows)
        total_rows += result.target_rows
        mismatches += result.mismatches
        print(
            f"demo: {table.name}: expected {result.expected_rows} rows, target {result.target_rows}, "
            f"missing {len(result.missing)}, unexpected {len(result.unexpected)}, "
            f"different {len(result.different)}"
            + (f" e.g. {result.different[0]}" if result.different else "")
            + (f" e.g. missing {result.missing[0]}" if result.missing else ""),
            flush=True,
        )
    return {"target_rows": total_rows, "mismatches": mismatches}


if __name__ == "__main__":
    sys.exit(main())
