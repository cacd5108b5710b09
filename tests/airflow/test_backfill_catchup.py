"""``airflow backfill create`` drains a past range through a coalesced catch-up window, under
real Airflow services (api-server, scheduler, dag-processor, triggerer) and a real Spark.

The example Spanner DAG runs on a 1-minute schedule whose six intervals all lie in the past,
with ``catchup`` off (so the scheduler creates no run of its own) and ``max_catchup`` of ten
minutes. A backfill over the six intervals with three runs at a time: the first interval's
run plans one window over every interval that is ready, the other runs find their interval
covered, skip extract, commit and apply (no Spark job), and pass their gates once the window
is complete. Every interval has a record and the targets equal the source's true state.
"""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from demo.services import AirflowServices

pytestmark = pytest.mark.long  # make test-long (CI runs it)

ROOT = Path(__file__).resolve().parents[2]
DAG_ID = "spanner_change_stream_to_iceberg"
STREAM_ID = "allchanges"
TABLES = ("Accounts", "Orders", "Documents")
MINUTE = timedelta(minutes=1)
INTERVALS = 6
RUN_TIMEOUT = 900  # seconds for the whole backfill on a loaded 2-core machine


@pytest.fixture(scope="module")
def backfill(tmp_path_factory):
    from airflow_cdc_emulators.spanner import SpannerChangeStreamEmulator, generate_history

    from airflow_cdc.state import StateStore

    base = tmp_path_factory.mktemp("backfill")
    start = datetime.now(timezone.utc).replace(second=0, microsecond=0) - 30 * MINUTE
    end = start + INTERVALS * MINUTE
    history = generate_history(seed=5, start=start, duration=INTERVALS * MINUTE,
                               changes_per_second=0.5, initial_partitions=2, splits=1, merges=0,
                               three_way_merges=0, quiet_periods=0)
    dags = base / "dags"
    dags.mkdir()
    shutil.copy(ROOT / "dags" / f"{DAG_ID}.py", dags)
    state_url = f"sqlite:///{base / 'cdc_state.db'}"
    store = StateStore(state_url)
    store.migrate()
    with SpannerChangeStreamEmulator(history, now=end + 5 * MINUTE) as emulator:
        services = AirflowServices(base, dags, {
            "AIRFLOW_CDC_STATE_URL": state_url,
            "AIRFLOW_CDC_WAREHOUSE": str(base / "warehouse"),
            "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
            "SPANNER_EMULATOR_HOST": emulator.emulator_host,
            "CDC_WINDOW_MINUTES": "1",
            "CDC_START": start.isoformat(),
            "CDC_END": (end - MINUTE).isoformat(),
            "CDC_SPANNER_STREAM": history.stream_name,
            "CDC_SPANNER_TABLES": ",".join(TABLES),
            "CDC_CATCHUP": "false",
            "CDC_DEFERRABLE": "true",
            "CDC_MAX_CATCHUP_MINUTES": "10",
        })
        services.start()
        try:
            services.wait_for("the DAG to be parsed", lambda: services.query(
                "select dag_id from dag where dag_id = ?", DAG_ID), timeout=300)
            services.airflow("backfill", "create", "--dag-id", DAG_ID,
                             "--from-date", start.isoformat(),
                             "--to-date", (end - MINUTE).isoformat(), "--max-active-runs", "3")

            def finished():
                rows = services.query(
                    "select data_interval_start, state, run_type from dag_run where dag_id = ? "
                    "order by data_interval_start", DAG_ID)
                done = [row for row in rows if row[1] in ("success", "failed")]
                return rows if len(done) >= INTERVALS or any(
                    row[1] == "failed" for row in rows) else None

            runs = services.wait_for("the backfill's runs to finish", finished, RUN_TIMEOUT,
                                     every=5)
        finally:
            services.stop()
    yield {"history": history, "store": store, "runs": runs, "base": base,
           "start": start, "end": end}


def test_every_backfill_run_succeeds(backfill):
    assert [(state, run_type) for _, state, run_type in backfill["runs"]] == [
        ("success", "backfill")] * INTERVALS


def test_one_window_reads_the_whole_backfilled_range(backfill):
    windows = backfill["store"].list_windows(STREAM_ID)

    assert [(w.start, w.end, w.state.name) for w in windows] == [
        (backfill["start"], backfill["end"], "COMPLETE")]


def test_every_other_interval_is_recorded_as_covered_by_that_window(backfill):
    covered = backfill["store"].covered_intervals(STREAM_ID)

    assert [(c.start, c.window_start) for c in covered] == [
        (backfill["start"] + n * MINUTE, backfill["start"]) for n in range(1, INTERVALS)]


def test_the_targets_equal_the_true_state_at_the_range_end(backfill):
    from demo.compare import compare_spanner_history

    for result in compare_spanner_history(backfill["history"], backfill["base"] / "warehouse",
                                          backfill["end"]):
        assert (result.mismatches, result.expected_rows) == (0, result.target_rows), result.table
