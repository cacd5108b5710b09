"""SparkSubmitHookRunner: our jobs through the Spark provider's hook, on a real standalone cluster."""

from __future__ import annotations

import json
import sys

import pytest

from airflow_cdc.spark.iceberg import IcebergCatalog
from airflow_cdc.spark.job import (
    ChangelogWriteResult,
    SparkJobError,
    SparkJobSpec,
    changelog_writer_spec,
)
from airflow_cdc.spark.runners import SparkSubmitHookRunner

from .support import TEST_SPARK_CONF, change_rows, expected_records, open_warehouse, window, write_change_rows

TABLE = "cdc.orders_changelog"
WINDOW = window(5)


def test_changelog_writer_runs_on_a_standalone_cluster_through_spark_submit_hook(
    tmp_path, monkeypatch, standalone_cluster, spark
):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_TEST",
        json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": standalone_cluster.port}),
    )
    # Driver and executors run a Python without site-packages: no Airflow, no installed
    # airflow_cdc, only pyspark (Spark's own PYTHONPATH) and the --py-files zip.
    python_without_airflow = tmp_path / "python-without-site-packages"
    python_without_airflow.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python_without_airflow.chmod(0o755)
    rows = change_rows(WINDOW, 5)
    rows_file = write_change_rows(tmp_path / "rows.jsonl", rows)
    catalog = IcebergCatalog(warehouse=str(tmp_path / "warehouse"))
    spec = changelog_writer_spec(
        catalog,
        TABLE,
        WINDOW.window_id,
        rows_file,
        tmp_path / "result.json",
        conf={
            **TEST_SPARK_CONF,
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.pyspark.python": str(python_without_airflow),
        },
        executor_memory="512m",
        total_executor_cores=1,
    )

    SparkSubmitHookRunner(conn_id="spark_test").run(spec)

    tables = open_warehouse(spark, tmp_path / "warehouse")
    assert tables.records(TABLE) == expected_records(rows)
    assert ChangelogWriteResult.read(tmp_path / "result.json").rows_written == 5
    finished = [app["name"] for app in standalone_cluster.state()["completedapps"]]
    assert spec.name in finished


def test_failing_job_through_the_hook_raises_spark_job_error_with_its_log_tail(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL_TEST", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    app = tmp_path / "broken_job.py"
    app.write_text(
        "print('reading the plan of window 7')\n"
        "raise RuntimeError('plan file of window 7 is missing')\n"
    )
    spec = SparkJobSpec(
        str(app),
        name="cdc-broken",
        conf={"spark.ui.enabled": "false", "spark.pyspark.python": sys.executable},
    )

    with pytest.raises(SparkJobError) as failed:
        SparkSubmitHookRunner(conn_id="spark_local_test").run(spec)

    assert (failed.value.name, failed.value.return_code) == ("cdc-broken", 1)
    assert "reading the plan of window 7" in failed.value.log_tail
    assert failed.value.reason == "RuntimeError: plan file of window 7 is missing"
