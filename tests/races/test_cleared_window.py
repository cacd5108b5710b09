"""A window cleared (run again) while the next window runs: ordered, never interleaved.

The state store orders a stream's windows: W may be planned only once W-1 has committed, so a
W-1 still running holds W back (the plan waits, then is refused). What is left is a W-1 that
has committed and is run again, cleared by an operator, while W is planned or extracting.
Then:

* W-1's plan, extract and commit find it committed and change nothing: its plan file, its
  partitions' positions, its changelog snapshot and counts stay as recorded, so W, planned
  from W-1's outcomes, reads exactly what follows them;
* apply is ordered: W's apply is refused while an earlier window is committed but not applied
  (:func:`~airflow_cdc.pipeline.protocol.require_earlier_windows_applied`), and runs once W-1's
  cleared apply has run. Applied the other way round, W-1's partial images (only the columns
  a change touched) would lose whole to W's newer changes of the same keys.

Each run is its own OS process (``window_worker.py``), stepping as the operators do, on SQLite
and on PostgreSQL. The whole thing through real DAG runs, Spark and Iceberg, with the targets
compared with the source's truth, is ``test_cleared_window_dags.py`` (marker ``races_long``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_cdc.model import Window, WindowState, format_ts

WORKER = Path(__file__).with_name("window_worker.py")
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
W1 = Window("orders", T0, T0 + timedelta(minutes=10))
W2 = Window("orders", W1.end, W1.end + timedelta(minutes=10))
RUN_1, RUN_2 = "orders_cdc/scheduled__w1", "orders_cdc/scheduled__w2"


def start(state_url: str, tmp_path: Path, window: Window, owner: str, steps: list) -> subprocess.Popen:
    spec = {"url": state_url, "work_root": str(tmp_path / "work"), "sync_dir": str(tmp_path),
            "start": format_ts(window.start), "end": format_ts(window.end), "owner": owner,
            "steps": steps}
    return subprocess.Popen([sys.executable, str(WORKER), json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result_of(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, f"worker crashed:\n{err[-3000:]}"
    return json.loads(out.strip().splitlines()[-1])


def run(state_url: str, tmp_path: Path, window: Window, owner: str, steps: list) -> dict:
    return result_of(start(state_url, tmp_path, window, owner, steps))


@pytest.fixture
def store(state_url):
    from airflow_cdc.state import StateStore

    with StateStore(state_url) as opened:
        opened.migrate()
        yield opened


def test_a_committed_window_cleared_while_the_next_is_planned_and_extracting_changes_nothing_of_either(
    store, state_url, tmp_path
):
    from airflow_cdc.pipeline.protocol import StreamConfig

    # W1 ran up to its commit; its apply failed, so its DAG run failed.
    assert run(state_url, tmp_path, W1, RUN_1, [["plan"], ["extract", 111], ["commit"]])["error"] is None
    plan_file = StreamConfig("orders", "test", {}, work_root=str(tmp_path / "work")).plan_path(W1)
    before = (plan_file.read_bytes(), store.get_window("orders", W1.start), store.window_partitions(W1))

    next_run = start(state_url, tmp_path, W2, RUN_2, [
        ["plan"], ["signal", "w2-planned"], ["wait", "w1-replanned"],
        ["extract", 222], ["signal", "w2-extracted"], ["wait", "w1-applied"],
        ["commit"], ["apply"]])
    cleared = start(state_url, tmp_path, W1, RUN_1, [
        ["wait", "w2-planned"], ["plan"], ["signal", "w1-replanned"],
        ["wait", "w2-extracted"], ["extract", 333], ["commit"], ["apply"], ["signal", "w1-applied"]])
    cleared_result, next_result = result_of(cleared), result_of(next_run)

    assert (cleared_result["error"], cleared_result["skipped"]) == (None, ["extract"])
    assert next_result["error"] is None
    plan_after, w1, w1_partitions = plan_file.read_bytes(), store.get_window("orders", W1.start), \
        store.window_partitions(W1)
    assert plan_after == before[0]
    assert w1_partitions == before[2]
    recorded = before[1]
    assert (w1.state, w1.attempt, w1.lease_owner, w1.changelog_snapshot_id, w1.counts, w1.low_watermark) == (
        WindowState.APPLIED, 1, RUN_1, 111, recorded.counts, recorded.low_watermark)
    w2 = store.get_window("orders", W2.start)
    assert (w2.state, w2.changelog_snapshot_id, w2.lease_owner) == (WindowState.APPLIED, 222, RUN_2)
    # W2 read partition p from where W1's outcome left it.
    assert [(p.partition_id, p.start) for p in store.window_partitions(W2)] == [("p", W1.end)]


def test_the_next_windows_apply_is_refused_until_a_cleared_earlier_window_has_applied(
    store, state_url, tmp_path
):
    for window, owner in ((W1, RUN_1), (W2, RUN_2)):
        assert run(state_url, tmp_path, window, owner, [["plan"], ["extract", 1], ["commit"]])["error"] is None

    refused = run(state_url, tmp_path, W2, RUN_2, [["apply"]])
    cleared = run(state_url, tmp_path, W1, RUN_1, [["plan"], ["extract", 1], ["commit"], ["apply"]])
    again = run(state_url, tmp_path, W2, RUN_2, [["apply"]])

    error_type, message = refused["error"]
    assert error_type == "WindowNotReadyError"
    assert f"window {W2.window_id} of orders cannot apply yet" in message
    assert f"the earlier window {W1.window_id} is COMMITTED, not applied" in message
    assert "run the apply of" in message and "clear its apply task" in message
    assert (cleared["error"], again["error"]) == (None, None)
    assert [w.state for w in store.list_windows("orders")] == [WindowState.APPLIED, WindowState.APPLIED]
