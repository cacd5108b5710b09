"""Run the Spanner change stream emulator until killed.

    python -m airflow_cdc.emulators.spanner --port 9010 --seed 7 --hours 2

The first line printed is ``SPANNER_EMULATOR_HOST=<host>:<port>``; the history's summary
(stream name, partitions, splits, merges, change counts) follows as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from datetime import timedelta

from airflow_cdc.model import CdcError, parse_ts

from .history import DEFAULT_START, DEFAULT_STREAM, HistoryConfig, History
from .server import EmulatorStartError, SpannerChangeStreamEmulator


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    defaults = HistoryConfig()
    parser = argparse.ArgumentParser(
        prog="python -m airflow_cdc.emulators.spanner",
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
        "--start", type=parse_ts, default=DEFAULT_START, help="history start, ISO-8601 with offset"
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
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    try:
        history = _history(args)
    except CdcError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    emulator = SpannerChangeStreamEmulator(
        history,
        host=args.host,
        port=args.port,
        now=args.now,
        postgresql_databases=args.postgresql_database,
    )
    try:
        emulator.start()
    except EmulatorStartError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"SPANNER_EMULATOR_HOST={emulator.emulator_host}", flush=True)
    print(json.dumps(history.summary()), flush=True)
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


if __name__ == "__main__":
    sys.exit(main())
