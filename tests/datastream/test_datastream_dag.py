"""The example Datastream DAG through real Airflow (dag.test), Spark (spark-submit) and Iceberg.

One module-scoped run of a generated Datastream output tree (MySQL JSON lines, PostgreSQL
Avro, backfill then CDC, rolled-back inserts, duplicates, out-of-order events) as one
window; the tests then read what it left: targets against the true state, the state store,
and the gate's XCom summary and Asset events.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_cdc.model import WindowState

DAG_ID = "datastream_to_iceberg"


@pytest.fixture(scope="module")
def replay(airflow_db, tmp_path_factory):
    from airflow.dag_processing.dagbag import DagBag

    from airflow_cdc.demo.datastream import START, environment, generate_history, run_windows

    base = tmp_path_factory.mktemp("datastream-dag")
    prefix = base / "landing" / "shop"
    history = generate_history(prefix, seed=3, windows=1)
    saved = dict(os.environ)
    os.environ.update(
        {**environment(base, prefix, START),
         "AIRFLOW_CDC_STATE_URL": f"sqlite:///{base / 'cdc_state.db'}"}
    )
    try:
        dag = DagBag(str(Path(__file__).resolve().parents[2] / "dags")).dags[DAG_ID]
        runs = run_windows(history, dag, log=lambda message: None)
        yield {"history": history, "runs": runs, "base": base, "dag": dag}
    finally:
        os.environ.clear()
        os.environ.update(saved)


def store():
    from airflow_cdc.state import StateStore

    return StateStore(os.environ.get("AIRFLOW_CDC_STATE_URL"))


def test_the_window_run_succeeds(replay):
    from airflow.utils.state import DagRunState

    assert [run.state for run in replay["runs"]] == [DagRunState.SUCCESS]


def test_targets_equal_the_true_state_of_the_source_tables(replay):
    from airflow_cdc.demo.datastream import compare_targets

    result = compare_targets(replay["base"] / "warehouse", replay["history"].truth)

    assert result["mismatches"] == 0, result["tables"]
    assert result["target_rows"] == sum(len(rows) for rows in replay["history"].truth.values())


def test_window_is_complete_by_evidence_with_duplicates_counted(replay):
    from airflow_cdc.state import StateStore

    with StateStore(f"sqlite:///{replay['base'] / 'cdc_state.db'}") as state:
        [record] = state.list_windows("shop")

    assert record.state is WindowState.COMPLETE
    assert record.counts["duplicates"] == replay["history"].duplicates
    assert record.counts["events"] == replay["history"].events + replay["history"].duplicates
    assert record.counts["idle_declared"] == 0
    assert record.completeness_note and "idle-timeout" not in record.completeness_note


def test_gate_asset_events_say_the_window_was_proven_by_evidence(replay):
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session
    from sqlalchemy import select

    run = replay["runs"][0]
    with create_session() as session:
        extras = [
            event.extra
            for event in session.scalars(select(AssetEvent).where(
                AssetEvent.source_run_id == run.run_id, AssetEvent.source_dag_id == DAG_ID))
        ]

    assert extras and {e.get("completeness") for e in extras} == {"evidence"}
    assert {e["stream"] for e in extras} == {"shop"}


def test_clearing_and_rerunning_the_window_changes_no_table_and_no_state(replay):
    """I1 through Airflow: the re-run re-plans the same files, finds every commit made, skips."""
    from airflow.utils.state import DagRunState

    from airflow_cdc.demo.compare import latest_metadata

    warehouse = replay["base"] / "warehouse"
    tables = sorted(p.parent for p in warehouse.glob("*/*/metadata"))
    assert any(t.name.endswith("_changelog") for t in tables) and len(tables) >= 3
    before = {t: latest_metadata(t).name for t in tables}
    windows_before = store().list_windows("shop")
    partitions_before = store().list_partitions("shop")

    rerun = replay["dag"].test(logical_date=replay["history"].window_end(0))

    assert rerun.state == DagRunState.SUCCESS
    assert {t: latest_metadata(t).name for t in tables} == before
    assert [(w.state, w.low_watermark, w.counts, w.changelog_snapshot_id) for w in store().list_windows("shop")] == [
        (w.state, w.low_watermark, w.counts, w.changelog_snapshot_id) for w in windows_before
    ]
    assert [(p.partition_id, p.state, p.watermark) for p in store().list_partitions("shop")] == [
        (p.partition_id, p.state, p.watermark) for p in partitions_before
    ]
