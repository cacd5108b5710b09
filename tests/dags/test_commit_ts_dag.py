"""The example commit-timestamp DAG through real Airflow (dag.test), Spark (spark-submit) and
Iceberg, against the Spanner emulator's seeded tables.

One module-scoped replay runs two 20-minute windows of a 40-minute history (the second one
reconciles the keys), clears and re-runs the second window, then moves the emulator's clock
past the version retention: the third window's plan fails, the re-seed DAG is triggered, and
the third window, run again, reads the tables whole at the re-seed's instant.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from airflow_cdc.model import WindowState
from tests.warm import stop_warm_drivers, warm_driver_env

pytestmark = pytest.mark.long  # make test-long (CI runs it); make test keeps the Spanner DAG's run

WINDOW = timedelta(minutes=20)
DAG_ID = "spanner_commit_ts_to_iceberg"
RESEED_DAG_ID = "spanner_commit_ts_reseed"
STREAM = "shop_cts_dag"
PLAIN_TABLES = ("Orders", "Documents", "Customers", "Events")


@pytest.fixture(scope="module")
def replay(airflow_db, tmp_path_factory):
    from airflow.dag_processing.dagbag import DagBag

    from demo.compare import latest_metadata
    from airflow_cdc_emulators.spanner import SpannerEmulator, generate_commit_timestamp_tables

    base = tmp_path_factory.mktemp("commit-ts-dag")
    tables = generate_commit_timestamp_tables(seed=11, duration=timedelta(minutes=40),
                                              transactions_per_minute=8)
    start = tables.created_at
    ends = [start + WINDOW, start + 2 * WINDOW, start + 3 * WINDOW]
    saved = dict(os.environ)
    os.environ.update({
        **warm_driver_env(base),
        "AIRFLOW_CDC_WAREHOUSE": str(base / "warehouse"),
        "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
        "AIRFLOW_CDC_STATE_URL": f"sqlite:///{base / 'cdc_state.db'}",
        "CDC_START": start.isoformat(),
        "CDC_WINDOW_MINUTES": "20",
        "CDC_RECONCILE_EVERY": "2",
        "CDC_STREAM_ID": STREAM,
    })
    found: dict = {"tables": tables, "ends": ends, "base": base}
    try:
        with SpannerEmulator(tables=tables) as emulator:
            os.environ["SPANNER_EMULATOR_HOST"] = emulator.emulator_host
            bag = DagBag(str(Path(__file__).resolve().parents[2] / "dags"))
            dag, reseed = bag.get_dag(DAG_ID), bag.get_dag(RESEED_DAG_ID)
            runs = []
            for end in ends[:2]:
                emulator.now = end + timedelta(seconds=3)
                runs.append(dag.test(logical_date=end))
            found["runs"] = runs
            found["windows_before"] = store().list_windows(STREAM)
            found["partitions_before"] = store().list_partitions(STREAM)
            warehouse = base / "warehouse"
            folders = [warehouse / "cdc" / f"{STREAM}_changelog"] + [
                warehouse / "commit_ts" / t for t in PLAIN_TABLES]
            found["metadata_before"] = {f: latest_metadata(f).name for f in folders}
            found["rerun"] = dag.test(logical_date=ends[1])
            found["metadata_after"] = {f: latest_metadata(f).name for f in folders}
            found["windows_after"] = store().list_windows(STREAM)
            found["partitions_after"] = store().list_partitions(STREAM)
            # Two hours on: the third window's end is older than the retention (1 h).
            emulator.now = ends[2] + timedelta(hours=2)
            found["expired"] = dag.test(logical_date=ends[2])
            found["third_after_expiry"] = store().get_window(STREAM, ends[1])
            found["reseed_at"] = emulator.now - timedelta(seconds=5)
            found["reseed"] = reseed.test(run_conf={"at": found["reseed_at"].isoformat()})
            found["reseeded"] = dag.test(logical_date=ends[2])
        yield found
    finally:
        stop_warm_drivers(base)
        os.environ.clear()
        os.environ.update(saved)


def store():
    from airflow_cdc.state import StateStore

    return StateStore(os.environ["AIRFLOW_CDC_STATE_URL"])


def test_every_window_run_succeeds_and_its_targets_equal_the_truth(replay):
    from airflow.utils.state import DagRunState

    from demo.commit_ts import compare

    result = compare(replay["base"], replay["tables"], replay["ends"][:2], log=print)

    assert [r.state for r in replay["runs"]] == [DagRunState.SUCCESS] * 2
    assert result["mismatches"] == 0 and result["hard_deletes_missed"] == 0
    assert result["target_rows"] > 0


def test_the_second_window_reconciled_the_hard_deletes_of_the_first_two(replay):
    second = replay["windows_before"][1]
    gone = [c for c in replay["tables"].hard_deletes_between(replay["ends"][0], replay["ends"][1])
            if c.table != "DocumentHistory"]

    assert gone and second.counts["reconciled_deletes"] > 0
    assert replay["windows_before"][0].counts.get("reconciled_deletes", 0) == 0


def test_clearing_and_rerunning_a_window_changes_nothing(replay):
    from airflow.utils.state import DagRunState

    assert replay["rerun"].state == DagRunState.SUCCESS
    assert replay["metadata_after"] == replay["metadata_before"]
    assert [(w.state, w.low_watermark, w.counts, w.changelog_snapshot_id)
            for w in replay["windows_after"]] == [
        (w.state, w.low_watermark, w.counts, w.changelog_snapshot_id)
        for w in replay["windows_before"]]
    assert [(p.partition_id, p.state, p.watermark, p.resume_position)
            for p in replay["partitions_after"]] == [
        (p.partition_id, p.state, p.watermark, p.resume_position)
        for p in replay["partitions_before"]]


def test_a_window_past_the_retention_fails_its_plan_and_opens_no_window(replay):
    from airflow.utils.state import DagRunState

    assert replay["expired"].state == DagRunState.FAILED
    assert replay["third_after_expiry"] is None


def test_after_a_reseed_the_window_reads_the_tables_whole_at_the_reseed_instant(replay):
    from airflow.utils.state import DagRunState

    from demo.commit_ts import SOFT_DELETE, NAMESPACE
    from demo.compare import read_iceberg_rows

    tables, at = replay["tables"], replay["reseed_at"]
    third = store().get_window(STREAM, replay["ends"][1])
    truth = tables.state_at(at)

    assert replay["reseed"].state == DagRunState.SUCCESS
    assert replay["reseeded"].state == DagRunState.SUCCESS
    assert third.state == WindowState.COMPLETE and third.counts["reseeds"] == 1
    for name in PLAIN_TABLES:
        flag = SOFT_DELETE.get(name)
        alive = {k for k, row in truth[name].items() if not (flag and row.get(flag))}
        rows = read_iceberg_rows(replay["base"] / "warehouse" / NAMESPACE / name)
        assert len(rows) == len(alive), name
