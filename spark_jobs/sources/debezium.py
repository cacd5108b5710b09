"""Debezium's Spark side: staged snapshot batches read natively, repeats dropped, transactions
checked over the whole window.

* :meth:`DebeziumSpark.native_rows`: the parallel snapshot's staged batches the plan took
  (:meth:`airflow_cdc.sources.debezium.source.DebeziumSource.staged_batch_folders`), read as
  Parquet, with the window's id.
* :meth:`DebeziumSpark.drop_repeats`: a connector restart sends changes again; their event ids
  do not depend on offsets, so repeats are dropped by the one de-duplication rule
  (:mod:`.dedup`).
* :meth:`DebeziumSpark.check_window`: every transaction whose END this window read, committed
  before the window end, holds its END's count of events per table
  (:mod:`airflow_cdc.sources.debezium.transactions`), counted here in this window's changes
  and in the stream's changelog; then the incremental snapshots' progress the window's
  notifications tell.
"""

from __future__ import annotations

from airflow_cdc.sources.debezium.transactions import expected_events
from airflow_cdc.spark_jobs.sources.base import SparkSide
from airflow_cdc.spark_jobs.sources.dedup import drop_seen_event_ids


class DebeziumSpark(SparkSide):
    """Debezium's Spark side (the module doc)."""

    rows_pass_through = False  # staged rows join, repeats are dropped, transactions checked

    def native_rows(self, spark, plan):
        """The staged batches the plan took, read as Parquet, with the window's id."""
        from pyspark.sql import functions as F

        folders = self.source.staged_batch_folders(plan)
        if not folders:
            return None
        frame = spark.read.parquet(*folders)
        return frame.withColumn("window_id", F.lit(plan.window.window_id)).withColumn(
            "stream", F.lit(plan.window.stream_id))

    def drop_repeats(self, spark, plan, frame):
        return drop_seen_event_ids(spark, plan.changelog_table, plan.window.stream_id, frame)

    def check_window(self, spark, plan, frame) -> dict:
        """Transaction metadata (``transactions``, ``transactions_checked``), then the
        incremental snapshots' progress."""
        checked = check_transactions(self.source, spark, plan, frame)
        return {**checked, **self.source.window_progress_counts(plan)}


def check_transactions(source, spark, plan, frame) -> dict:
    """Count each table's distinct event ids of the transactions the window's ENDs expect, in
    ``frame`` (this window's changes) and in the stream's changelog (earlier windows, read
    within the transactions' commit times, which Iceberg prunes by ``days(commit_ts)``); raise
    naming the transactions short of their END count, else return the counts."""
    from pyspark.sql import functions as F

    window = plan.window
    expected = expected_events(source, plan)
    if not expected.expected:
        return expected.counts
    ids = expected.transaction_ids()
    seen = frame.where(F.col("transaction_id").isin(ids)).select("transaction_id", "source_table", "event_id")
    if spark.catalog.tableExists(plan.changelog_table):
        lo, hi = expected.changelog_range()
        earlier = (
            spark.table(plan.changelog_table)
            .where((F.col("stream") == F.lit(window.stream_id))
                   & (F.col("window_id") != F.lit(window.window_id))
                   & F.col("commit_ts").between(F.timestamp_micros(F.lit(lo)), F.timestamp_micros(F.lit(hi)))
                   & F.col("transaction_id").isin(ids))
            .select("transaction_id", "source_table", "event_id")
        )
        seen = seen.unionByName(earlier)
    found = {
        (row.transaction_id, row.source_table): int(row.n)
        for row in seen.groupBy("transaction_id", "source_table")
        .agg(F.countDistinct("event_id").alias("n")).collect()
    }
    return expected.check(window, found)
