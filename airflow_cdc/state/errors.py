"""The state store's errors; each message names the object, the bad value and the fix.

They are grouped so callers can catch a family: every lease conflict is a :class:`LeaseError`
(the loser of two runs of one window, invariant I6, gets one), every refused plan or commit
input is a ``ValueError`` too.
"""

from __future__ import annotations

from airflow_cdc.model import CdcError


class StateStoreError(CdcError):
    """Base class of the state store's errors."""


class UnsupportedDatabaseError(StateStoreError, ValueError):
    """The state store URL names a database the store does not support."""


class SchemaVersionError(StateStoreError):
    """The database's schema version is not the one this airflow-cdc knows."""


class StreamNotRegisteredError(StateStoreError, LookupError):
    """A stream is used before ``register_stream``."""


class StreamConfigChangedError(StateStoreError):
    """A stream is registered again with another source kind or config fingerprint."""


class WindowNotFoundError(StateStoreError, LookupError):
    """A transition names a window that was never planned."""


class WindowOrderError(StateStoreError):
    """Windows of a stream must be contiguous and commit strictly in order."""


class IllegalTransitionError(StateStoreError):
    """A window state change the window protocol does not allow."""


class LeaseError(StateStoreError):
    """Another run holds, or took over, the window (invariant I6)."""


class WindowLeaseHeldError(LeaseError):
    """Planning a window another run holds an unexpired lease on; ``holder`` names that run."""

    def __init__(self, message: str, holder: str | None = None) -> None:
        super().__init__(message)
        self.holder = holder


class LeaseLostError(LeaseError):
    """A run acts on a window whose lease it no longer holds; nothing was changed."""


class WindowConflictError(LeaseError):
    """A guarded update found the window changed under it (another run is active on it)."""


class WatermarkRegressionError(StateStoreError):
    """A partition's watermark would move backwards."""


class SnapshotMismatchError(StateStoreError):
    """A re-run reports another changelog snapshot than the one recorded for the window."""


class InvalidPlanError(StateStoreError, ValueError):
    """Initial partition positions that cannot start a stream."""


class OutcomeError(StateStoreError, ValueError):
    """Partition outcomes that do not fit the window's plan or the partition lineage."""
