"""Instants as integer microseconds since the Unix epoch: the emulator's one time unit.

Spanner commit timestamps have microsecond precision in change stream records; integers make
ordering, bisecting and equality exact and fast. Conversions happen only at the edges.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow_cdc_emulators.common import ensure_utc, format_ts

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def to_micros(value: datetime) -> int:
    delta = ensure_utc("timestamp", value) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def to_datetime(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def format_micros(micros: int) -> str:
    """RFC 3339 UTC text with microseconds and Z, as change stream records carry timestamps."""
    return format_ts(to_datetime(micros))
