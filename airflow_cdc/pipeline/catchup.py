"""Catch-up windows: a stream that fell behind reads many intervals in one window.

Each DAG run owns one interval ``[s, e)``. When the run's interval ended well before now (an
outage, a paused DAG, a backfill), the runs of the intervals after it are due too, and
reading them one window each costs a whole window per interval: a backlog larger than the
window cost never drains. So the plan of the first unplanned interval may extend its window
over the following intervals that are ready by the source's own rule, up to a limit
(:class:`CatchupLimit`). One window then reads, commits and applies the whole span.

The rules (the invariants I1-I6 hold because a catch-up window is an ordinary window):

* A window ends on an interval boundary of the DAG's schedule, so every later interval is
  either read whole by one window or not at all.
* The runs of the covered intervals plan nothing: each records that its interval was read by
  the covering window (:meth:`~airflow_cdc.state.store.StateStore.record_covered_interval`),
  runs no Spark job, and its gate opens when the covering window is COMPLETE; each still
  emits its own Asset event, so every interval has a record and an event.
* Which intervals a window covers is decided once, when it is first planned: its recorded
  end is what every later step and re-run reads (:func:`run_window`).
* Readiness grows with time and shrinks with the window's end: if ``[s, E)`` may be planned,
  so may ``[s, E')`` for every earlier boundary ``E'``. The largest ready end is found by
  bisection, asking the source a handful of times however long the backlog.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from airflow_cdc.model import UTC, Window, format_ts


@dataclass(frozen=True)
class CatchupLimit:
    """How far one window may reach past its own interval: a duration, a number of
    intervals, or both (the tighter wins). ``CatchupLimit.off()`` reads one interval per
    window (no catch-up)."""

    span: timedelta | None = None
    intervals: int | None = None

    def __post_init__(self) -> None:
        if self.span is not None and self.span < timedelta(0):
            raise ValueError(f"max_catchup {self.span} is negative: give a duration of zero "
                             f"(no catch-up) or more")
        if self.intervals is not None and self.intervals < 0:
            raise ValueError(f"max_catchup of {self.intervals} intervals is negative: give 0 "
                             f"(no catch-up) or more")

    @classmethod
    def off(cls) -> CatchupLimit:
        return cls(intervals=0)

    @classmethod
    def parse(cls, value) -> CatchupLimit:
        """``max_catchup`` as a pipeline takes it: a ``timedelta`` (the longest window), an
        ``int`` (the most intervals one window reads, its own included), a CatchupLimit, or
        None/0/False for none."""
        if isinstance(value, CatchupLimit):
            return value
        if value is None or value is False or value == 0:
            return cls.off()
        if isinstance(value, bool):  # True is not a limit
            raise TypeError("max_catchup=True names no limit: give a timedelta or a number "
                            "of intervals")
        if isinstance(value, timedelta):
            return cls(span=value)
        if isinstance(value, int):
            if value < 1:
                raise ValueError(f"max_catchup={value}: give 1 or more intervals (1: no "
                                 f"catch-up), a timedelta, or None")
            return cls(intervals=value)
        raise TypeError(f"max_catchup={value!r}: give a timedelta (the longest window), an int "
                        f"(the most intervals one window reads), or None for no catch-up")

    @property
    def enabled(self) -> bool:
        return self.intervals != 0 and self.span != timedelta(0) and (
            self.intervals is None or self.intervals > 1)

    def allows(self, start: datetime, end: datetime, intervals: int) -> bool:
        """Whether a window ``[start, end)`` of ``intervals`` intervals is within the limit."""
        if not self.enabled:
            return intervals <= 1
        if self.intervals is not None and intervals > self.intervals:
            return False
        return self.span is None or end - start <= self.span


# Off unless a pipeline asks for it: a catch-up window changes what a run's events carry (the
# window's end lies past the interval), which consumers written for one window per interval
# must be ready for. ``timedelta(hours=1)`` is a good first limit on a schedule of minutes.
DEFAULT_MAX_CATCHUP = None


@dataclass(frozen=True)
class RunWindow:
    """What a DAG run's interval is to the stream.

    ``window`` is the window that reads the interval: the one planned from the interval's
    start (its end may lie past the interval: a catch-up window), or the catch-up window of
    an earlier run that covers it; None while neither exists (the interval is unplanned).
    """

    interval: Window
    window: Window | None

    @property
    def covered(self) -> bool:
        """Whether an earlier run's catch-up window reads this interval."""
        return self.window is not None and self.window.start < self.interval.start

    @property
    def planned(self) -> bool:
        return self.window is not None

    def effective(self) -> Window:
        """The window the run's steps act on: the reading window, else its own interval."""
        return self.window or self.interval


