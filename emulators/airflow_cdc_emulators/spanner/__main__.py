"""Run the Spanner emulator until killed: a change stream history, or commit timestamp tables.

    python -m airflow_cdc_emulators.spanner --port 9010 --seed 7 --hours 2
    python -m airflow_cdc_emulators.spanner --commit-ts-tables --version-retention 3h [--wall-clock]
    python -m airflow_cdc_emulators.spanner --ddl schema.sql [--ddl-dialect postgresql]

The first line printed is ``SPANNER_EMULATOR_HOST=<host>:<port>``; a summary follows as one
JSON line: the change stream history's (stream name, partitions, splits, merges, change
counts), or with ``--commit-ts-tables`` the seeded tables' (commits, changes by table, hard
and soft deletes, whole-minute commits, shared commit timestamps). ``--with-change-stream``
serves both. With ``--wall-clock`` the clock follows real time and the seeded tables' history
ends at start-up (unless ``--start`` says otherwise). ``--ddl FILE`` serves the file's tables
(statements separated by ``;``, applied as ``UpdateDatabaseDdl`` applies them), empty and on a
clock that follows real time unless ``--now`` is given; with ``--commit-ts-tables`` the file is
applied on top of the seeded tables. A statement the emulator cannot apply stops it with the
statement named.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow_cdc_emulators.common import EmulatorError, parse_ts

from .history import DEFAULT_START, DEFAULT_STREAM, History, HistoryConfig
from .server import EmulatorStartError, SpannerEmulator
from .schema import GOOGLESQL, POSTGRESQL
from .tables import (
    CommitTimestampHistoryConfig,
    DatabaseSchema,
    SpannerStatusError,
    VersionedDatabase,
    commit_timestamp_tables,
)
from .tables.ddl import split_statements
from .tables.definition import DEFAULT_VERSION_RETENTION_PERIOD


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    defaults = HistoryConfig()
    parser = argparse.ArgumentParser(
        prog="python -m airflow_cdc_emulators.spanner",
        description="Serve a seeded Spanner change stream history over the real Spanner gRPC API.",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=9010, help="port (default 9010; 0 = any free port)"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument(
        "--start",
        type=parse_ts,
        default=None,
        help=f"history start, ISO-8601 with offset (default {DEFAULT_START.isoformat()}; with "
        f"--wall-clock, --hours before start-up)",
    )
    parser.add_argument("--hours", type=float, default=defaults.duration.total_seconds() / 3600)
    parser.add_argument("--changes-per-second", type=float, default=defaults.changes_per_second)
    parser.add_argument("--splits", type=int, default=defaults.splits)
    parser.add_argument("--merges", type=int, default=defaults.merges)
    parser.add_argument("--three-way-merges", type=int, default=defaults.three_way_merges)
    parser.add_argument("--initial-partitions", type=int, default=defaults.initial_partitions)
    parser.add_argument(
        "--quiet-periods",
        type=int,
        default=defaults.quiet_periods,
        help="idle periods (no commits)",
    )
    parser.add_argument(
        "--stream", default=DEFAULT_STREAM, help="change stream name (READ_<stream>)"
    )
    parser.add_argument(
        "--retention-hours", type=float, default=defaults.retention.total_seconds() / 3600
    )
    parser.add_argument(
        "--now", type=parse_ts, default=None, help="the emulator's clock (default: end of history)"
    )
    parser.add_argument(
        "--postgresql-database",
        action="append",
        default=[],
        help="database id that GetDatabase reports as PostgreSQL (repeatable); every database "
        "answers both dialects' read functions",
    )
    tables = parser.add_argument_group("commit timestamp tables")
    tables.add_argument(
        "--commit-ts-tables",
        action="store_true",
        help="serve the seeded tables with commit timestamp columns (Orders, Documents, "
        "DocumentHistory, Customers, Events) instead of the change stream",
    )
    tables.add_argument(
        "--ddl",
        metavar="FILE",
        help="serve the tables of this DDL file (CREATE TABLE / CREATE INDEX ..., separated "
        "by ;), empty, created at --start (default: start-up); the clock follows real time "
        "unless --now is given. With --commit-ts-tables: applied on top of the seeded tables",
    )
    tables.add_argument(
        "--ddl-dialect",
        choices=("googlesql", "postgresql"),
        default="googlesql",
        help="the dialect the --ddl file is written in (default googlesql)",
    )
    tables.add_argument(
        "--with-change-stream",
        action="store_true",
        help="with --commit-ts-tables: serve the change stream history too",
    )
    tables.add_argument(
        "--version-retention",
        default=DEFAULT_VERSION_RETENTION_PERIOD,
        help="the tables' version_retention_period, e.g. 1h (default, as Spanner) or 3h",
    )
    tables.add_argument(
        "--transactions-per-minute",
        type=float,
        default=CommitTimestampHistoryConfig().transactions_per_minute,
    )
    tables.add_argument(
        "--wall-clock",
        action="store_true",
        help="the clock follows real time (commits through the client get real-time "
        "timestamps); the seeded history ends at start-up",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    # Only the file's tables: a new database, created now, on real time (unless --now).
    own_schema = args.ddl is not None and not args.commit_ts_tables and not args.with_change_stream
    if args.start is None:
        if own_schema:
            args.start = datetime.now(timezone.utc).replace(microsecond=0)
        else:
            args.start = _wall_clock_start(args.hours) if args.wall_clock else DEFAULT_START
    serves_tables = args.commit_ts_tables or args.ddl is not None
    try:
        history = _history(args) if not serves_tables or args.with_change_stream else None
        tables = _tables(args) if args.commit_ts_tables else None
        if args.ddl is not None:
            tables = _ddl_tables(args, tables)
        emulator = SpannerEmulator(
            history,
            tables=tables,
            host=args.host,
            port=args.port,
            now=args.now,
            wall_clock=args.wall_clock or (own_schema and args.now is None),
            postgresql_databases=args.postgresql_database,
        )
    except (EmulatorError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        emulator.start()
    except EmulatorStartError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"SPANNER_EMULATOR_HOST={emulator.emulator_host}", flush=True)
    print(json.dumps(tables.summary() if tables else history.summary()), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: emulator.stop())
    try:
        emulator.wait()
    except KeyboardInterrupt:
        emulator.stop()
    return 0


def _history(args: argparse.Namespace) -> History:
    config = HistoryConfig(
        seed=args.seed,
        start=args.start,
        duration=timedelta(hours=args.hours),
        changes_per_second=args.changes_per_second,
        splits=args.splits,
        merges=args.merges,
        three_way_merges=args.three_way_merges,
        initial_partitions=args.initial_partitions,
        stream_name=args.stream,
        retention=timedelta(hours=args.retention_hours),
        quiet_periods=args.quiet_periods,
    )
    return History(config)


def _tables(args: argparse.Namespace) -> VersionedDatabase:
    config = CommitTimestampHistoryConfig(
        seed=args.seed,
        start=args.start,
        duration=timedelta(hours=args.hours),
        transactions_per_minute=args.transactions_per_minute,
        version_retention_period=args.version_retention,
        wall_clock=args.wall_clock,
    )
    return commit_timestamp_tables(config)


def _ddl_tables(args: argparse.Namespace, tables: VersionedDatabase | None) -> VersionedDatabase:
    """The --ddl file applied to ``tables`` (None: a new, empty database created at --start)."""
    path = Path(args.ddl)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise OSError(f"--ddl {args.ddl}: cannot read the file ({error.strerror}): give the path "
                      f"of a file of DDL statements separated by ;") from error
    statements = split_statements(text)
    if not statements:
        raise ValueError(f"--ddl {args.ddl}: the file holds no DDL statement: write CREATE "
                         f"TABLE ... statements separated by ;")
    if tables is None:
        tables = VersionedDatabase(
            DatabaseSchema(()), created_at=args.start,
            version_retention_period=args.version_retention,
        )
    dialect = POSTGRESQL if args.ddl_dialect == "postgresql" else GOOGLESQL
    try:
        tables.apply_ddl(statements, dialect)
    except SpannerStatusError as error:
        raise ValueError(f"--ddl {args.ddl}: {error.code}: {error.message}") from error
    return tables


def _wall_clock_start(hours: float) -> datetime:
    """``hours`` before now, on a whole minute: a wall-clock history that ends by now."""
    start = datetime.now(timezone.utc) - timedelta(hours=hours)
    return start.replace(second=0, microsecond=0)


if __name__ == "__main__":
    sys.exit(main())
