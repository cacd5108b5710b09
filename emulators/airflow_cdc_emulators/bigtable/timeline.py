"""Instants as integer microseconds since the Unix epoch, and the emulator's settable clock.

Bigtable commit timestamps have microsecond precision in change stream records; integers make
ordering, bisecting and equality exact. Conversions to ``datetime`` happen only at the edges.

:class:`Clock` is the emulator's notion of "now": real time minus an offset. ``set_now(dt)``
makes "now" equal ``dt`` at that moment, after which it advances with wall time.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from airflow_cdc_emulators.common import ensure_utc, format_ts

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MICROS_PER_SECOND = 1_000_000


def to_micros(value: datetime) -> int:
    delta = ensure_utc("timestamp", value) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * MICROS_PER_SECOND + delta.microseconds


def to_datetime(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def duration_micros(value: timedelta) -> int:
    return (value.days * 86_400 + value.seconds) * MICROS_PER_SECOND + value.microseconds


def format_micros(micros: int) -> str:
    """ISO-8601 UTC text with microseconds and Z, for messages and JSON."""
    return format_ts(to_datetime(micros))


def wall_micros() -> int:
    return time.time_ns() // 1000


class Clock:
    """``now = wall time - offset``; the offset is 0 (real time) until :meth:`set_now`."""

    def __init__(self, offset_us: int = 0) -> None:
        self.offset_us = offset_us

    def now_us(self) -> int:
        return wall_micros() - self.offset_us

    def set_now(self, value: datetime) -> None:
        self.offset_us = wall_micros() - to_micros(value)
