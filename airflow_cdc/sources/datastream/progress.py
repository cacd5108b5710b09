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
