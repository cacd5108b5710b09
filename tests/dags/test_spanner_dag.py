"""The example Spanner DAG through real Airflow (dag.test), Spark (spark-submit) and Iceberg.

One module-scoped replay runs every 10-minute window of a 30-minute emulated history; the
tests then read what it left: targets against the true state, the XCom summary, the state
store, and a cleared-and-re-run middle window (I1).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from airflow_cdc.model import WindowState

WINDOW = timedelta(minutes=10)
DAG_ID = "spanner_change_stream_to_iceberg"


@pytest.fixture(scope="module")
def replay(airflow_db, tmp_path_factory):
    from airflow.dag_processing.dagbag import DagBag

    from airflow_cdc.emulators.spanner import SpannerChangeStreamEmulator, generate_history

    base = tmp_path_factory.mktemp("spanner-dag")
    history = generate_history(
        seed=5, duration=timedelta(minutes=30), changes_per_second=1.0, splits=2, merges=1,
        three_way_merges=0, quiet_periods=1,
    )
    saved = dict(os.environ)
    os.environ.update(
        {
            "AIRFLOW_CDC_WAREHOUSE": str(base / "warehouse"),
            "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
            "AIRFLOW_CDC_STATE_URL": f"sqlite:///{base / 'cdc_state.db'}",
            "CDC_WINDOW_MINUTES": "10",
            "CDC_START": history.created_at.isoformat(),
            "CDC_SPANNER_STREAM": history.stream_name,
        }
    )
    with SpannerChangeStreamEmulator(history) as emulator:
        os.environ["SPANNER_EMULATOR_HOST"] = emulator.emulator_host
        dag = DagBag(str(Path(__file__).resolve().parents[2] / "dags")).get_dag(DAG_ID)
        ends = [history.created_at + WINDOW * i for i in (1, 2, 3)]
        runs = {end: dag.test(logical_date=end) for end in ends}
        yield {"history": history, "dag": dag, "runs": runs, "ends": ends, "base": base}
    os.environ.clear()
    os.environ.update(saved)


def store():
    from airflow_cdc.state import StateStore

    return StateStore(os.environ["AIRFLOW_CDC_STATE_URL"])


def test_every_window_run_succeeds(replay):
    from airflow.utils.state import DagRunState

    assert {end: run.state for end, run in replay["runs"].items()} == {
        end: DagRunState.SUCCESS for end in replay["ends"]
    }


def test_targets_equal_the_true_state_at_the_last_window_end(replay):
    from airflow_cdc.demo.compare import compare_table, read_iceberg_rows

    history = replay["history"]
    truth = history.state_at(replay["ends"][-1] - timedelta(microseconds=1))
    for table in history.tables:
        rows = read_iceberg_rows(replay["base"] / "warehouse" / "current" / table.name)
        result = compare_table(table, truth[table.name], rows)
        assert (result.target_rows, result.mismatches) == (result.expected_rows, 0), table.name


def test_every_window_is_complete_with_its_low_watermark_at_its_end(replay):
    records = store().list_windows("allchanges")
    assert [(r.state, r.low_watermark) for r in records] == [
        (WindowState.COMPLETE, end) for end in replay["ends"]
    ]


def test_gate_publishes_the_window_summary_in_xcom(replay):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    run = replay["runs"][replay["ends"][0]]
    with create_session() as session:
        row = session.scalars(
            XComModel.get_many(
                run_id=run.run_id, dag_ids=DAG_ID, task_ids="all_changes.gate",
                key="window_summary",
            )
        ).first()
        summary = XComModel.deserialize_value(row)
    history = replay["history"]
    first_end = replay["ends"][0]
    expected_changes = sum(
        len(t.changes) for t in history.transactions if t.commit_timestamp < first_end
    )
    assert summary["changes"] == expected_changes
    assert summary["state"] == "COMPLETE"
    assert summary["partitions"] >= 1 and summary["changelog_snapshot_id"]
    assert "token" not in str(summary).lower()


def test_clearing_and_rerunning_a_middle_window_changes_nothing(replay):
    from airflow.utils.state import DagRunState

    from airflow_cdc.demo.compare import latest_metadata

    warehouse = replay["base"] / "warehouse"
    tables = [warehouse / "cdc" / "allchanges_changelog"] + [
        warehouse / "current" / t.name for t in replay["history"].tables
    ]
    before = {t: latest_metadata(t).name for t in tables}
    windows_before = store().list_windows("allchanges")
    partitions_before = store().list_partitions("allchanges")

    rerun = replay["dag"].test(logical_date=replay["ends"][1])

    assert rerun.state == DagRunState.SUCCESS
    assert {t: latest_metadata(t).name for t in tables} == before
    after = store().list_windows("allchanges")
    assert [(w.state, w.low_watermark, w.counts, w.changelog_snapshot_id) for w in after] == [
        (w.state, w.low_watermark, w.counts, w.changelog_snapshot_id) for w in windows_before
    ]
    assert [(p.partition_id, p.state, p.watermark) for p in store().list_partitions("allchanges")] == [
        (p.partition_id, p.state, p.watermark) for p in partitions_before
    ]
