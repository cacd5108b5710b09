"""The state tables as the store reads and writes them today (the head schema).

The DDL that creates them lives in :mod:`airflow_cdc.state.migrations`, frozen per version;
these definitions are the query side and must describe the schema after the last migration.

Timestamps are stored as UTC with microsecond precision: ``TIMESTAMP WITH TIME ZONE`` on
PostgreSQL, and on SQLite (which has no time zones) naive UTC text of one fixed width, so text
comparison in SQL orders them like the instants. Both come back as aware UTC datetimes.
JSON values are stored as text: the same on both databases, and compact.
"""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)
from sqlalchemy.types import TypeDecorator

from airflow_cdc.model import UTC, ensure_utc


class UtcDateTime(TypeDecorator):
    """An aware UTC datetime on the way in and out, whatever the database keeps."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is None:
            return None
        value = ensure_utc("timestamp", value)
        if dialect.name == "sqlite":
            # SQLite text carries no offset: always UTC, so every stored value compares alike.
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def dumps(value: object) -> str:
    """JSON text for a state column; sorted keys so equal values store equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def loads(text: str | None, default: object = None) -> object:
    return default if text is None else json.loads(text)


metadata = MetaData()

schema_version = Table(
    "cdc_schema_version",
    metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("description", Text, nullable=False),
    Column("applied_at", UtcDateTime, nullable=False),
)

streams = Table(
    "cdc_streams",
    metadata,
    Column("stream_id", String(128), primary_key=True),
    Column("source_kind", String(64), nullable=False),
    Column("config_fingerprint", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
)

partitions = Table(
    "cdc_partitions",
    metadata,
    Column("stream_id", String(128), nullable=False),
    Column("partition_id", Text, nullable=False),
    Column("parent_ids", Text, nullable=False),  # JSON list
    Column("reported_by", Text, nullable=False),  # JSON list of parents that reported it
    Column("resume_position", Text),
    Column("start_ts", UtcDateTime, nullable=False),
    Column("watermark", UtcDateTime, nullable=False),
    Column("watermark_since", UtcDateTime, nullable=False),
    Column("state", String(16), nullable=False),
    Column("created_window", UtcDateTime),
    Column("finished_window", UtcDateTime),
    Column("updated_at", UtcDateTime, nullable=False),
    PrimaryKeyConstraint("stream_id", "partition_id"),
    ForeignKeyConstraint(["stream_id"], ["cdc_streams.stream_id"]),
)

windows = Table(
    "cdc_windows",
    metadata,
    Column("stream_id", String(128), nullable=False),
    Column("window_start", UtcDateTime, nullable=False),
    Column("window_end", UtcDateTime, nullable=False),
    Column("state", String(16), nullable=False),
    Column("low_watermark", UtcDateTime),
    Column("counts", Text, nullable=False),  # JSON object
    Column("changelog_snapshot_id", BigInteger),
    Column("target_snapshot_ids", Text),  # JSON object: target table -> snapshot id
    Column("attempt", Integer, nullable=False),
    Column("lease_owner", Text),
    Column("lease_expires_at", UtcDateTime),
    Column("failure_reason", Text),
    Column("completeness_note", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    PrimaryKeyConstraint("stream_id", "window_start"),
    ForeignKeyConstraint(["stream_id"], ["cdc_streams.stream_id"]),
)

window_partitions = Table(
    "cdc_window_partitions",
    metadata,
    Column("stream_id", String(128), nullable=False),
    Column("window_start", UtcDateTime, nullable=False),
    Column("partition_id", Text, nullable=False),
    Column("parent_ids", Text, nullable=False),  # JSON list: the plan stands on its own
    Column("start_ts", UtcDateTime, nullable=False),
    Column("resume_position", Text),
    Column("origin", String(8), nullable=False),  # 'planned' | 'child'
    Column("finished", Boolean),
    Column("watermark", UtcDateTime),
    Column("records", BigInteger),
    PrimaryKeyConstraint("stream_id", "window_start", "partition_id"),
    ForeignKeyConstraint(
        ["stream_id", "window_start"], ["cdc_windows.stream_id", "cdc_windows.window_start"]
    ),
)

window_steps = Table(
    "cdc_window_steps",
    metadata,
    Column("stream_id", String(128), nullable=False),
    Column("window_start", UtcDateTime, nullable=False),
    Column("step", String(16), nullable=False),  # plan | extract | commit | apply | gate
    Column("started_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime, nullable=False),
    Column("details", Text, nullable=False),  # JSON object: what the step reported
    PrimaryKeyConstraint("stream_id", "window_start", "step"),
    ForeignKeyConstraint(
        ["stream_id", "window_start"], ["cdc_windows.stream_id", "cdc_windows.window_start"]
    ),
)

covered_intervals = Table(
    "cdc_covered_intervals",
    metadata,
    Column("stream_id", String(128), nullable=False),
    Column("interval_start", UtcDateTime, nullable=False),
    Column("interval_end", UtcDateTime, nullable=False),
    Column("window_start", UtcDateTime, nullable=False),
    Column("recorded_at", UtcDateTime, nullable=False),
    PrimaryKeyConstraint("stream_id", "interval_start"),
    ForeignKeyConstraint(
        ["stream_id", "window_start"], ["cdc_windows.stream_id", "cdc_windows.window_start"]
    ),
)
