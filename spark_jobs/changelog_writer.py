"""Spark entry point: append one window's change rows to a stream's Iceberg changelog, once.

    spark-submit ... spark_jobs/changelog_writer.py \\
        --catalog lake --table cdc.orders_changelog \\
        --window-id 2024-05-01T10:00:00.000000Z/2024-05-01T11:00:00.000000Z \\
        --input rows.jsonl --result result.json

``--input`` is a JSON-lines file of ChangeRow (``airflow_cdc.model.change_row_to_json_line``);
``--result`` receives ``{"snapshot_id", "rows_written", "skipped", "table", "window_id"}``.
The catalog's Spark conf comes with the submit (``IcebergCatalog.spark_conf()``); a
``--job-config`` JSON file may carry any option (same names, ``_`` for ``-``) plus
``catalog_conf``, a dict of ``spark.sql.catalog.*`` properties set when the session starts.
Command-line options win over the file. Names are validated before Spark starts.

Exit codes: 0 done (written or skipped), 1 refused or failed (message on stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from airflow_cdc.model import CdcError, InvalidIdentifierError

_OPTIONS = ("catalog", "table", "window_id", "input", "result")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="changelog_writer", description=__doc__.split("\n")[0])
    parser.add_argument("--job-config", help="JSON file with any of the options below")
    parser.add_argument("--catalog", help="Spark catalog name of the Iceberg catalog (default lake)")
    parser.add_argument("--table", help="changelog table as <namespace>.<name>")
    parser.add_argument("--window-id", help="the window's id (Window.window_id)")
    parser.add_argument("--input", help="JSON lines of ChangeRow (local path or Hadoop URI)")
    parser.add_argument("--result", help="where to write the JSON result")
    parser.add_argument(
        "--catalog-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a spark.sql.catalog.* property to set at session start (repeatable)",
    )
    args = parser.parse_args(argv)
    config: dict = {}
    if args.job_config:
        with open(args.job_config) as handle:
            config = json.load(handle)
        if not isinstance(config, dict):
            parser.error(f"--job-config {args.job_config} must hold a JSON object")
    for option in _OPTIONS:
        if getattr(args, option) is None:
            setattr(args, option, config.get(option))
    args.catalog = args.catalog or "lake"
    missing = [f"--{o.replace('_', '-')}" for o in _OPTIONS if not getattr(args, o)]
    if missing:
        parser.error(f"missing {', '.join(missing)} (on the command line or in --job-config)")
    catalog_conf = {str(k): str(v) for k, v in dict(config.get("catalog_conf") or {}).items()}
    for item in args.catalog_conf:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--catalog-conf {item!r} is not KEY=VALUE")
        catalog_conf[key] = value
    args.catalog_conf = catalog_conf
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # Import here: a usage error or a bad name fails fast, without starting a JVM.
    from airflow_cdc.spark_jobs.changelog import qualified_table

    try:
        table = qualified_table(args.catalog, args.table)
    except InvalidIdentifierError as error:
        print(f"changelog_writer: error: {error}", file=sys.stderr)
        return 2

    from pyspark.sql import SparkSession

    from airflow_cdc.spark_jobs.changelog import require_catalog, write_text, write_window
    from airflow_cdc.spark_jobs.secret_conf import load_secret_conf
    from airflow_cdc.spark_jobs.session import end_job_session

    builder = SparkSession.builder.appName(f"cdc-changelog-{args.table}")
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    for key, value in args.catalog_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        load_secret_conf(spark)  # before the catalog is first used
        require_catalog(spark, args.catalog)
        result = write_window(spark, table, args.window_id, args.input)
        write_text(spark, args.result, result.to_json() + "\n")
    except CdcError as error:
        print(f"changelog_writer: error: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    finally:
        end_job_session(spark)
    print(f"changelog_writer: {result.to_json()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
