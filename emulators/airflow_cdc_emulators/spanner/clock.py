"""The emulator's "now", in integer microseconds: a settable instant, or wall time.

One clock drives everything an emulator serves: the change stream's "now" and the tables'
strong reads, retention and commit timestamps. A *settable* clock stays where it is put (tests
and demos replay history window by window); a commit that needs a later timestamp bumps it.
A *wall* clock follows real time, so a writer committing through the client gets commit
timestamps of real time, and a read at a timestamp a little ahead waits, as Spanner does.
"""

from __future__ import annotations

import threading
import time

from airflow_cdc_emulators.common import EmulatorError

# Spanner waits for a read timestamp in the near future; the emulator waits this long at most.
MAX_FUTURE_WAIT_US = 60_000_000


class ClockError(EmulatorError, ValueError):
    """The clock cannot do what was asked (e.g. set a clock that follows wall time)."""


def wall_micros() -> int:
    return time.time_ns() // 1000


class EmulatorClock:
    """``now_us`` is the settable instant, or real time once :meth:`follow_wall_time` is on."""

    def __init__(self, now_us: int | None = None, *, wall: bool = False) -> None:
        if now_us is None and not wall:
            raise ClockError("a settable clock needs a start instant (now_us)")
        self._now_us = now_us
        self._wall = wall
        self._lock = threading.Lock()

    @classmethod
    def wall_time(cls) -> EmulatorClock:
        return cls(None, wall=True)

    @property
    def wall(self) -> bool:
        """True when "now" is real time."""
        return self._wall

    @property
    def now_us(self) -> int:
        return wall_micros() if self._wall else self._now_us

    def set(self, now_us: int) -> None:
        if self._wall:
            raise ClockError(
                "the emulator's clock follows wall time and cannot be set: build the emulator "
                "without wall_clock=True (or --wall-clock) to move now by hand"
            )
        with self._lock:
            self._now_us = int(now_us)

    def follow_wall_time(self) -> None:
        self._wall = True

    def reach(self, at_us: int) -> None:
        """Make ``now >= at_us``: a settable clock is bumped, a wall clock is waited for."""
        if self._wall:
            while (remaining := at_us - wall_micros()) > 0:
                time.sleep(remaining / 1_000_000)
            return
        with self._lock:
            self._now_us = max(self._now_us, at_us)
