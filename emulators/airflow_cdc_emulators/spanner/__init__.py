"""A local Spanner server: a seeded change stream history and/or versioned tables.

* :mod:`.history` generates the change stream history (tables, transactions, partition
  lineage, records, true state); :mod:`.partition_lineage` the partitions' splits and merges;
  :mod:`.schema` the types.
* :mod:`.query` decides what a ``READ_<stream>`` / ``spanner.read_json_<stream>`` query
  returns or why it is refused; :mod:`.sql` parses the query text; :mod:`.records` encodes the
  rows for both dialects.
* :mod:`.tables` serves tables with commit timestamp columns, every version kept: reads at a
  timestamp, partitioned queries, INFORMATION_SCHEMA, DML and mutations, version retention,
  and a seeded history of five such tables (:func:`generate_commit_timestamp_tables`).
* :mod:`.clock` is the one "now" of both; :mod:`.servicer` and :mod:`.server` put it on gRPC.
* ``emulator.faults`` (:mod:`airflow_cdc_emulators.injected_faults`) breaks change stream
  queries on demand, mid-stream: gRPC errors, rejected tokens, stopped heartbeats.
* ``python -m airflow_cdc_emulators.spanner --port 9010 [--commit-ts-tables]`` runs it alone.

No Airflow or pyspark import here: tests, the demo and Spark executors' machines use it alike.
"""

from __future__ import annotations

from .clock import EmulatorClock
from .history import (
    DEFAULT_START,
    DEFAULT_STREAM,
    VALUE_CAPTURE_TYPES,
    DataChangeRecord,
    History,
    HistoryConfig,
    RowChange,
    Transaction,
    generate_history,
)
from .partition_lineage import Partition, PartitionEvent
from .query import ChangeStreamQueryError
from .schema import DEFAULT_TABLES, Column, SpannerType, Table
from .server import SpannerChangeStreamEmulator, SpannerEmulator
from .tables import (
    COMMIT_TIMESTAMP,
    COMMIT_TIMESTAMP_SCHEMA,
    ColumnSpec,
    CommitRecord,
    CommittedChange,
    CommitTimestampHistoryConfig,
    DatabaseSchema,
    IndexSpec,
    KeyRange,
    KeySet,
    SpannerStatusError,
    TableSpec,
    VersionedDatabase,
    commit_timestamp_tables,
    generate_commit_timestamp_tables,
    mutations,
)

__all__ = [
    "COMMIT_TIMESTAMP",
    "COMMIT_TIMESTAMP_SCHEMA",
    "DEFAULT_START",
    "DEFAULT_STREAM",
    "DEFAULT_TABLES",
    "VALUE_CAPTURE_TYPES",
    "ChangeStreamQueryError",
    "Column",
    "ColumnSpec",
    "CommitRecord",
    "CommitTimestampHistoryConfig",
    "CommittedChange",
    "DataChangeRecord",
    "DatabaseSchema",
    "EmulatorClock",
    "History",
    "HistoryConfig",
    "IndexSpec",
    "KeyRange",
    "KeySet",
    "Partition",
    "PartitionEvent",
    "RowChange",
    "SpannerChangeStreamEmulator",
    "SpannerEmulator",
    "SpannerStatusError",
    "SpannerType",
    "Table",
    "TableSpec",
    "Transaction",
    "VersionedDatabase",
    "commit_timestamp_tables",
    "generate_commit_timestamp_tables",
    "generate_history",
    "mutations",
]
