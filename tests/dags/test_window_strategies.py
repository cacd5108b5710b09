"""What a window costs in Spark applications, through the example Spanner DAG (dag.test, one process per window).

Two 10-minute windows of an emulated stream whose changes stop after the first: a window
with changes runs ONE Spark application (the extract job applies the window too, and
the apply task only records it); the empty window runs none (the empty-window rule,
``airflow_cdc/pipeline/empty_window.py``). The targets still equal the source's truth, and a
re-run of the empty window changes nothing (I1).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_cdc.model import WINDOW_SNAPSHOT_PROPERTY, WindowState

pytestmark = pytest.mark.long  # make test-long (CI runs it); make test keeps the Spanner DAG's run

DAG_ID = "spanner_change_stream_to_iceberg"
START = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
WINDOW = timedelta(minutes=10)
ENDS = [START + WINDOW, START + 2 * WINDOW]  # the second window has no change
TABLES = ("Accounts", "Orders", "Documents")


@pytest.fixture(scope="module")
def replay(airflow_db, tmp_path_factory):
    from airflow_cdc_emulators.spanner import SpannerChangeStreamEmulator, generate_history

    base = tmp_path_factory.mktemp("window-strategies")
    history = generate_history(seed=9, start=START, duration=WINDOW, changes_per_second=0.3,
                               initial_partitions=2, splits=0, merges=0, three_way_merges=0,
                               quiet_periods=0)
    saved = dict(os.environ)
    os.environ.update({
        "AIRFLOW_CDC_WAREHOUSE": str(base / "warehouse"),
        "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
        "AIRFLOW_CDC_STATE_URL": f"sqlite:///{base / 'cdc_state.db'}",
        "CDC_WINDOW_MINUTES": "10",
        "CDC_START": START.isoformat(),
        "CDC_SPANNER_STREAM": history.stream_name,
        "CDC_SPANNER_TABLES": ",".join(TABLES),
        "CDC_DEFERRABLE": "false",
    })
    try:
        with SpannerChangeStreamEmulator(history, now=ENDS[-1]) as emulator:
            os.environ["SPANNER_EMULATOR_HOST"] = emulator.emulator_host
            # Each window in its own process (as the reliability matrix runs them), so this
            # module leaves no Airflow or OpenLineage state behind in the test process.
            runs = {end: run_window(end, base) for end in ENDS}
            before = snapshot_state(base)
            rerun = run_window(ENDS[-1], base)
            yield {"history": history, "base": base, "runs": runs, "rerun": rerun,
                   "before_rerun": before}
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_window(end: datetime, base: Path) -> int:
    """The DAG run of the window ending ``end`` (``tests/faults/run_window.py``); its exit
    status (0: the run succeeded)."""
    import subprocess
    import sys

    runner = Path(__file__).resolve().parents[1] / "faults" / "run_window.py"
    with open(base / f"window-{end:%H%M}.log", "a") as log:
        return subprocess.run([sys.executable, str(runner), DAG_ID, end.isoformat()],
                              stdout=log, stderr=subprocess.STDOUT, timeout=1800).returncode


def store():
    from airflow_cdc.state import StateStore

    return StateStore(os.environ["AIRFLOW_CDC_STATE_URL"])


def metadata(table_dir: Path) -> dict:
    from demo.compare import latest_metadata

    return json.loads(latest_metadata(table_dir).read_text())


def snapshot_state(base: Path):
    tables = [base / "warehouse" / "cdc" / "allchanges_changelog"]
    tables += [base / "warehouse" / "current" / t for t in TABLES]
    windows = [(w.state, w.counts, w.changelog_snapshot_id, w.target_snapshot_ids)
               for w in store().list_windows("allchanges")]
    return {t.name: metadata(t).get("current-snapshot-id") for t in tables}, windows


def window_dir_of(replay, end) -> Path:
    from airflow_cdc.model import Window
    from airflow_cdc.pipeline.files import window_dir

    return window_dir(replay["base"] / "work", Window("allchanges", end - WINDOW, end))


def window_files(replay, end) -> set[str]:
    """The files the window's steps left in its folder (the Spark jobs' results among them)."""
    return {p.name for p in window_dir_of(replay, end).iterdir()}


def test_every_window_run_succeeds(replay):
    assert [replay["runs"][end] for end in ENDS] + [replay["rerun"]] == [0] * 3


def test_a_window_with_changes_runs_one_spark_application_that_extracts_and_applies(replay):
    from airflow_cdc.pipeline.apply_step import FUSED_APPLY_RESULT

    files = window_files(replay, ENDS[0])
    fused = json.loads((window_dir_of(replay, ENDS[0]) / FUSED_APPLY_RESULT).read_text())
    # The extract job's result and its apply; no result of an apply job of its own.
    assert {"extract-result.json", FUSED_APPLY_RESULT} <= files and "apply-result.json" not in files
    assert fused["apply"]["status"] == "applied"


def test_an_empty_window_starts_no_spark_job_and_completes_at_its_end(replay):
    record = store().get_window("allchanges", ENDS[-1] - WINDOW)

    # Its outcome, written by the extract task; nothing any Spark job writes.
    assert window_files(replay, ENDS[-1]) == {"plan.json", "outcome.json"}
    assert (record.state, record.counts["changes"], record.low_watermark) == (
        WindowState.COMPLETE, 0, ENDS[-1])
    assert (record.changelog_snapshot_id, record.target_snapshot_ids) == (None, {})


def test_an_empty_window_writes_no_changelog_commit(replay):
    changelog = metadata(replay["base"] / "warehouse" / "cdc" / "allchanges_changelog")
    tags = [s["summary"].get(WINDOW_SNAPSHOT_PROPERTY) for s in changelog["snapshots"]]
    windows = [r.window.window_id for r in store().list_windows("allchanges")]

    assert [t for t in tags if t] == windows[:1]


def test_the_apply_task_records_the_target_snapshots_the_extract_job_committed(replay):
    record = store().get_window("allchanges", ENDS[0] - WINDOW)
    current = {f"lake.current.{t}": metadata(replay["base"] / "warehouse" / "current" / t)[
        "current-snapshot-id"] for t in TABLES}

    assert record.target_snapshot_ids and record.target_snapshot_ids.items() <= current.items()


def test_targets_equal_the_true_state_after_the_empty_window(replay):
    from demo.compare import compare_spanner_history

    for result in compare_spanner_history(replay["history"], replay["base"] / "warehouse", ENDS[-1]):
        assert (result.target_rows, result.mismatches) == (result.expected_rows, 0), result.table


def test_rerunning_the_empty_window_changes_nothing_and_starts_no_spark_job(replay):
    assert snapshot_state(replay["base"]) == replay["before_rerun"]
    assert window_files(replay, ENDS[-1]) == {"plan.json", "outcome.json"}
