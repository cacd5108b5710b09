"""Spanner change streams: query text, wire parsing, mapping to change rows, partition reads.

Specification: seed 000 (Spanner change streams: partitions, READ_<stream> and
spanner.read_json_<stream>, data change / heartbeat / child partitions records).

* :mod:`.source`: the :class:`~airflow_cdc.sources.base.ChangeSource`;
* :mod:`.records`: result rows -> data change, heartbeat and child partitions records;
* :mod:`.types`: the stream's column types in canonical names;
* :mod:`.readiness`: what a partition's query proves read (the gate's evidence);
* :mod:`.query`: the change stream query in both dialects; :mod:`.mapping`: records -> change
  rows; :mod:`.reader`: one partition's bounded query over one window.
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
