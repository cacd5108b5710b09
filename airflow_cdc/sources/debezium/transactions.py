"""Transaction completeness from Debezium's transaction metadata (``provide.transaction.metadata``).

The connector writes a BEGIN and an END event per transaction to ``<topic.prefix>.transaction``;
the END names, per table (data collection), how many change events the transaction made,
and each change event carries the transaction's id. Topics flush independently, so one
transaction's events can land in two windows, and its END in a later window than its data.
A window reads the transaction topic only up to the first BEGIN or END committed at or
after its end (the rest is the next window's), so every END it reads is of a transaction
committed before its end, whose events were all in the sink's files when the window was
planned (the heartbeat evidence): in this window or in earlier ones. The check
(:func:`expected_events`, then the source's Spark side counts the events on the driver after
the extract's reads, ``airflow_cdc.spark_jobs.sources.debezium``):

1. read those END events (ids as :func:`~.records.transaction_key` reads them:
   PostgreSQL's are ``<txId>:<LSN>`` with a different LSN on BEGIN, END and the events);
2. count each table's distinct event ids of those transactions in this window's changes
   and in the stream's changelog (earlier windows, read within the transactions' commit
   times, which Iceberg prunes by ``days(commit_ts)``);
3. raise :class:`IncompleteTransactionError` naming the first transactions and tables short
   of their END count: the window stays uncommitted, visibly, and its re-run reads the same
   files. Tables without ``key_columns`` are left out (their events are dead letters).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from airflow_cdc.model import format_ts
from airflow_cdc.sources.debezium.records import TransactionEvent, parse_line, transaction_key
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


@dataclass(frozen=True)
class ExpectedEvents:
    """What the window's END events expect (steps 1-2 of the module doc): per (transaction
    key, table identifier), the events the transaction made in that table."""

    counts: dict  # ``transactions`` (ENDs read) and ``transactions_checked`` (due ones)
    expected: dict  # (transaction key, table identifier) -> events
    tables: dict  # table identifier -> the table as configured (``key_columns``)
    commit_times: tuple  # commit times of the due ENDs

    def transaction_ids(self) -> list[str]:
        return sorted({txn for txn, _ in self.expected})

    def changelog_range(self) -> tuple[int, int]:
        """The changelog's commit times (UTC microseconds) within which earlier windows hold
        the transactions' events."""
        lo, hi = min(self.commit_times) - _COMMIT_MARGIN, max(self.commit_times) + _COMMIT_MARGIN
        return _micros(lo), _micros(hi)

    def check(self, window, found: dict) -> dict:
        """Step 3: raise :class:`IncompleteTransactionError` naming the first transactions and
        tables whose ``found`` events (by (transaction key, table)) are short of their END
        count; else the counts."""
        short = [(txn, table, found.get((txn, table), 0), count)
                 for (txn, table), count in sorted(self.expected.items())
                 if found.get((txn, table), 0) < count]
        if short:
            raise incomplete_error(window, short, self.tables)
        return self.counts


def expected_events(source, plan) -> ExpectedEvents:
    """Steps 1-2's expectation of ``plan``'s window (nothing ``expected``: nothing to check)."""
    from airflow_cdc.sources.debezium.source import table_identifier

    window = plan.window
    ends = transaction_ends(source, plan)
    due = [e for e in ends if e.ts_ms is not None and _at(e.ts_ms) < window.end]
    counts = {"transactions": len(ends), "transactions_checked": len(due)}
    keyed = {table_identifier(t): t for t in source.key_columns}
    expected = {
        (transaction_key(end.id), table_identifier(collection)): count
        for end in due
        for collection, count in end.data_collections
        if table_identifier(collection) in keyed and count
    }
    return ExpectedEvents(counts, expected, keyed, tuple(_at(e.ts_ms) for e in due))


def incomplete_error(window, short: list, tables: dict) -> IncompleteTransactionError:
    """The error naming the first of ``short`` (transaction, table, events found, expected)."""
    named = "; ".join(f"transaction {txn}: {tables[table]} has {have} of its {want} events"
                      for txn, table, have, want in short[:_NAMED])
    more = f" (and {len(short) - _NAMED} more)" if len(short) > _NAMED else ""
    return IncompleteTransactionError(
        f"window {window.window_id} of stream {window.stream_id!r} is incomplete: {named}{more}, "
        f"by the END events read before {format_ts(window.end)}. A topic-partition's file is "
        f"missing from the sink or was written after the heartbeat that proved the window "
        f"(raise flush_lateness_seconds to the sink's rotation interval), or some events are "
        f"dead letters (see the dead-letter table); the window stays uncommitted and its "
        f"re-run reads the same files"
    )


def _micros(at: datetime) -> int:
    return (at - _EPOCH) // timedelta(microseconds=1)


def _at(ts_ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ts_ms)
