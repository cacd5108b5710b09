"""Run the Dataproc emulator until killed.

    python -m airflow_cdc_emulators.dataproc --port 8087
    python -m airflow_cdc_emulators.dataproc --port 0 --master spark://127.0.0.1:7077 \\
        --cluster cdc-cluster --cluster reporting --work-dir /tmp/dataproc --gcs-dir /tmp/gcs

The first line printed is ``DATAPROC_EMULATOR_HOST=<host>:<port>``, the second the work folder
(``jobs/<job_id>/driveroutput``, ``batches/<batch_id>/driveroutput``). SIGTERM or Ctrl-C kills
the drivers still running and stops the server.
"""

from __future__ import annotations

import argparse
import signal
import sys

from .server import (
    DEFAULT_CLUSTERS,
    DEFAULT_KILL_GRACE_SECONDS,
    DEFAULT_MASTER,
    DataprocEmulator,
    EmulatorStartError,
)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_cdc_emulators.dataproc",
        description="Serve the Dataproc JobController and BatchController APIs, running PySpark "
        "jobs and batches with spark-submit on a local Spark master.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8087, help="port (default 8087; 0 = any)")
    parser.add_argument(
        "--master", default=DEFAULT_MASTER, help=f"Spark master (default {DEFAULT_MASTER})"
    )
    parser.add_argument(
        "--cluster",
        action="append",
        dest="clusters",
        metavar="NAME",
        help=f"a cluster name jobs may use; repeat for more (default {DEFAULT_CLUSTERS[0]})",
    )
    parser.add_argument("--work-dir", default=None, help="driver outputs (default: a temp dir)")
    parser.add_argument(
        "--gcs-dir", default=None, help="local folder standing in for gs:// (DIR/bucket/path)"
    )
    parser.add_argument("--spark-submit", default=None, help="spark-submit to use")
    parser.add_argument(
        "--kill-grace-seconds",
        type=float,
        default=DEFAULT_KILL_GRACE_SECONDS,
        help="SIGTERM to SIGKILL delay when cancelling",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    try:
        emulator = DataprocEmulator(
            host=args.host,
            port=args.port,
            master=args.master,
            clusters=tuple(args.clusters or DEFAULT_CLUSTERS),
            work_dir=args.work_dir,
            gcs_dir=args.gcs_dir,
            spark_submit=args.spark_submit,
            kill_grace_seconds=args.kill_grace_seconds,
        )
        emulator.start()
    except (EmulatorStartError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"DATAPROC_EMULATOR_HOST={emulator.emulator_host}", flush=True)
    print(emulator.work_dir, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: emulator.stop())
    try:
        emulator.wait()
    except KeyboardInterrupt:
        emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
