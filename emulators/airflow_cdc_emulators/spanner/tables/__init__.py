"""Spanner tables with commit timestamp columns, multi-version, served next to change streams.

* :mod:`.definition` the schema (columns with ``allow_commit_timestamp``, keys, interleaving,
  indexes) and its DDL in both dialects; :mod:`.values` values in Python and on the wire;
* :mod:`.mutations` what a Commit writes; :mod:`.store` the multi-version store
  (:class:`VersionedDatabase`: commits, reads at a timestamp, the truth tests ask for);
* :mod:`.sql` the SQL answered (parser), :mod:`.execution` what a statement answers,
  :mod:`.information_schema` the INFORMATION_SCHEMA views;
* :mod:`.service` the Spanner API over a store (transactions, partitions, commits);
* :mod:`.commit_ts_history` the seeded, deterministic history of five tables.
"""

from __future__ import annotations

from .commit_ts_history import (
    COMMIT_TIMESTAMP_SCHEMA,
    CommitTimestampHistoryConfig,
    commit_timestamp_tables,
    generate_commit_timestamp_tables,
)
from .definition import ColumnSpec, DatabaseSchema, IndexSpec, TableSpec
from .mutations import (
    KeyRange,
    KeySet,
    delete,
    insert,
    insert_or_update,
    replace,
    update,
)
from .status import SpannerStatusError
from .store import CommitRecord, CommittedChange, VersionedDatabase
from .values import COMMIT_TIMESTAMP

__all__ = [
    "COMMIT_TIMESTAMP",
    "COMMIT_TIMESTAMP_SCHEMA",
    "ColumnSpec",
    "CommitRecord",
    "CommitTimestampHistoryConfig",
    "CommittedChange",
    "DatabaseSchema",
    "IndexSpec",
    "KeyRange",
    "KeySet",
    "SpannerStatusError",
    "TableSpec",
    "VersionedDatabase",
    "commit_timestamp_tables",
    "delete",
    "generate_commit_timestamp_tables",
    "insert",
    "insert_or_update",
    "replace",
    "update",
]
