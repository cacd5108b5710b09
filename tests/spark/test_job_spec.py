"""Job specs: what our jobs are submitted with, and names refused before Spark starts."""

from __future__ import annotations

import json

import pytest

from airflow_cdc.model import InvalidIdentifierError
from airflow_cdc.spark.iceberg import IcebergCatalog
from airflow_cdc.spark.job import SparkJobSpec, changelog_writer_spec
from airflow_cdc.spark.runners import LocalSparkRunner
from airflow_cdc.spark_jobs import changelog_writer

from .support import window

WINDOW_ID = window(10).window_id


def test_changelog_writer_spec_carries_catalog_conf_jars_and_the_py_files_zip(tmp_path):
    catalog = IcebergCatalog(warehouse=str(tmp_path / "warehouse"))
    spec = changelog_writer_spec(catalog, "cdc.orders_changelog", WINDOW_ID, "in.jsonl", "out.json")

    assert spec.application.endswith("spark_jobs/changelog_writer.py")
    assert spec.application_args == (
        "--catalog", "lake", "--table", "cdc.orders_changelog", "--window-id", WINDOW_ID,
        "--input", "in.jsonl", "--result", "out.json",
    )
    assert spec.conf["spark.sql.catalog.lake.warehouse"] == (tmp_path / "warehouse").as_uri()
    assert spec.conf["spark.sql.session.timeZone"] == "UTC"
    assert spec.jars == tuple(catalog.spark_conf()["spark.jars"].split(","))
    assert "spark.jars" not in spec.conf
    assert [p.rsplit("/", 1)[-1].startswith("airflow_cdc-") for p in spec.py_files] == [True]


def test_spark_jars_given_as_conf_are_submitted_with_the_spec_jars():
    # spark-submit's --jars silently replaces a --conf spark.jars: the spec keeps both lists.
    spec = SparkJobSpec("app.py", conf={"spark.jars": "a.jar,b.jar"}, jars=("c.jar",))
    command = LocalSparkRunner(spark_submit="spark-submit").command(spec)

    assert command[command.index("--jars") + 1] == "c.jar,a.jar,b.jar"
    assert not any(part.startswith("spark.jars=") for part in command)


@pytest.mark.parametrize(
    "table",
    ["orders_changelog", "cdc.orders.changelog", "cdc.orders;DROP TABLE x", "cdc.1orders", "cdc."],
)
def test_changelog_writer_spec_refuses_a_table_that_is_not_namespace_dot_name(tmp_path, table):
    catalog = IcebergCatalog(warehouse=str(tmp_path / "warehouse"))
    with pytest.raises(InvalidIdentifierError, match="not an identifier|not <namespace>.<name>"):
        changelog_writer_spec(catalog, table, WINDOW_ID, "in.jsonl", "out.json")


def test_changelog_writer_refuses_a_bad_table_name_before_starting_spark(tmp_path, capsys):
    exit_code = changelog_writer.main(
        [
            "--table", "cdc.orders;DROP TABLE x", "--window-id", WINDOW_ID,
            "--input", str(tmp_path / "in.jsonl"), "--result", str(tmp_path / "out.json"),
        ]
    )

    assert exit_code == 2
    assert "changelog table name 'orders;DROP TABLE x' is not an identifier" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_changelog_writer_takes_its_options_from_a_job_config_file_command_line_winning(tmp_path):
    config = tmp_path / "job.json"
    config.write_text(
        json.dumps(
            {
                "catalog": "warehouse_a",
                "table": "cdc.orders_changelog",
                "window_id": WINDOW_ID,
                "input": "rows.jsonl",
                "result": "result.json",
                "catalog_conf": {"spark.sql.catalog.warehouse_a.type": "hadoop"},
            }
        )
    )

    args = changelog_writer.parse_args(
        ["--job-config", str(config), "--result", "other.json",
         "--catalog-conf", "spark.sql.catalog.warehouse_a.warehouse=/tmp/wh"]
    )

    assert (args.catalog, args.table, args.window_id, args.input, args.result) == (
        "warehouse_a", "cdc.orders_changelog", WINDOW_ID, "rows.jsonl", "other.json",
    )
    assert args.catalog_conf == {
        "spark.sql.catalog.warehouse_a.type": "hadoop",
        "spark.sql.catalog.warehouse_a.warehouse": "/tmp/wh",
    }
