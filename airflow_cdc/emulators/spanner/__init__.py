"""A local Spanner change stream server replaying a deterministic, seeded history.

* :mod:`.history` generates the history (tables, transactions, partition lineage, records,
  true state); :mod:`.partition_lineage` the partitions' splits and merges; :mod:`.schema` the types.
* :mod:`.query` decides what a ``READ_<stream>`` / ``spanner.read_json_<stream>`` query
  returns or why it is refused; :mod:`.sql` parses the query text; :mod:`.records` encodes the
  rows for both dialects; :mod:`.servicer` and :mod:`.server` put it on gRPC.
* ``python -m airflow_cdc.emulators.spanner --port 9010`` runs it on its own.

No Airflow or pyspark import here: tests, the demo and Spark executors' machines use it alike.
"""

from __future__ import annotations

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
from .server import SpannerChangeStreamEmulator

__all__ = [
    "DEFAULT_START",
    "DEFAULT_STREAM",
    "DEFAULT_TABLES",
    "VALUE_CAPTURE_TYPES",
    "ChangeStreamQueryError",
    "Column",
    "DataChangeRecord",
    "History",
    "HistoryConfig",
    "Partition",
    "PartitionEvent",
    "RowChange",
    "SpannerChangeStreamEmulator",
    "SpannerType",
    "Table",
    "Transaction",
    "generate_history",
]
