"""Completeness evidence: how far the Datastream reader provably got.

Datastream delivers out of order but promises (seed 001) that duplicates and stragglers stay
within minutes. A window ``[s, e)`` is complete once an event read after ``e`` plus the
allowed lateness was seen: ``read_timestamp - allowed_lateness >= e``. The progress
partition's watermark is therefore the newest read_timestamp minus the lateness, and it only
moves forward. An idle source produces no events at all; after ``idle_timeout`` past the
window end (as of planning, so re-runs decide the same way) the window is declared complete,
and the window's counts say so (``idle_declared``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow_cdc.model import PartitionOutcome, parse_ts
from airflow_cdc.sources.datastream import PROGRESS_PARTITION

DEFAULT_ALLOWED_LATENESS = timedelta(minutes=5)


def progress_watermark(
    previous: datetime,
    newest_read: datetime | None,
    allowed_lateness: timedelta,
) -> datetime:
    if newest_read is None:
        return previous
    return max(previous, newest_read - allowed_lateness)


def idle_declared(
    events: int,
    watermark: datetime,
    window_end: datetime,
    planned_at: datetime,
    idle_timeout: timedelta | None,
) -> bool:
    """True when the window read nothing, lacks evidence, and the idle timeout has passed."""
    return (
        idle_timeout is not None
        and events == 0
        and watermark < window_end
        and planned_at >= window_end + idle_timeout
    )


def progress_outcome(plan, read: int, newest_ms: int | None) -> tuple[PartitionOutcome | None, bool]:
    """The progress partition's outcome (newest read time minus the lateness, or the window
    end when an idle source is declared complete) and whether it was declared idle."""
    window, options = plan.window, plan.options
    progress = next((p for p in plan.positions if p.partition_id == PROGRESS_PARTITION), None)
    if progress is None:
        return None, False
    lateness = timedelta(seconds=float(options.get("allowed_lateness_seconds", 300)))
    idle_timeout = options.get("idle_timeout_seconds")
    newest = None if newest_ms is None else datetime.fromtimestamp(newest_ms / 1000, tz=window.start.tzinfo)
    watermark = progress_watermark(progress.start, newest, lateness)
    planned_at = parse_ts(options["planned_at"]) if options.get("planned_at") else window.start
    idle = idle_declared(
        read, watermark, window.end, planned_at,
        None if idle_timeout is None else timedelta(seconds=float(idle_timeout)),
    )
    if idle:
        watermark = max(watermark, window.end)
    return PartitionOutcome(PROGRESS_PARTITION, finished=False, watermark=watermark), idle
