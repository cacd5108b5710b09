"""Two apply spark-submits of the same window at once, on a JDBC catalog in PostgreSQL.

The OS-process form of ``test_apply_race.py``: ``spark_jobs/apply_job.py`` submitted twice at
the same moment for the same window (as an orphaned spark-submit and the task's retry would
run), each its own JVM, committing through an Iceberg JDBC catalog (PostgreSQL swaps a table's
metadata pointer atomically, so commits from two JVMs are optimistic and safe). Nothing holds
the two jobs together here: they overlap as their start-up allows, so either both fold the
window and race to commit, or the later one finds the window's commits and writes nothing.
Either way both jobs succeed, and every table ends as after one apply (the reference: the same
windows applied once, in this session, into another namespace).

Marker ``races_long`` (four spark-submits); ``make races`` runs it.
"""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from sqlalchemy import create_engine, text

from tests.races.test_apply_race import OPTIONS, TABLES, W0, W1, history

pytestmark = pytest.mark.races_long

CATALOG = "races"


@pytest.fixture(scope="module")
def jdbc_catalog(tmp_path_factory):
    from airflow_cdc.spark.iceberg import IcebergCatalog
    from tests.state.conftest import POSTGRES_ADMIN_URL

    name = f"cdc_races_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield IcebergCatalog(
        name=CATALOG, kind="jdbc", warehouse=str(tmp_path_factory.mktemp("jdbc-warehouse")),
        jdbc_url=f"jdbc:postgresql://127.0.0.1:5432/{name}", jdbc_user="postgres",
    )
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def job_config(namespace: str, win) -> dict:
    return {
        "catalog": CATALOG, "stream": "orders", "window_id": win.window_id,
        "changelog_table": f"{namespace}.orders_changelog",
        "targets": {"namespace": namespace, **OPTIONS["targets"]},
        "policies": dict(OPTIONS["policies"]),
    }


def submit_twice_at_once(catalog, namespace: str, win, folder) -> list[dict]:
    """Two spark-submits of the apply job for ``win``, started together; their results."""
    from airflow_cdc.spark.job import iceberg_job_spec
    from airflow_cdc.spark.runners import LocalSparkRunner

    config = folder / f"apply-{namespace}-{win.start:%H%M}.json"
    config.write_text(json.dumps(job_config(namespace, win)))
    results = [folder / f"result-{namespace}-{win.start:%H%M}-{i}.json" for i in range(2)]
    errors: list[BaseException] = []

    def submit(result) -> None:
        try:
            spec = iceberg_job_spec(
                "apply_job", catalog, ["--job-config", str(config), "--result", str(result)],
                name=f"races-apply-{result.stem}",
                conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
            )
            LocalSparkRunner(master="local[1]").run(spec)
        except BaseException as error:  # reported after both ended
            errors.append(error)

    threads = [threading.Thread(target=submit, args=(result,)) for result in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return [json.loads(result.read_text()) for result in results]


@pytest.fixture(scope="module")
def applied(spark, jdbc_catalog, tmp_path_factory):
    from airflow_cdc.spark_jobs.apply import apply_window
    from tests.apply.support import write_changelog

    for key, value in {**jdbc_catalog.spark_conf(), **jdbc_catalog.secret_conf()}.items():
        if key.startswith(f"spark.sql.catalog.{CATALOG}"):
            spark.conf.set(key, value)
    folder = tmp_path_factory.mktemp("apply-processes")
    namespaces = {"once": "races_once", "raced": "races_raced"}
    for namespace in namespaces.values():
        write_changelog(spark, f"{CATALOG}.{namespace}.orders_changelog", history().rows)
    state = {}
    for win in (W0, W1):
        apply_window(spark, job_config(namespaces["once"], win))
        state[win] = submit_twice_at_once(jdbc_catalog, namespaces["raced"], win, folder)
    state["contents"] = {name: contents(spark, namespace) for name, namespace in namespaces.items()}
    return state


def contents(spark, namespace: str) -> dict:
    return {
        table: sorted(repr(sorted(row.asDict(recursive=True).items())).replace(namespace, "<ns>")
                      for row in spark.table(f"{CATALOG}.{namespace}.{table}").collect())
        for table in TABLES
    }


def test_two_apply_spark_submits_of_a_window_at_once_both_succeed(applied):
    for win in (W0, W1):
        assert [r["status"] for r in applied[win]] == ["applied", "applied"]


def test_two_apply_spark_submits_of_a_window_at_once_leave_every_table_as_one_apply(applied):
    once, raced = applied["contents"]["once"], applied["contents"]["raced"]
    assert raced == once
