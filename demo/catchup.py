"""``make demo-catchup``: a live stream stopped for a stretch of its schedule, then caught up.

The live Bigtable harness of ``make live-bigtable`` (:mod:`demo.live_bigtable`: the emulator on
wall time, a writer calling the real GAPIC client a few times a second, Airflow's services
running ``dags/bigtable_change_stream_to_iceberg.py`` on a 1-minute schedule, catchup on,
deferrable waits) with ``max_catchup`` of 10 minutes and up to 16 active runs:

1. the stream runs live until its first window is COMPLETE;
2. the DAG is paused (``airflow dags pause``) for ``--stop-minutes`` while the writer goes on:
   changes pile up in the source and no run starts;
3. the DAG is unpaused: the scheduler creates a run for every missed interval, the first of
   them plans ONE catch-up window over every interval that is ready, and the others record
   their interval as covered and open their gates with it;
4. once every interval up to the resume time is complete, the writer stops and the targets
   are compared with the emulator's true state at the newest complete window's end.

Checked: every interval has exactly one record (a window starting at it, or a covered
interval naming its window), every DAG run succeeded, each interval emitted exactly one Asset
event per table with its partition key. ``backlog_s``: how long the stream was stopped;
``drain_s``: from the unpause to the last caught-up run's end (as Airflow recorded it).
Last line: ``demo-catchup: OK intervals=<n> windows=<m> backlog_s=<s> drain_s=<s>
mismatches=0`` (``FAILED`` otherwise, exit code 1). Everything lives under
``.demo-catchup/``. About 12 minutes with the default 5-minute stop.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

from demo.live import LiveAirflow, LiveSchedule, gate_bound_seconds, recreate
from demo.live_bigtable import (
    DAG_FILE,
    EVIDENCE_DELAY_SECONDS,
    LiveSettings,
    LiveWriter,
    dag_env,
    stream_id_of,
)

ROOT = Path(__file__).resolve().parents[1]
DAG_ID = Path(DAG_FILE).stem
MINUTE = timedelta(minutes=1)


def db_time(text: str | None) -> datetime | None:
    if text is None:
        return None
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def interval_records(store, stream_id: str, first: datetime, until: datetime) -> dict:
    """For each interval start in ``[first, until)``: how many records it has (a window
    starting at it, or a covered interval)."""
    counts: Counter = Counter()
    for window in store.list_windows(stream_id):
        counts[window.start] += 1
    for covered in store.covered_intervals(stream_id):
        counts[covered.start] += 1
    return {first + MINUTE * n: counts.get(first + MINUTE * n, 0)
            for n in range(int((until - first) / MINUTE))}


def run(base: Path, stop_minutes: int, log=print) -> dict:
    from demo.bigtable import compare
    from airflow_cdc.model import WindowState
    from airflow_cdc_emulators.bigtable import BigtableEmulator, BigtableHistory

    recreate(base)
    settings = LiveSettings(windows=1)
    created = datetime.now(timezone.utc).replace(microsecond=0)
    history = BigtableHistory.empty(start=created)
    bound = gate_bound_seconds(settings.window_seconds, EVIDENCE_DELAY_SECONDS)
    schedule = LiveSchedule.starting_after(created, settings.window_seconds, 1, bound)
    first = schedule.first
    stream_id = stream_id_of(history)
    outcome: dict = {"ok": False, "mismatches": None}
    with BigtableEmulator(history) as emulator:
        airflow = LiveAirflow("demo-catchup", base, DAG_FILE, schedule, {
            **dag_env(emulator, history, 1),
            "CDC_MAX_ACTIVE_RUNS": "16",
            "CDC_MAX_CATCHUP_MINUTES": "10",
            "CDC_ASSET_PARTITIONS": "true",
        }, log=log)
        writer = LiveWriter(emulator.client(), emulator.table_name, settings).start(first)
        try:
            with airflow:
                services = airflow.services
                log(f"demo-catchup: windows of 60s from {first:%H:%M:%S}; the DAG stops after "
                    f"its first window for {stop_minutes} minutes")
                airflow.wait_for("the first window to complete", lambda: airflow.store.list_windows(
                    stream_id, states=[WindowState.COMPLETE]), 4 * bound)
                services.airflow("dags", "pause", DAG_ID)
                stopped = datetime.now(timezone.utc)
                log(f"demo-catchup: paused at {stopped:%H:%M:%S}; the writer goes on")
                time.sleep(stop_minutes * 60)
                services.airflow("dags", "unpause", DAG_ID)
                resumed = datetime.now(timezone.utc)
                # Caught up: every interval that ended by the resume time has a run that succeeded.
                caught_up = resumed.replace(second=0, microsecond=0)
                wanted = int((caught_up - first) / MINUTE)
                log(f"demo-catchup: resumed at {resumed:%H:%M:%S}; {wanted} intervals from "
                    f"{first:%H:%M:%S} to {caught_up:%H:%M:%S} must complete")

                def drained():
                    failed = airflow.failed_runs()
                    if failed:
                        raise RuntimeError(f"DAG runs failed: {failed}\n"
                                           f"{airflow.diagnostics(stream_id)}")
                    rows = services.query(
                        "select data_interval_end, end_date from dag_run where dag_id = ? "
                        "and state = 'success'", DAG_ID)
                    done = [(db_time(end), db_time(at)) for end, at in rows
                            if db_time(end) <= caught_up]
                    return done if len(done) >= wanted else None
                done = airflow.wait_for("the backlog to drain", drained, 30 * 60)
            records = interval_records(airflow.store, stream_id, first, caught_up)
            windows = [w for w in airflow.store.list_windows(stream_id) if w.start < caught_up]
            events = services.query(
                "select a.name, e.partition_key, count(*) from asset_event e "
                "join asset a on a.id = e.asset_id where e.source_dag_id = ? "
                "group by a.name, e.partition_key", DAG_ID)
        finally:
            writer.stop()
        keys = {f"{start:%Y-%m-%dT%H:%M:%S}" for start in records}
        per_asset: dict = {}
        for name, key, count in events:
            if key in keys:
                per_asset.setdefault(name, {})[key] = count
        problems = [f"interval {start:%H:%M:%S} has {count} records"
                    for start, count in records.items() if count != 1]
        problems += [f"{name}: intervals with events {sorted(found)[:3]}... not once each"
                     for name, found in per_asset.items()
                     if set(found) != keys or set(found.values()) != {1}]
        if not per_asset:
            problems.append("no Asset event carries an interval's partition key")
        done_end = max(w.end for w in windows if w.state is WindowState.COMPLETE)
        comparison = compare(base, emulator, done_end, log=log, prefix="demo-catchup")
        drain_s = (max(at for _, at in done) - resumed).total_seconds()
        outcome = {
            "ok": not problems and not writer.errors and comparison.get("mismatches") == 0,
            "intervals": len(records), "windows": len(windows),
            "backlog_s": (resumed - stopped).total_seconds(), "drain_s": drain_s,
            "mismatches": comparison.get("mismatches"), "problems": problems,
        }
        for problem in problems[:10]:
            log(f"demo-catchup: {problem}")
        if writer.errors:
            log(f"demo-catchup: the writer's calls were refused: {writer.errors[:3]}")
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=str(ROOT / ".demo-catchup"), help="working folder")
    parser.add_argument("--stop-minutes", type=int, default=5)
    args = parser.parse_args(argv)
    result = run(Path(args.base).resolve(), args.stop_minutes,
                 log=lambda m: print(m, flush=True))
    status = "OK" if result["ok"] else "FAILED"
    print(f"demo-catchup: {status} intervals={result.get('intervals')} "
          f"windows={result.get('windows')} backlog_s={result.get('backlog_s', 0):.0f} "
          f"drain_s={result.get('drain_s', 0):.0f} mismatches={result.get('mismatches')}")
    return 0 if status == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
