"""Spanner change streams: query text, wire parsing, mapping to change rows, partition reads.

Specification: seed 000 (Spanner change streams: partitions, READ_<stream> and
spanner.read_json_<stream>, data change / heartbeat / child partitions records).
"""

from airflow_cdc.sources.spanner.query import (
    GOOGLE_SQL,
    INITIAL_PARTITION,
    POSTGRESQL,
    ChangeStreamQuery,
    build_query,
)
from airflow_cdc.sources.spanner.records import (
    ChildPartitionsRecord,
    ColumnType,
    DataChangeRecord,
    HeartbeatRecord,
    Mod,
    parse_result_row,
)

__all__ = [
    "GOOGLE_SQL",
    "POSTGRESQL",
    "INITIAL_PARTITION",
    "ChangeStreamQuery",
    "build_query",
    "ChildPartitionsRecord",
    "ColumnType",
    "DataChangeRecord",
    "HeartbeatRecord",
    "Mod",
    "parse_result_row",
]
