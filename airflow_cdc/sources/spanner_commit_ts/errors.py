"""What the commit-timestamp source refuses, each error naming the thing, the value and the fix."""

from __future__ import annotations

from airflow_cdc.model import CdcError


class CommitTimestampSchemaError(CdcError, ValueError):
    """A configured table or column that cannot be read by commit timestamp."""


class FutureWindowError(CdcError):
    """A window whose end is not in the past yet: a read at that instant could miss commits."""


class RetentionExceededError(CdcError):
    """A window older than the database's version retention: it cannot be read at its end."""