def run_window(store, interval: Window) -> RunWindow:
    """The window that reads the run's ``interval`` (see :class:`RunWindow`)."""
    record = store.get_window(interval.stream_id, interval.start)
    if record is not None:
        return RunWindow(interval, record.window)
    covering = store.covering_window(interval.stream_id, interval.start)
    return RunWindow(interval, None if covering is None else covering.window)


def following_intervals(
    interval: Window,
    next_interval: Callable[[datetime, datetime], tuple[datetime, datetime] | None],
    now: datetime,
    limit: CatchupLimit,
) -> list[datetime]:
    """The ends of the intervals after ``interval`` one window may cover, in order.

    ``next_interval(start, end)`` is the DAG's schedule: the interval after ``[start, end)``
    (None: no more). Only intervals that have ended by ``now``, that start where the previous
    one ended (a gap in the schedule ends the span: the next window starts after it), and
    that keep the window within ``limit`` are taken.
    """
    ends: list[datetime] = []
    if not limit.enabled:
        return ends
    start, end = interval.start, interval.end
    while True:
        following = next_interval(start, end)
        if following is None:
            return ends
        next_start, next_end = following
        if next_start != end or next_end > now:
            return ends
        if not limit.allows(interval.start, next_end, len(ends) + 2):
            return ends
        ends.append(next_end)
        start, end = next_start, next_end


def catchup_window(interval: Window, following: Sequence[datetime],
                   ready: Callable[[Window], bool]) -> Window:
    """The longest window from ``interval``'s start to one of ``following`` (interval ends,
    in order) that ``ready`` accepts; the interval itself when none is.

    Bisection: readiness is monotone in the window's end (see the module's rules).
    """
    low, high = 0, len(following)  # intervals past its own: ``low`` is known to be ready
    while low < high:
        middle = (low + high + 1) // 2
        if ready(Window(interval.stream_id, interval.start, following[middle - 1])):
            low = middle
        else:
            high = middle - 1
    if low == 0:
        return interval
    return Window(interval.stream_id, interval.start, following[low - 1])


# The partition key of an interval's Asset events: its start in UTC, to the second, the
# format Airflow's temporal partition mappers read by default (``input_format``).
PARTITION_KEY_FORMAT = "%Y-%m-%dT%H:%M:%S"


def interval_partition_key(interval) -> str:
    """The partition key of a DAG run's interval (a :class:`~airflow_cdc.model.Window`): its
    start in UTC as ``YYYY-MM-DDTHH:MM:SS``. One key per interval, whatever window read it,
    so a downstream DAG scheduled on the partitioned Asset runs once per interval; Airflow's
    ``StartOfHourMapper`` and the other temporal mappers roll keys up to coarser ones."""
    return interval.start.astimezone(UTC).strftime(PARTITION_KEY_FORMAT)


def covering_fields(run: RunWindow) -> dict:
    """What a covered interval's summary and events add: the window that read it."""
    return {"covered_by": run.window.window_id}


def covered_summary(run: RunWindow, record=None) -> dict:
    """A covered run's XCom summary: its interval and the window that read it."""
    summary = {
        "window_id": run.interval.window_id,
        "covered_by": run.window.window_id,
        "interval_start": format_ts(run.interval.start),
        "interval_end": format_ts(run.interval.end),
        "window_start": format_ts(run.window.start),
        "window_end": format_ts(run.window.end),
        "skipped": True,
    }
    if record is not None:
        summary["covering_state"] = record.state.value
    return summary
