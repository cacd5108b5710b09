"""Extract job: read one window of a change source in parallel into the changelog table.

Usage (spark-submit): ``extract.py --plan <plan.json> --outcome <outcome.json> --result <result.json>``

Procedure (ARCHITECTURE.md, window protocol step 2):
1. If the changelog already has the commit tagged with this window, write nothing: restore
   the outcome file from that commit and stop (a re-run after a crash at any later point).
2. Read the planned partitions, one Spark task per partition; children whose parents all
   reported are read in further rounds, still inside this window (lineage rules).
3. Check that every source transaction is complete across partitions, or fail naming it.
4. Append all rows in ONE changelog commit tagged with the window and carrying the outcome
   in its snapshot summary, then write the outcome file for the commit task.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from datetime import timedelta

from airflow_cdc.model import CHANGELOG_COLUMNS, change_row_to_record, format_ts
from airflow_cdc.pipeline.files import WindowOutcomeFile, WindowPlanFile
from airflow_cdc.pipeline.partition_lineage import WindowLineage, check_transactions, run_rounds
from airflow_cdc.sources.registry import build_source

_SOURCES: dict[str, object] = {}


def read_partition_task(plan_json: str, position_json: dict):
    """Runs on an executor: read one partition; rows leave as changelog tuples."""
    from airflow_cdc.pipeline.files import position_from_json

    plan = WindowPlanFile.from_json(plan_json)
    key = json.dumps(plan.source, sort_keys=True)
    source = _SOURCES.get(key)
    if source is None:  # one client per executor process, reused across its tasks
        _log_progress_to_stderr()
        source = _SOURCES[key] = build_source(plan.source)
    read = source.read_partition(plan.window, position_from_json(position_json))
    rows = [
        tuple(change_row_to_record(row)[name] for name, _ in CHANGELOG_COLUMNS)
        for row in read.rows
    ]
    return read.outcome, read.transactions, rows


def _log_progress_to_stderr() -> None:
    """Executors' progress lines (records, watermark, lag per partition, at the reader's
    steady rhythm) go to stderr, which spark-submit hands to the Airflow task log."""
    import logging

    logger = logging.getLogger("airflow_cdc")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("airflow-cdc %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def report_round(window, round_number: int, results) -> None:
    """One line per partition read in a round: records, watermark, lag behind the window end."""
    for outcome, _ in sorted(results, key=lambda r: r[0].partition_id):
        lag = max(window.end - outcome.watermark, timedelta(0))
        print(
            f"airflow-cdc extract round {round_number}: partition {outcome.partition_id} "
            f"records={outcome.records} watermark={format_ts(outcome.watermark)} lag={lag} "
            f"{'finished, children=' + str(len(outcome.children)) if outcome.finished else 'continues'}",
            flush=True,
        )


def extract_window(spark, plan: WindowPlanFile, outcome_path: str) -> dict:
    """Steps 1-4 above; returns the result summary."""
    from pyspark import StorageLevel

    from spark_jobs.changelog import (
        changelog_schema,
        commit_window_with_outcome,
        recorded_window_result,
        window_declarations,
    )

    table = plan.changelog_table
    window_id = plan.window.window_id
    recorded = recorded_window_result(spark, table, window_id, outcome_path)
    if recorded is not None:
        return recorded

    from airflow_cdc.pipeline.files import position_to_json

    sc = spark.sparkContext
    plan_json = plan.to_json()
    lineage = WindowLineage(plan.positions, plan.pending_children)
    row_batches = []

    def read_round(batch):
        reads = sc.parallelize(
            [position_to_json(p) for p in batch], numSlices=max(1, len(batch))
        ).map(lambda position: read_partition_task(plan_json, position))
        reads.persist(StorageLevel.MEMORY_AND_DISK)
        results = reads.map(lambda r: (r[0], r[1])).collect()
        row_batches.append(reads.flatMap(lambda r: r[2]))
        report_round(plan.window, lineage.rounds, results)
        return results

    outcomes, tallies = run_rounds(lineage, read_round)
    transactions = check_transactions(tallies)
    rows = sc.union(row_batches) if row_batches else sc.emptyRDD()
    frame = spark.createDataFrame(rows, changelog_schema())
    frame.persist(StorageLevel.MEMORY_AND_DISK)
    declarations = window_declarations(frame)  # one pass that counts the rows too
    changes = sum(d.rows for d in declarations)
    counts = {
        "changes": changes,
        "records": sum(o.records for o in outcomes),
        "partitions": len(outcomes),
        "children": len({c.partition_id for o in outcomes for c in o.children}),
        "finished": sum(1 for o in outcomes if o.finished),
        "transactions": len(transactions),
        "rounds": lineage.rounds,
    }
    outcome = WindowOutcomeFile(
        window_id=window_id,
        outcomes=tuple(sorted(outcomes, key=lambda o: o.partition_id)),
        pending_children=tuple(lineage.still_pending),
        counts=counts,
    )
    result = commit_window_with_outcome(spark, table, frame, outcome, outcome_path, declarations)
    frame.unpersist()
    return result


def with_source_overrides(plan: WindowPlanFile, overrides: dict) -> WindowPlanFile:
    """The plan with ``overrides`` merged into its source spec (one level deep)."""
    from dataclasses import replace

    source = dict(plan.source)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(source.get(key), dict):
            source[key] = {**source[key], **value}
        else:
            source[key] = value
    return replace(plan, source=source)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, help="plan file written by the plan task")
    parser.add_argument("--outcome", required=True, help="where to write the outcome file")
    parser.add_argument("--result", required=True, help="where to write the result summary")
    parser.add_argument(
        "--source-overrides",
        help="JSON file merged into the plan's source spec (short-lived credentials)",
    )
    return parser.parse_args(argv)


def run_extract_job(extract, argv: Sequence[str] | None = None) -> int:
    """The entry point every source's extract job shares: read the plan (merging source
    overrides), run ``extract(spark, plan, outcome_path)``, write its result summary."""
    from pyspark.sql import SparkSession

    from spark_jobs.changelog import read_text, write_text

    args = parse_args(argv)
    spark = SparkSession.builder.getOrCreate()
    try:
        plan = WindowPlanFile.from_json(read_text(spark, args.plan))
        if args.source_overrides:
            overrides = json.loads(read_text(spark, args.source_overrides))
            plan = with_source_overrides(plan, overrides)
        result = extract(spark, plan, args.outcome)
        write_text(spark, args.result, json.dumps(result, sort_keys=True))
    finally:
        spark.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_extract_job(extract_window, argv)


if __name__ == "__main__":
    sys.exit(main())
