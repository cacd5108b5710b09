"""Invariant I6 with real OS processes: two runs of one window, and exactly one commits."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from airflow_cdc.model import PartitionState, WindowState, format_ts
from airflow_cdc.state import StateStore

from .helpers import window

WORKER = Path(__file__).with_name("race_worker.py")
PARTITIONS = ["p1", "p2", "p3"]


def start_worker(
    state_url: str, sync_dir: Path, owner: str, steps: list, snapshot_id: int, records: int
):
    spec = {
        "url": state_url,
        "stream": "orders",
        "start": format_ts(window(0).start),
        "end": format_ts(window(0).end),
        "owner": owner,
        "sync_dir": str(sync_dir),
        "partitions": PARTITIONS,
        "snapshot_id": snapshot_id,
        "records": records,
        "steps": steps,
    }
    return subprocess.Popen(
        [sys.executable, str(WORKER), json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result_of(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, f"worker crashed:\n{err[-3000:]}"
    return json.loads(out.strip().splitlines()[-1])


def registered_store(state_url: str) -> StateStore:
    store = StateStore(state_url)
    store.migrate()
    store.register_stream("orders", "spanner", "fp")
    return store


def test_two_processes_running_one_window_at_once_commit_exactly_once(state_url, tmp_path):
    store = registered_store(state_url)
    full_run = [["plan", 600], ["extract"], ["commit"]]
    workers = {
        owner: start_worker(
            state_url,
            tmp_path,
            owner,
            [["signal", f"ready-{owner}"], ["wait", "go"], *full_run],
            snapshot_id,
            records,
        )
        for owner, snapshot_id, records in (("run-a", 111, 1), ("run-b", 222, 2))
    }
    for owner in workers:  # both processes are up and connected: start them together
        ready = tmp_path / f"ready-{owner}"
        while not ready.exists() and workers[owner].poll() is None:
            time.sleep(0.005)
    (tmp_path / "go").touch()
    results = {owner: result_of(process) for owner, process in workers.items()}

    winners = [r["owner"] for r in results.values() if r["error"] is None]
    assert len(winners) == 1, results
    [winner] = winners
    [loser] = [r for r in results.values() if r["owner"] != winner]
    error_type, message = loser["error"]
    assert error_type in ("WindowLeaseHeldError", "LeaseLostError")
    assert f"'{winner}'" in message
    committed = store.get_window("orders", window(0).start)
    assert (committed.state, committed.lease_owner, committed.attempt) == (
        WindowState.COMMITTED,
        winner,
        1,
    )
    assert committed.changelog_snapshot_id == {"run-a": 111, "run-b": 222}[winner]
    assert committed.counts["worker"] == winner
    assert {p.resume_position for p in store.list_partitions("orders")} == {f"resume-by-{winner}"}
    assert {r.records for r in store.window_partitions(window(0))} == {
        {"run-a": 1, "run-b": 2}[winner]
    }
    store.close()


def test_a_process_whose_lease_expired_and_was_taken_over_cannot_commit(state_url, tmp_path):
    store = registered_store(state_url)
    slow = start_worker(
        state_url,
        tmp_path,
        "run-a",
        # Extract, then let the lease run out (a stalled run that stopped renewing).
        [
            ["plan", 600],
            ["extract"],
            ["renew", 0.2],
            ["signal", "a-stalled"],
            ["wait", "b-committed"],
            ["commit"],
        ],
        111,
        1,
    )
    rescuer = start_worker(
        state_url,
        tmp_path,
        "run-b",
        [
            ["wait", "a-stalled"],
            ["wait_lease_expired"],
            ["plan", 600],
            ["extract"],
            ["commit"],
            ["signal", "b-committed"],
        ],
        111,  # the re-run finds the changelog commit tagged with the window: the same snapshot
        2,
    )
    slow_result, rescuer_result = result_of(slow), result_of(rescuer)

    assert rescuer_result == {
        "owner": "run-b",
        "done": ["wait", "wait_lease_expired", "plan", "extract", "commit", "signal"],
        "error": None,
    }
    assert slow_result["done"] == ["plan", "extract", "renew", "signal", "wait"]
    error_type, message = slow_result["error"]
    assert error_type == "LeaseLostError"
    assert "'run-a' cannot commit" in message and "held by 'run-b' (attempt 2)" in message
    committed = store.get_window("orders", window(0).start)
    assert (committed.state, committed.lease_owner, committed.attempt) == (
        WindowState.COMMITTED,
        "run-b",
        2,
    )
    assert {(p.state, p.resume_position) for p in store.list_partitions("orders")} == {
        (PartitionState.RUNNING, "resume-by-run-b")
    }
    assert {r.records for r in store.window_partitions(window(0))} == {2}
    store.close()
