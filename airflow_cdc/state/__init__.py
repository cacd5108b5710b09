"""The state store: airflow-cdc's metadata tables and their guarded transitions.

Streams, partitions (with their lineage, resume positions and watermarks), windows (with their
state, lease and results) and the partitions each window reads, kept in SQLite (the embedded
default) or PostgreSQL through SQLAlchemy Core. Imports neither Airflow nor pyspark.
"""

from airflow_cdc.state.errors import (
    IllegalTransitionError,
    InvalidPlanError,
    LeaseError,
    LeaseLostError,
    OutcomeError,
    SchemaVersionError,
    SnapshotMismatchError,
    StateStoreError,
    StreamConfigChangedError,
    StreamNotRegisteredError,
    UnsupportedDatabaseError,
    WatermarkRegressionError,
    WindowConflictError,
    WindowLeaseHeldError,
    WindowNotFoundError,
    WindowOrderError,
)
from airflow_cdc.state.migrations import HEAD_VERSION
from airflow_cdc.state.records import (
    PartitionRecord,
    StreamRecord,
    WindowPartitionRecord,
    WindowPlan,
    WindowRecord,
)
from airflow_cdc.state.store import StateStore

__all__ = [
    "HEAD_VERSION",
    "IllegalTransitionError",
    "InvalidPlanError",
    "LeaseError",
    "LeaseLostError",
    "OutcomeError",
    "PartitionRecord",
    "SchemaVersionError",
    "SnapshotMismatchError",
    "StateStore",
    "StateStoreError",
    "StreamConfigChangedError",
    "StreamNotRegisteredError",
    "StreamRecord",
    "UnsupportedDatabaseError",
    "WatermarkRegressionError",
    "WindowConflictError",
    "WindowLeaseHeldError",
    "WindowNotFoundError",
    "WindowOrderError",
    "WindowPartitionRecord",
    "WindowPlan",
    "WindowRecord",
]
