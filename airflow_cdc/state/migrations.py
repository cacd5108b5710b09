"""The versioned schema of the state store: an ordered list of migrations and ``migrate``.

Each migration's DDL is frozen here as it was released: later changes are new migrations,
never edits, so a database made by any older airflow-cdc upgrades by the same steps as a new
one. ``cdc_schema_version`` holds one row per applied migration.

Each step is one transaction (SQLite and PostgreSQL both have transactional DDL), so a crash
leaves the database at a whole version. Concurrent migrators serialize: on SQLite through
``BEGIN IMMEDIATE`` (see :mod:`airflow_cdc.state.engine`), on PostgreSQL through a transaction
advisory lock; each re-reads the version after taking the lock and skips what is done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    func,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import Connection, Engine

from airflow_cdc.state.engine import write_transaction
from airflow_cdc.state.errors import SchemaVersionError
from airflow_cdc.state.tables import UtcDateTime, schema_version

# Any constant works; it only has to be the same for every airflow-cdc process.
_PG_MIGRATION_LOCK = 0x6364635F7374617465 & 0x7FFFFFFFFFFFFFFF  # "cdc_state"


def _v1_tables(conn: Connection) -> None:
    md = MetaData()
    _v1_schema_version(md)
    _v1_streams(md)
    _v1_partitions(md)
    _v1_windows(md)
    _v1_window_partitions(md)
    md.create_all(conn, checkfirst=False)


def _v1_schema_version(md: MetaData) -> None:
    """``cdc_schema_version``: one row per applied migration."""
    Table(
        "cdc_schema_version",
        md,
        Column("version", Integer, primary_key=True, autoincrement=False),
        Column("description", Text, nullable=False),
        Column("applied_at", UtcDateTime, nullable=False),
    )


def _v1_streams(md: MetaData) -> None:
    """``cdc_streams``: one row per stream, with its source kind and config fingerprint."""
    Table(
        "cdc_streams",
        md,
        Column("stream_id", String(128), primary_key=True),
        Column("source_kind", String(64), nullable=False),
        Column("config_fingerprint", Text, nullable=False),
        Column("created_at", UtcDateTime, nullable=False),
    )


def _v1_partitions(md: MetaData) -> None:
    """``cdc_partitions``: each partition of a stream, its lineage, watermark and state."""
    Table(
        "cdc_partitions",
        md,
        Column("stream_id", String(128), nullable=False),
        Column("partition_id", Text, nullable=False),
        Column("parent_ids", Text, nullable=False),
        Column("reported_by", Text, nullable=False),
        Column("resume_position", Text),
        Column("start_ts", UtcDateTime, nullable=False),
        Column("watermark", UtcDateTime, nullable=False),
        Column("watermark_since", UtcDateTime, nullable=False),
        Column("state", String(16), nullable=False),
        Column("created_window", UtcDateTime),
        Column("finished_window", UtcDateTime),
        Column("updated_at", UtcDateTime, nullable=False),
        PrimaryKeyConstraint("stream_id", "partition_id", name="pk_cdc_partitions"),
        ForeignKeyConstraint(
            ["stream_id"], ["cdc_streams.stream_id"], name="fk_cdc_partitions_stream"
        ),
        CheckConstraint(
            "state IN ('CREATED', 'READY', 'RUNNING', 'FINISHED')", name="ck_cdc_partitions_state"
        ),
    )


def _v1_windows(md: MetaData) -> None:
    """``cdc_windows``: each window of a stream, its state, lease, counts and snapshots."""
    Table(
        "cdc_windows",
        md,
        Column("stream_id", String(128), nullable=False),
        Column("window_start", UtcDateTime, nullable=False),
        Column("window_end", UtcDateTime, nullable=False),
        Column("state", String(16), nullable=False),
        Column("low_watermark", UtcDateTime),
        Column("counts", Text, nullable=False),
        Column("changelog_snapshot_id", BigInteger),
        Column("target_snapshot_ids", Text),
        Column("attempt", Integer, nullable=False),
        Column("lease_owner", Text),
        Column("lease_expires_at", UtcDateTime),
        Column("failure_reason", Text),
        Column("completeness_note", Text),
        Column("created_at", UtcDateTime, nullable=False),
        Column("updated_at", UtcDateTime, nullable=False),
        PrimaryKeyConstraint("stream_id", "window_start", name="pk_cdc_windows"),
        ForeignKeyConstraint(
            ["stream_id"], ["cdc_streams.stream_id"], name="fk_cdc_windows_stream"
        ),
        CheckConstraint(
            "state IN ('PLANNED', 'EXTRACTED', 'COMMITTED', 'APPLIED', 'COMPLETE', 'FAILED')",
            name="ck_cdc_windows_state",
        ),
        CheckConstraint("window_start < window_end", name="ck_cdc_windows_width"),
    )


def _v1_window_partitions(md: MetaData) -> None:
    """``cdc_window_partitions``: the partitions a window reads, and what each read."""
    Table(
        "cdc_window_partitions",
        md,
        Column("stream_id", String(128), nullable=False),
        Column("window_start", UtcDateTime, nullable=False),
        Column("partition_id", Text, nullable=False),
        Column("parent_ids", Text, nullable=False),
        Column("start_ts", UtcDateTime, nullable=False),
        Column("resume_position", Text),
        Column("origin", String(8), nullable=False),
        Column("finished", Boolean),
        Column("watermark", UtcDateTime),
        Column("records", BigInteger),
        PrimaryKeyConstraint(
            "stream_id", "window_start", "partition_id", name="pk_cdc_window_partitions"
        ),
        ForeignKeyConstraint(
            ["stream_id", "window_start"],
            ["cdc_windows.stream_id", "cdc_windows.window_start"],
            name="fk_cdc_window_partitions_window",
        ),
        CheckConstraint("origin IN ('planned', 'child')", name="ck_cdc_window_partitions_origin"),
    )


def _v2_indexes(conn: Connection) -> None:
    # The gate and every plan/commit ask for a stream's live partitions (by state), the
    # purge for its FINISHED ones by age; the gate asks for a stream's windows by state.
    # Without these both scan the whole table, which grows with every partition split.
    md = MetaData()
    part = Table(
        "cdc_partitions",
        md,
        Column("stream_id", String(128)),
        Column("state", String(16)),
        Column("updated_at", UtcDateTime),
    )
    win = Table("cdc_windows", md, Column("stream_id", String(128)), Column("state", String(16)))
    Index(
        "ix_cdc_partitions_stream_state", part.c.stream_id, part.c.state, part.c.updated_at
    ).create(conn)
    Index("ix_cdc_windows_stream_state", win.c.stream_id, win.c.state).create(conn)


def _v3_window_steps(conn: Connection) -> None:
    # When each step of a window ran, for the CDC view and `airflow-cdc lag-chart`; observed
    # only, never read by a transition. The view lists a stream's windows of some states
    # newest first (open ones, the last complete one): without the index on
    # (stream, state, start) that walks every window of the stream.
    md = MetaData()
    win = Table(
        "cdc_windows",
        md,
        Column("stream_id", String(128)),
        Column("window_start", UtcDateTime),
        Column("state", String(16)),
    )
    steps = Table(
        "cdc_window_steps",
        md,
        Column("stream_id", String(128), nullable=False),
        Column("window_start", UtcDateTime, nullable=False),
        Column("step", String(16), nullable=False),
        Column("started_at", UtcDateTime, nullable=False),
        Column("finished_at", UtcDateTime, nullable=False),
        Column("details", Text, nullable=False),
        PrimaryKeyConstraint("stream_id", "window_start", "step", name="pk_cdc_window_steps"),
        ForeignKeyConstraint(
            ["stream_id", "window_start"],
            ["cdc_windows.stream_id", "cdc_windows.window_start"],
            name="fk_cdc_window_steps_window",
        ),
        CheckConstraint(
            "step IN ('plan', 'extract', 'commit', 'apply', 'gate')",
            name="ck_cdc_window_steps_step",
        ),
    )
    steps.create(conn)
    Index(
        "ix_cdc_windows_stream_state_start", win.c.stream_id, win.c.state, win.c.window_start
    ).create(conn)


def _v4_covered_intervals(conn: Connection) -> None:
    # A catch-up window reads the intervals of several DAG runs at once; each of the other
    # runs records here that its interval was read by that window, so every interval keeps a
    # record (its gate and Asset event follow the covering window). A window is deleted only
    # with its stream, so the rows reference it.
    md = MetaData()
    Table(
        "cdc_windows",
        md,
        Column("stream_id", String(128)),
        Column("window_start", UtcDateTime),
        PrimaryKeyConstraint("stream_id", "window_start"),
    )
    Table(
        "cdc_covered_intervals",
        md,
        Column("stream_id", String(128), nullable=False),
        Column("interval_start", UtcDateTime, nullable=False),
        Column("interval_end", UtcDateTime, nullable=False),
        Column("window_start", UtcDateTime, nullable=False),
        Column("recorded_at", UtcDateTime, nullable=False),
        PrimaryKeyConstraint("stream_id", "interval_start", name="pk_cdc_covered_intervals"),
        ForeignKeyConstraint(
            ["stream_id", "window_start"],
            ["cdc_windows.stream_id", "cdc_windows.window_start"],
            name="fk_cdc_covered_intervals_window",
        ),
        CheckConstraint("interval_start < interval_end", name="ck_cdc_covered_intervals_width"),
        CheckConstraint("window_start < interval_start", name="ck_cdc_covered_intervals_inside"),
    ).create(conn)
    Index(
        "ix_cdc_covered_intervals_window",
        md.tables["cdc_covered_intervals"].c.stream_id,
        md.tables["cdc_covered_intervals"].c.window_start,
    ).create(conn)


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    upgrade: Callable[[Connection], None]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "streams, partitions, windows and window_partitions tables", _v1_tables),
    Migration(2, "indexes for the live-partition, purge and gate queries", _v2_indexes),
    Migration(3, "window step timings; windows by state, newest first", _v3_window_steps),
    Migration(4, "intervals a catch-up window covered", _v4_covered_intervals),
)
HEAD_VERSION = MIGRATIONS[-1].version


def current_version(conn: Connection) -> int:
    """The schema version of the database ``conn`` is on; 0 for a database without the tables."""
    if not inspect(conn).has_table(schema_version.name):
        return 0
    return conn.execute(select(func.max(schema_version.c.version))).scalar() or 0


def newer_schema_error(version: int) -> SchemaVersionError:
    return SchemaVersionError(
        f"state store schema version {version} is newer than this airflow-cdc "
        f"(knows {HEAD_VERSION}): upgrade airflow-cdc"
    )


def migrate(engine: Engine, now: Callable[[], datetime], target: int | None = None) -> int:
    """Bring the database to ``target`` (default: the head version); return its version.

    Idempotent; never downgrades; refuses a database newer than this code.
    """
    if target is None:
        target = HEAD_VERSION
    if not isinstance(target, int) or not 0 <= target <= HEAD_VERSION:
        raise SchemaVersionError(
            f"schema version {target!r} does not exist: this airflow-cdc knows versions "
            f"1 to {HEAD_VERSION}"
        )
    with engine.connect() as conn:
        version = current_version(conn)
    if version > HEAD_VERSION:
        raise newer_schema_error(version)
    for step in MIGRATIONS:
        if step.version > target:
            break
        if step.version <= version:
            continue
        with write_transaction(engine) as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK}
                )
            version = current_version(conn)  # another process may have migrated meanwhile
            if version > HEAD_VERSION:
                raise newer_schema_error(version)
            if version >= step.version:
                continue
            step.upgrade(conn)
            conn.execute(
                insert(schema_version).values(
                    version=step.version, description=step.description, applied_at=now()
                )
            )
            version = step.version
    return version
