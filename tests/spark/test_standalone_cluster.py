"""Cluster mode: the changelog writer through SparkSubmitHook on a real standalone Spark cluster."""

from __future__ import annotations

import json
import sys

from airflow_cdc.spark.iceberg import IcebergCatalog
from airflow_cdc.spark.job import ChangelogWriteResult, changelog_writer_spec
from airflow_cdc.spark.runners import SparkSubmitHookRunner

from .support import TEST_SPARK_CONF, change_rows, expected_records, open_warehouse, window, write_change_rows

TABLE = "cdc.orders_changelog"
WINDOW = window(5)


def test_changelog_writer_runs_on_a_standalone_cluster_through_spark_submit_hook(
    tmp_path, monkeypatch, standalone_cluster, reader
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

    tables = open_warehouse(reader, tmp_path / "warehouse")
    assert tables.records(TABLE) == expected_records(rows)
    assert ChangelogWriteResult.read(tmp_path / "result.json").rows_written == 5
    finished = [app["name"] for app in standalone_cluster.state()["completedapps"]]
    assert spec.name in finished
