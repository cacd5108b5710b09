"""Benchmark of the CDC view's API on a big stream against a small one, in the same run.

    .venv/bin/python bench/ui.py [--windows 100000] [--partitions 10000] [--repeats 7]

Builds a SQLite state store (the embedded default) with two streams:

* ``big``: ``--windows`` 5-minute windows with a recorded timing for each of their five steps,
  the newest APPLIED with its gate waiting on 3 lagging partitions, and one APPLIED window half
  way back whose gate never opened (so "open windows first" must find it), both planned to
  read every live partition (the view asks the gate why each is open); ``--partitions``
  partitions, 60% FINISHED, the others live;
* ``small`` (the baseline): 10 windows and 10 partitions, the same shape.

Rows are inserted in bulk into the migrated tables (the protocol's transitions would take hours
for 100,000 windows). Then Airflow's api-server is started with the CDC plugin on that store
and each endpoint is requested over HTTP with a viewer's token, as the page requests it: one
warm-up, then ``--repeats`` timed requests; the median is printed. For comparison, in the same
process: reading the big stream's windows and partitions whole (what ``airflow-cdc status``
did before the bounded reads), and the big stream's windows page with and without the gate's
reason for its newest open window (it reads that window's plan of every live partition).

Prints one line per endpoint, ``bench ui: endpoint=<path> ms=<big> baseline_ms=<small>
ratio=<big/small>``, the whole read, and last ``bench ui: windows=<n> partitions=<n>
worst_ms=<ms> target_ms=1000 ratio=<worst big/small>``. Not a test: nothing asserts on time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import insert  # noqa: E402

from airflow_cdc.state import StateStore  # noqa: E402
from airflow_cdc.state.engine import write_transaction  # noqa: E402
from airflow_cdc.state.tables import (  # noqa: E402
    partitions,
    window_partitions,
    window_steps,
    windows,
)

WINDOW = timedelta(minutes=5)
STEP_SECONDS = (("plan", 2.0), ("extract", 25.0), ("commit", 1.0), ("apply", 30.0), ("gate", 1.0))
BATCH = 20_000


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--keep", help="build the store in this folder and keep it")
    return parser.parse_args(argv)


def fill_stream(store: StateStore, stream_id: str, n_windows: int, n_partitions: int,
                now: datetime) -> None:
    """``n_windows`` windows ending just before ``now`` and ``n_partitions`` partitions."""
    store.register_stream(stream_id, "spanner_change_stream", f"fp-{stream_id}")
    first = now.replace(second=0, microsecond=0) - WINDOW * (n_windows + 1)
    middle = n_windows // 2
    window_rows, step_rows = [], []
    with write_transaction(store._engine) as conn:  # noqa: SLF001 - a bench fills tables in bulk
        for i in range(n_windows):
            start, end = first + i * WINDOW, first + (i + 1) * WINDOW
            newest = i == n_windows - 1
            state = "APPLIED" if newest or i == middle else "COMPLETE"
            done = end + timedelta(minutes=2)
            window_rows.append({
                "stream_id": stream_id, "window_start": start, "window_end": end, "state": state,
                "low_watermark": end - timedelta(minutes=3) if newest else end,
                "counts": json.dumps({"changes": 1000 + i % 500, "partitions": 40,
                                      "dead_letters": 1 if i % 97 == 0 else 0}),
                "changelog_snapshot_id": i, "target_snapshot_ids": "{}", "attempt": 1,
                "lease_owner": f"cdc_{stream_id}/scheduled__{end.isoformat()}",
                "lease_expires_at": None, "failure_reason": None,
                "completeness_note": None if state != "COMPLETE" else "evidence",
                "created_at": end, "updated_at": done,
            })
            at = end + timedelta(seconds=5)
            for step, seconds in STEP_SECONDS:
                if step == "gate" and state != "COMPLETE":
                    break
                step_rows.append({"stream_id": stream_id, "window_start": start, "step": step,
                                  "started_at": at, "finished_at": at + timedelta(seconds=seconds),
                                  "details": "{}"})
                at += timedelta(seconds=seconds + 1)
            if len(window_rows) >= BATCH:
                conn.execute(insert(windows), window_rows)
                conn.execute(insert(window_steps), step_rows)
                window_rows, step_rows = [], []
        if window_rows:
            conn.execute(insert(windows), window_rows)
            conn.execute(insert(window_steps), step_rows)
        last_end = first + n_windows * WINDOW
        partition_rows = []
        for k in range(n_partitions):
            live = k % 5 >= 3
            lagging = live and k < 15
            watermark = last_end - timedelta(minutes=3) if lagging else last_end
            partition_rows.append({
                "stream_id": stream_id, "partition_id": f"token-{k:06d}", "parent_ids": "[]",
                "reported_by": "[]", "resume_position": None, "start_ts": first,
                "watermark": watermark if live else first + WINDOW * (k % n_windows),
                "watermark_since": now - timedelta(minutes=4 if lagging else 1),
                "state": "RUNNING" if live else "FINISHED",
                "created_window": first, "finished_window": None if live else first,
                "updated_at": now,
            })
        for k in range(0, len(partition_rows), BATCH):
            conn.execute(insert(partitions), partition_rows[k:k + BATCH])
        # The two open windows' plans: every live partition (the gate reads them back).
        plan_rows = [
            {"stream_id": stream_id, "window_start": first + i * WINDOW,
             "partition_id": row["partition_id"], "parent_ids": "[]", "start_ts": first,
             "resume_position": None, "origin": "planned", "finished": False,
             "watermark": row["watermark"], "records": 10}
            for i in (middle, n_windows - 1)
            for row in partition_rows if row["state"] == "RUNNING"
        ]
        for k in range(0, len(plan_rows), BATCH):
            conn.execute(insert(window_partitions), plan_rows[k:k + BATCH])


def timed(call, repeats: int) -> float:
    """Median milliseconds of ``call()`` over ``repeats`` runs, after one warm-up."""
    call()
    runs = []
    for _ in range(repeats):
        began = time.perf_counter()
        call()
        runs.append((time.perf_counter() - began) * 1000)
    return statistics.median(runs)


def main(argv=None) -> int:
    args = parse_args(argv)
    from demo.ui import ViewServer

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-ui-"))
    work.mkdir(parents=True, exist_ok=True)
    path = work / "cdc_state.db"
    for old in work.glob("cdc_state.db*"):
        old.unlink()
    url = f"sqlite:///{path}"
    now = datetime.now(timezone.utc)
    store = StateStore(url)
    store.migrate()
    began = time.monotonic()
    fill_stream(store, "big", args.windows, args.partitions, now)
    fill_stream(store, "small", 10, 10, now)
    print(f"bench ui: built {args.windows} windows, {args.partitions} partitions and "
          f"{args.windows * 5} step rows in {time.monotonic() - began:.0f} s", file=sys.stderr)

    full_ms = timed(lambda: (store.list_windows("big"), store.list_partitions("big")), 1)
    from airflow_cdc.pipeline.stream_health import GATE_REASONS, window_health

    pages = {reasons: timed(lambda r=reasons: window_health(store, "big", 50, gate_reasons=r,
                                                             open_first=True), args.repeats)
             for reasons in (0, GATE_REASONS)}
    worst, worst_ratio = 0.0, 0.0
    try:
        with ViewServer(work / "server", env={"AIRFLOW_CDC_STATE_URL": url}) as server:
            token = server.token("viewer")

            def request(path: str):
                def call():
                    code, _, body = server.get(path, token)
                    if code != 200:
                        raise SystemExit(f"bench ui: {path} answered {code}: {body[:300]!r}")
                return call

            for template in ("/cdc/api/streams/{s}", "/cdc/api/streams/{s}/chart.svg?last=48",
                             "/cdc/api/streams/{s}/chart.png?last=48"):
                big = timed(request(template.format(s="big")), args.repeats)
                small = timed(request(template.format(s="small")), args.repeats)
                worst, worst_ratio = max(worst, big), max(worst_ratio, big / small)
                print(f"bench ui: endpoint={template.format(s='big')} ms={big:.1f} "
                      f"baseline_ms={small:.1f} ratio={big / small:.2f}", flush=True)
            listing = timed(request("/cdc/api/streams"), args.repeats)
            worst = max(worst, listing)
            print(f"bench ui: endpoint=/cdc/api/streams (big and small) ms={listing:.1f}",
                  flush=True)
    finally:
        store.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"bench ui: whole read of the big stream (every window and partition) "
          f"ms={full_ms:.1f}", flush=True)
    print(f"bench ui: in-process, the big stream's windows page ms={pages[GATE_REASONS]:.1f}, of "
          f"which the gate's reason for its newest open window (a plan of every live partition) "
          f"ms={pages[GATE_REASONS] - pages[0]:.1f}", flush=True)
    print(f"bench ui: windows={args.windows} partitions={args.partitions} worst_ms={worst:.1f} "
          f"target_ms=1000 ratio={worst_ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
