"""When a commit-timestamp window may be read (seed 003).

A read at exactly ``e`` sees every commit at or before ``e`` and none after, so a window
``[s, e)`` is complete once ``e`` is past; a safety margin covers clock skew between the
Airflow workers and Spanner's TrueTime. Before the window opens in the state store (a refused
window leaves no state behind, and fixing the configuration needs no reset of the stream),
its tables must pass the schema check and ``e`` the retention check
(:func:`~.reads.check_retention`), unless a re-seed is pending (it reads at its own instant).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from airflow_cdc.model import Readiness, Window, format_ts


def window_readiness(window: Window, now: datetime, safety_margin: timedelta,
                     check_tables: Callable[[], object], check_end: Callable[[], object]) -> Readiness:
    """Whether ``window`` may be planned at ``now``: ``e`` past by ``safety_margin``, then
    ``check_tables()`` and ``check_end()`` (the retention check, unless a re-seed is
    pending); each check raises, naming the fix, when the window cannot be read."""
    due = window.end + safety_margin
    if now < due:
        return Readiness(
            False, f"a read at the window's end sees every commit before it once the end "
            f"is past by the safety margin ({safety_margin.total_seconds():g} s), at "
            f"{format_ts(due)}", retry_at=due)
    check_tables()
    check_end()
    return Readiness(True, f"the window's end {format_ts(window.end)} is past by the safety "
                           f"margin and its tables can be read by commit timestamp")
