"""Run the Bigtable change stream emulator until killed, or print the truth and exit.

    python -m airflow_cdc_emulators.bigtable --port 8086 --seed 7 --hours 2
    python -m airflow_cdc_emulators.bigtable --hours 2 --start 2025-01-06T08:00:00Z \\
        --truth-at 2025-01-06T09:00:00Z

Serving, the first line printed is ``BIGTABLE_EMULATOR_HOST=<host>:<port>``, the second the
table name, then the history's summary as one JSON line. ``--truth-at`` prints the table's
content at that instant (commits strictly before it) as JSON lines, one per row:
``{"row": ..., "cells": [{"family", "qualifier", "timestamp_micros", "value_b64"}]}`` with
row keys and qualifiers as UTF-8 text (``\\xNN`` for other bytes) and values base64.
"""

from __future__ import annotations

import argparse
import base64
import json
import signal
import sys
from datetime import timedelta

from airflow_cdc_emulators.common import EmulatorError, parse_ts

from .history import BigtableHistory, HistoryConfig
from .partitions import show_key
from .server import BigtableEmulator, EmulatorStartError


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    defaults = HistoryConfig(start=parse_ts("2025-01-01T00:00:00Z"))
    parser = argparse.ArgumentParser(
        prog="python -m airflow_cdc_emulators.bigtable",
        description="Serve a seeded Bigtable change stream history over the real Bigtable API.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8086, help="port (default 8086; 0 = any)")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument(
        "--start",
        type=parse_ts,
        default=None,
        help="history start, ISO-8601 with offset (default: the UTC hour at or before "
        "now - hours; with --hours 0, now - retention)",
    )
    parser.add_argument("--hours", type=float, default=2.0, help="0 = an empty, live table")
    parser.add_argument(
        "--commits-per-second", type=float, default=defaults.commits_per_second
    )
    parser.add_argument("--table", default=defaults.table_id, help="table id served")
    parser.add_argument(
        "--retention-hours", type=float, default=defaults.retention.total_seconds() / 3600
    )
    parser.add_argument(
        "--now", type=parse_ts, default=None, help="set the emulator's clock (default: real time)"
    )
    parser.add_argument(
        "--truth-at", type=parse_ts, default=None, help="print the true state then and exit"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    try:
        history = BigtableHistory.generate(
            HistoryConfig(
                seed=args.seed,
                start=args.start,
                duration=timedelta(hours=args.hours),
                commits_per_second=args.commits_per_second,
                table_id=args.table,
                retention=timedelta(hours=args.retention_hours),
            )
        )
    except EmulatorError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.truth_at is not None:
        for row, families in history.true_state(args.truth_at).items():
            cells = [
                {
                    "family": family,
                    "qualifier": show_key(qualifier),
                    "timestamp_micros": stamp,
                    "value_b64": base64.b64encode(value).decode(),
                }
                for family, columns in families.items()
                for qualifier, versions in sorted(columns.items())
                for stamp, value in sorted(versions.items(), reverse=True)
            ]
            print(json.dumps({"row": show_key(row), "cells": cells}))
        return 0
    emulator = BigtableEmulator(history, host=args.host, port=args.port, now=args.now)
    try:
        emulator.start()
    except EmulatorStartError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"BIGTABLE_EMULATOR_HOST={emulator.emulator_host}", flush=True)
    print(history.table_name, flush=True)
    print(json.dumps(history.summary()), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: emulator.stop())
    try:
        emulator.wait()
    except KeyboardInterrupt:
        emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
