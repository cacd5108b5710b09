"""Spark entry point: apply one window of a stream's changelog to its target Iceberg tables.

    spark-submit ... spark_jobs/apply_job.py --job-config apply.json [--result result.json]

``--job-config`` is the JSON object :mod:`airflow_cdc.spark_jobs.apply.config` describes (catalog,
``catalog_conf``, stream, window_id, changelog_table, targets with mapping and history,
policies, result). ``--result`` (or ``result`` in the file) receives
:class:`airflow_cdc.spark_jobs.apply.ApplyResult` as JSON: per source table its target, counts and the
target / tombstone / history snapshot ids, plus the dead-letter table's snapshot and count.
The result is written also when the window fails on dead letters (``"status": "failed"``).

Exit codes: 0 applied (or already applied), 1 failed (dead letters under the ``fail`` policy,
or an error; message on stderr), 2 bad usage or configuration (before Spark starts).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

if __package__ in (None, ""):  # run as a file by spark-submit: make `spark_jobs` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airflow_cdc.model import CdcError  # noqa: E402


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="apply_job", description=__doc__.split("\n")[0])
    parser.add_argument("--job-config", required=True, help="JSON file with the apply config")
    parser.add_argument("--result", help="where to write the JSON result (overrides the file's 'result')")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, spark=None) -> int:
    """Run the job; with ``spark`` given, use that session and leave it running (tests)."""
    args = parse_args(argv)
    from airflow_cdc.spark_jobs.apply.config import ApplyConfig, ApplyConfigError

    try:
        data = json.loads(_read_text(args.job_config))
        config = ApplyConfig.from_dict(data)
    except (OSError, json.JSONDecodeError, ApplyConfigError) as error:
        print(f"apply_job: error: {error}", file=sys.stderr)
        return 2
    result_path = args.result or data.get("result")
    catalog_conf = {str(k): str(v) for k, v in dict(data.get("catalog_conf") or {}).items()}

    from pyspark.sql import SparkSession

    from airflow_cdc.spark_jobs.apply import DeadLettersError, apply_window
    from airflow_cdc.spark_jobs.secret_conf import load_secret_conf
    from airflow_cdc.spark_jobs.session import end_job_session

    owned = spark is None
    if owned:
        builder = SparkSession.builder.appName(f"cdc-apply-{config.stream}")
        builder = builder.config("spark.sql.session.timeZone", "UTC")
        for key, value in catalog_conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    code = 0
    try:
        try:
            load_secret_conf(spark)  # before the catalog is first used
            own_apply = _source_apply(data)
            if own_apply is None:
                result = apply_window(spark, config)
            else:
                result = _apply_by_source(spark, config, data, own_apply)
        except DeadLettersError as error:
            print(f"apply_job: error: {error}", file=sys.stderr)
            result, code = error.result, 1
        except CdcError as error:
            print(f"apply_job: error: {type(error).__name__}: {error}", file=sys.stderr)
            return 1
        if result_path:
            _write_text(spark, str(result_path), result.to_json() + "\n")
        print(f"apply_job: {result.to_json()}")
        return code
    finally:
        if owned:
            end_job_session(spark)


def _source_apply(data: dict):
    """The stream's source's own apply (its Spark side's ``apply_window``), or None."""
    if not data.get("source"):
        return None
    from airflow_cdc.sources.registry import build_source
    from airflow_cdc.spark_jobs.sources import spark_side

    source = build_source(data["source"])
    return spark_side(source).apply_window if source.applies_own_changes else None


def _apply_by_source(spark, config, data: dict, own_apply):
    """A source's own apply, committing through the window's tagged commits."""
    from airflow_cdc.spark_jobs.apply.result import ApplyResult, TableResult
    from airflow_cdc.spark_jobs.apply.source_tables import WindowTables
    from airflow_cdc.spark_jobs.apply.job import window_rows

    window_rows(spark, config)  # the same checks: catalog configured, changelog readable
    tables = own_apply(spark, config, data, WindowTables(spark, config))
    return ApplyResult(
        stream=config.stream, window_id=config.window_id, status="applied",
        dead_letter_table=config.dead_letter_table.qualified,
        tables=[TableResult(**table) for table in tables],
    )


def _read_text(path: str) -> str:
    """The job file: local, or a URI of the work root (fsspec, else Hadoop's file systems)."""
    from airflow_cdc import work_root

    if work_root.fsspec_can_open(path):
        return work_root.read_text(path)
    from pyspark.sql import SparkSession

    from airflow_cdc.spark_jobs.changelog import read_text

    return read_text(SparkSession.builder.getOrCreate(), path)


def _write_text(spark, path: str, text: str) -> None:
    from airflow_cdc.spark_jobs.changelog import write_text

    write_text(spark, path, text)


if __name__ == "__main__":
    sys.exit(main())
