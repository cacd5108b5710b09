"""Transaction completeness from Debezium's transaction metadata (``provide.transaction.metadata``).

The connector writes a BEGIN and an END event per transaction to ``<topic.prefix>.transaction``;
the END names, per table (data collection), how many change events the transaction made,
and each change event carries the transaction's id. Topics flush independently, so one
transaction's events can land in two windows, and its END in a later window than its data.
A window reads the transaction topic only up to the first BEGIN or END committed at or
after its end (the rest is the next window's), so every END it reads is of a transaction
committed before its end, whose events were all in the sink's files when the window was
planned (the heartbeat evidence): in this window or in earlier ones. The check
(:func:`check_transactions`, on the Spark driver after the extract's reads):

1. read those END events (ids as :func:`~.envelope.transaction_key` reads them:
   PostgreSQL's are ``<txId>:<LSN>`` with a different LSN on BEGIN, END and the events);
2. count each table's distinct event ids of those transactions in this window's changes
   and in the stream's changelog (earlier windows, read within the transactions' commit
   times, which Iceberg prunes by ``days(commit_ts)``);
3. raise :class:`IncompleteTransactionError` naming the first transactions and tables short
   of their END count: the window stays uncommitted, visibly, and its re-run reads the same
   files. Tables without ``key_columns`` are left out (their events are dead letters).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_cdc.model import format_ts
from airflow_cdc.sources.debezium.envelope import TransactionEvent, parse_line, transaction_key
from airflow_cdc.sources.debezium.errors import IncompleteTransactionError, MalformedEventError
from airflow_cdc.sources.debezium.layout import parse_partition_id
from airflow_cdc.sources.debezium.staged import snapshot_of

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# Change events of a transaction share its commit time; the changelog is read around it.
_COMMIT_MARGIN = timedelta(hours=1)
_NAMED = 5  # incomplete transactions an error names


def transaction_ends(source, plan) -> list[TransactionEvent]:
    """The END events the window reads of the transaction topic (the plan's files, up to
    the first BEGIN or END at or after the window end: :meth:`.source.DebeziumSource.
    _planned_lines`)."""
    _, reader = source._access()
    ends = []
    for position in plan.positions:
        if snapshot_of(position.partition_id) is not None:
            continue  # a staged snapshot: READ rows, no transactions
        topic, _ = parse_partition_id(position.partition_id)
        if topic != source.transaction_topic:
            continue
        for _, line in source._planned_lines(reader, plan.window, position):
            try:
                event = parse_line(line, topic)
            except MalformedEventError:
                continue  # the partition's read dead-letters it with the reason
            if isinstance(event, TransactionEvent) and event.status == "END":
                ends.append(event)
    return ends


def check_transactions(source, spark: Any, plan, frame: Any) -> dict:
    """Steps 1-3 of the module doc; returns ``transactions`` (ENDs read) and
    ``transactions_checked`` for the window's summary."""
    from pyspark.sql import functions as F

    from airflow_cdc.sources.debezium.source import table_identifier

    window = plan.window
    ends = transaction_ends(source, plan)
    due = [e for e in ends if e.ts_ms is not None and _at(e.ts_ms) < window.end]
    counts = {"transactions": len(ends), "transactions_checked": len(due)}
    if not due:
        return counts
    keyed = {table_identifier(t): t for t in source.key_columns}
    expected = {
        (transaction_key(end.id), table_identifier(collection)): count
        for end in due
        for collection, count in end.data_collections
        if table_identifier(collection) in keyed and count
    }
    if not expected:
        return counts
    ids = sorted({txn for txn, _ in expected})
    seen = frame.where(F.col("transaction_id").isin(ids)).select("transaction_id", "source_table", "event_id")
    if spark.catalog.tableExists(plan.changelog_table):
        times = [_at(e.ts_ms) for e in due]
        lo, hi = min(times) - _COMMIT_MARGIN, max(times) + _COMMIT_MARGIN
        earlier = (
            spark.table(plan.changelog_table)
            .where((F.col("stream") == F.lit(window.stream_id))
                   & (F.col("window_id") != F.lit(window.window_id))
                   & F.col("commit_ts").between(F.timestamp_micros(F.lit(_micros(lo))),
                                                F.timestamp_micros(F.lit(_micros(hi))))
                   & F.col("transaction_id").isin(ids))
            .select("transaction_id", "source_table", "event_id")
        )
        seen = seen.unionByName(earlier)
    found = {
        (row.transaction_id, row.source_table): int(row.n)
        for row in seen.groupBy("transaction_id", "source_table")
        .agg(F.countDistinct("event_id").alias("n")).collect()
    }
    short = [(txn, table, found.get((txn, table), 0), count)
             for (txn, table), count in sorted(expected.items()) if found.get((txn, table), 0) < count]
    if short:
        named = "; ".join(f"transaction {txn}: {keyed[table]} has {have} of its {want} events"
                          for txn, table, have, want in short[:_NAMED])
        more = f" (and {len(short) - _NAMED} more)" if len(short) > _NAMED else ""
        raise IncompleteTransactionError(
            f"window {window.window_id} of stream {window.stream_id!r} is incomplete: {named}{more}, "
            f"by the END events read before {format_ts(window.end)}. A topic-partition's file is "
            f"missing from the sink or was written after the heartbeat that proved the window "
            f"(raise flush_lateness_seconds to the sink's rotation interval), or some events are "
            f"dead letters (see the dead-letter table); the window stays uncommitted and its "
            f"re-run reads the same files"
        )
    return counts


def _micros(at: datetime) -> int:
    return (at - _EPOCH) // timedelta(microseconds=1)


def _at(ts_ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ts_ms)
