"""The column types of tables read by commit timestamp, in canonical names.

A Spanner column type (GoogleSQL or PostgreSQL dialect, as INFORMATION_SCHEMA names it) maps
as a change stream's does (:func:`airflow_cdc.sources.spanner.types.canonical_type`);
PostgreSQL's commit-timestamp column type (``spanner.commit_timestamp``) is a TIMESTAMP. A type
apply cannot type (STRUCT, PROTO) keeps its own text, which apply refuses with the reason
(dead-lettering that table's rows).
"""

from __future__ import annotations

from airflow_cdc.sources.column_types import UnsupportedColumnTypeError
from airflow_cdc.sources.spanner.types import canonical_type

PG_COMMIT_TIMESTAMP = "spanner.commit_timestamp"


def canonical_column_type(spanner_type: str) -> str:
    """A column's canonical type (the module doc's rule)."""
    if spanner_type.strip().lower() == PG_COMMIT_TIMESTAMP:
        return "TIMESTAMP"
    try:
        return str(canonical_type(spanner_type))
    except UnsupportedColumnTypeError:
        return spanner_type
