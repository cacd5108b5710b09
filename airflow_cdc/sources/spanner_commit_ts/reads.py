"""Which reads a commit-timestamp window makes, at which instants, and the retention rule.

For each instant the window reads at (its end ``e``; a re-seed's instant), per table: the
window query ``[start, e)``, and the key query when the reconciliation is due
(:func:`plan_steps`, pure). An instant older than the database's ``earliest_version_time``
(``version_retention_period`` back from now) cannot be read, and the window fails naming the
window, the retention and the fix (:func:`check_retention`), never skipping it. The reads run
on Spark (``airflow_cdc.spark_jobs.sources.spanner_commit_ts``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from airflow_cdc.model import PartitionPosition, format_ts, parse_ts
from airflow_cdc.sources.spanner_commit_ts import RESEED_PREFIX
from airflow_cdc.sources.spanner_commit_ts.errors import RetentionExceededError
from airflow_cdc.sources.spanner_commit_ts.schema import CHANGELOG, TablePlan
from airflow_cdc.sources.spanner_commit_ts.sql import key_query, window_query

ROWS, KEYS = "rows", "keys"


@dataclass(frozen=True)
class TableRead:
    """One query of one table at one instant."""

    table: str  # the configured name: the table's partition id
    mode: str  # ROWS or KEYS
    read_at: datetime
    start: datetime | None = None  # ROWS: the lower bound (None: the whole table)


@dataclass
class TableStep:
    """What one window does with one table."""

    table: str
    position: PartitionPosition
    reads: list[TableRead] = field(default_factory=list)
    watermark: datetime | None = None
    windows_since_reconcile: int = 0


def reseed_instant(positions) -> datetime | None:
    """The instant of the re-seed this window takes (its ``reseed:<instant>`` partition)."""
    instants = [parse_ts(p.resume_position) for p in positions
                if p.partition_id.startswith(RESEED_PREFIX)]
    return max(instants) if instants else None


def plan_steps(window, positions, tables: Mapping[str, TablePlan], *, reconcile_every: int,
               initial_load: bool) -> list[TableStep]:
    """Which reads the window makes per table (pure; see the module doc)."""
    by_id = {p.partition_id: p for p in positions}
    reseed_at = reseed_instant(positions)
    steps = []
    for name, table in tables.items():
        position = by_id.get(name)
        if position is None:
            continue  # a table the stream does not read in this window (not planned)
        state = json.loads(position.resume_position) if position.resume_position else None
        since = int((state or {}).get("windows_since_reconcile", 0))
        step = TableStep(name, position)
        start = position.start if state is not None or not initial_load else None
        reconcile_at = None
        if reseed_at is not None:
            step.reads.append(TableRead(name, ROWS, reseed_at, None))
            reconcile_at, since = reseed_at, 0
            start = reseed_at
        if start is None or start < window.end:
            step.reads.append(TableRead(name, ROWS, window.end, start))
            since += 1
            if reconcile_every and since >= reconcile_every and table.kind != CHANGELOG:
                reconcile_at, since = window.end, 0
        if reconcile_at is not None and table.kind != CHANGELOG:
            step.reads.append(TableRead(name, KEYS, reconcile_at))
        step.windows_since_reconcile = since
        step.watermark = max(d for d in (window.end, position.start, reseed_at) if d is not None)
        steps.append(step)
    return steps


def check_retention(database, window, instants) -> None:
    """Refuse reading at an instant older than the database keeps versions (never skip)."""
    database.reload()
    earliest = database.earliest_version_time
    retention = database.version_retention_period or "1h (the default)"
    for instant in sorted(set(instants)):
        if earliest is not None and instant < earliest:
            raise retention_error(window, instant, retention, earliest)


def retention_error(window, instant: datetime, retention: str, earliest) -> RetentionExceededError:
    earliest_text = format_ts(earliest) if isinstance(earliest, datetime) else str(earliest)
    return RetentionExceededError(
        f"window {window.window_id} of stream {window.stream_id} must be read at "
        f"{format_ts(instant)}, but the database keeps versions for {retention} only (the "
        f"earliest readable instant is {earliest_text}): the window's changes can no longer be "
        f"read as of its end, and skipping it would lose them. Fix: re-seed the targets from a "
        f"read at the current time with SpannerCommitTimestampReseedOperator (stream "
        f"{window.stream_id!r}), then clear this window's plan task; the window then takes the "
        f"re-seed. To keep it from happening again, raise the database's "
        f"version_retention_period (up to 7 days) above the longest time a window may wait"
    )


def table_query(dialect: str, table: TablePlan, read: TableRead):
    """The SQL of ``read`` (its window or key query) of ``table`` in ``dialect``."""
    if read.mode == KEYS:
        return key_query(dialect, table.table, table.keys)
    return window_query(dialect, table.table, [c for c, _ in table.columns], table.column,
                        read.start, read.read_at)
