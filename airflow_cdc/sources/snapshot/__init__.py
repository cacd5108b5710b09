"""A table's initial snapshot in parallel chunks by primary key (PostgreSQL, MariaDB/MySQL).

Pure Python over any DB-API connection (no Airflow, no pyspark): the plan is made on the
Airflow side and its predicates go to ``spark.read.jdbc(url, table, predicates=[...])``.

* :mod:`.dialects` quotes validated identifiers and renders key values as exact literals.
* :mod:`.keys` finds the key columns (the primary key, or ``key_columns=``) and their kinds.
* :mod:`.chunks` captures the maximum key, has the database number the keys, and turns every
  ``chunk_size``-th one into a boundary: chunks are ranges ``(lower, upper]`` up to the
  maximum; rows inserted later above it are the change stream's (see its docstring).
"""

from airflow_cdc.sources.snapshot.chunks import (
    Chunk,
    ChunkPlan,
    chunk_predicate,
    parametrized_predicate,
    plan_chunks,
)
from airflow_cdc.sources.snapshot.dialects import (
    KINDS,
    MARIADB,
    POSTGRESQL,
    Dialect,
    SnapshotChunkError,
    UnsupportedKeyTypeError,
    dialect_named,
)
from airflow_cdc.sources.snapshot.keys import KeyColumn, NoUsableKeyError, discover_key_columns

__all__ = [
    "KINDS",
    "MARIADB",
    "POSTGRESQL",
    "Chunk",
    "ChunkPlan",
    "Dialect",
    "KeyColumn",
    "NoUsableKeyError",
    "SnapshotChunkError",
    "UnsupportedKeyTypeError",
    "chunk_predicate",
    "dialect_named",
    "discover_key_columns",
    "parametrized_predicate",
    "plan_chunks",
]
