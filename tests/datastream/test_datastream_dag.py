"""The example Datastream DAG through real Airflow (dag.test), Spark (spark-submit) and Iceberg.

One module-scoped run of a generated Datastream output tree (MySQL JSON lines, PostgreSQL
Avro, Oracle Avro with rows that move to new ROWIDs and a key declared through the DAG,
backfill then CDC, rolled-back inserts, duplicates, out-of-order events) as one window; the
tests then read what it left: targets against the true state (exact values and Iceberg
column types), the state store, and the gate's XCom summary and Asset events.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_cdc.model import WindowState
from tests.warm import stop_warm_drivers, warm_driver_env

# make test-long: make test keeps the Spanner DAG as its one example DAG run through dag.test.
pytestmark = pytest.mark.long

DAG_ID = "datastream_to_iceberg"


@pytest.fixture(scope="module")
def replay(airflow_db, tmp_path_factory):
    from airflow.dag_processing.dagbag import DagBag

    from demo.datastream import START, environment, generate_history, run_windows

    base = tmp_path_factory.mktemp("datastream-dag")
    prefix = base / "landing" / "shop"
    history = generate_history(prefix, seed=3, windows=1)
    saved = dict(os.environ)
    os.environ.update(
        {**warm_driver_env(base), **environment(base, prefix, START),
         "AIRFLOW_CDC_STATE_URL": f"sqlite:///{base / 'cdc_state.db'}"}
    )
    try:
        dag = DagBag(str(Path(__file__).resolve().parents[2] / "dags")).dags[DAG_ID]
        runs = run_windows(history, dag, log=lambda message: None)
        yield {"history": history, "runs": runs, "base": base, "dag": dag}
    finally:
        stop_warm_drivers(base)
        os.environ.clear()
        os.environ.update(saved)


def store():
    from airflow_cdc.state import StateStore

    return StateStore(os.environ.get("AIRFLOW_CDC_STATE_URL"))


def test_the_window_run_succeeds(replay):
    from airflow.utils.state import DagRunState

    assert [run.state for run in replay["runs"]] == [DagRunState.SUCCESS]


def test_targets_equal_the_true_state_of_the_source_tables(replay):
    from demo.datastream import compare_targets

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

    from demo.compare import latest_metadata

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


def test_oracle_target_has_one_row_per_declared_key_with_moved_rows_latest_values(replay):
    """Rows that moved to a new ROWID in the window leave no ghost under the old one."""
    from demo.compare import read_iceberg_rows

    history = replay["history"]
    window_end = history.window_end(0)
    moved = {m.key for m in history.moves if m.at < window_end and m.key in history.truth["HR_EMPLOYEES"]}
    pairs = [m for m in history.moves if m.pair and m.at < window_end]
    assert moved and pairs, "the generated window holds no Oracle row move to test"
    current = replay["base"] / "warehouse" / "current"
    [folder] = [p for p in current.iterdir() if p.name.lower() == "hr_employees"]

    rows = read_iceberg_rows(folder)

    ids = [row["EMPLOYEE_ID"] for row in rows]
    assert sorted(ids) == sorted(history.truth["HR_EMPLOYEES"])  # one row per key, none extra
    assert not any("row_id" in row for row in rows)
    by_id = {row["EMPLOYEE_ID"]: {k: v for k, v in row.items() if not k.startswith("_cdc_")} for row in rows}
    for key in moved:
        # repr: Decimal('20.0') == Decimal('20.00') and 20 == 20.0 in Python; their reprs differ.
        assert {k: repr(v) for k, v in by_id[key].items()} == {
            k: repr(v) for k, v in history.truth["HR_EMPLOYEES"][key].items()}


def test_datetime_and_decimal_columns_have_exact_iceberg_types_and_values(replay):
    from pyiceberg.types import DecimalType, TimestampType

    from demo.compare import iceberg_column_types, read_iceberg_rows

    current = replay["base"] / "warehouse" / "current"
    folders = {p.name.lower(): p for p in current.iterdir()}
    employees = iceberg_column_types(folders["hr_employees"])
    orders = iceberg_column_types(folders["shop_orders"])

    # Avro datetime record -> timestamp without time zone; Avro decimal(8,2) -> decimal(8,2).
    assert employees["HIRE_DATE"] == TimestampType()
    assert employees["SALARY"] == DecimalType(8, 2)
    # JSON 20.00 literals, declared DECIMAL(10,2) through CDC_DATASTREAM_COLUMN_TYPES.
    assert orders["amount"] == DecimalType(10, 2)
    truth = replay["history"].truth
    for row in read_iceberg_rows(folders["hr_employees"]):
        expected = truth["HR_EMPLOYEES"][row["EMPLOYEE_ID"]]
        assert row["HIRE_DATE"].tzinfo is None and row["HIRE_DATE"] == expected["HIRE_DATE"]
    for row in read_iceberg_rows(folders["shop_orders"]):
        amount = truth["shop_orders"][row["id"]]["amount"]
        assert str(row["amount"]) == str(amount) and row["amount"].as_tuple().exponent == -2
