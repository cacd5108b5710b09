"""What every emulator shares: its error type, identifier checks and RFC 3339 timestamp text.

The emulators are their own distribution and must install without airflow-cdc, so they hold
these few rules themselves. The timestamp text is the wire format of the Google APIs they
speak (four-digit year, ``Z``, a fraction cut to microseconds, never rounded); the provider
writes the same shape (``tests/test_timestamp_text.py`` holds the two to it).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

UTC = timezone.utc
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class EmulatorError(Exception):
    """Base class of every error an emulator raises on purpose (bad set-up, bad history)."""


class InvalidIdentifierError(EmulatorError, ValueError):
    """A table, column or stream name that is not a plain identifier."""


def validate_identifier(kind: str, value: object) -> str:
    """Return ``value`` if it is a plain identifier, else raise naming kind, value and fix."""
    if not isinstance(value, str) or not _IDENTIFIER.match(value):
        raise InvalidIdentifierError(
            f"{kind} {value!r} is not an identifier: use letters, digits and _ "
            f"(at most 128, not starting with a digit)"
        )
    return value


def ensure_utc(name: str, value: datetime) -> datetime:
    """Return ``value`` in UTC; refuse naive datetimes, naming the value and the fix."""
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, got {type(value).__name__}: {value!r}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValueError(
            f"{name} {value.isoformat()} has no time zone: pass an aware datetime "
            f"(for example datetime(..., tzinfo=timezone.utc))"
        )
    return value.astimezone(UTC)


def format_ts(value: datetime, *, timespec: str = "microseconds") -> str:
    """RFC 3339 UTC text ``YYYY-MM-DDTHH:MM:SS.ffffffZ``: four-digit year (so the text sorts
    like the instant), the fraction cut to ``timespec``, never rounded."""
    utc = ensure_utc("timestamp", value)
    return utc.replace(tzinfo=None).isoformat(timespec=timespec) + "Z"


def parse_ts(text: str) -> datetime:
    """Inverse of :func:`format_ts`; also accepts any ISO-8601 text with an offset."""
    return ensure_utc("timestamp", datetime.fromisoformat(text.replace("Z", "+00:00")))
