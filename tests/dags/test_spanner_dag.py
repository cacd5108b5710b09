"""The example Spanner DAG through real Airflow (dag.test), Spark (a warm driver) and Iceberg.

One module-scoped replay runs every 10-minute window of a 30-minute emulated history with a
deferrable gate (dag.test would run its trigger inline); the tests then read what it left: targets
against the true state, the XCom summary, the state store, the deferrals and Asset events
Airflow recorded, the captured task output, and a cleared-and-re-run middle window (I1).

The state store is reached through a ``cdc_state`` connection holding a canary password, so
the credential scan has a real secret to look for.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest

from airflow_cdc.model import WindowState
from tests.warm import stop_warm_drivers, warm_driver_env

WINDOW = timedelta(minutes=10)
DAG_ID = "spanner_change_stream_to_iceberg"
GATE = "all_changes.gate"
CANARY = "canary-s3cr3t-7f3a9"
TABLES = ("Accounts", "Orders", "Documents")


@contextmanager
def captured_output(path: Path):
    """Everything written to stdout/stderr (Python objects and file descriptors) into ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    saved_streams = sys.stdout, sys.stderr
    with open(path, "w", buffering=1) as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        sys.stdout = sys.stderr = sink
        try:
            yield
        finally:
            sys.stdout, sys.stderr = saved_streams
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            os.close(saved_fds[0])
            os.close(saved_fds[1])


@pytest.fixture(scope="module")
def replay(airflow_db, tmp_path_factory):
    from airflow.dag_processing.dagbag import DagBag

    from airflow_cdc_emulators.spanner import SpannerChangeStreamEmulator, generate_history

    base = tmp_path_factory.mktemp("spanner-dag")
    history = generate_history(
        seed=5, duration=timedelta(minutes=30), changes_per_second=1.0, splits=2, merges=1,
        three_way_merges=0, quiet_periods=1,
    )
    saved = dict(os.environ)
    os.environ.update(
        {
            **warm_driver_env(base),
            "AIRFLOW_CDC_WAREHOUSE": str(base / "warehouse"),
            "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
            "AIRFLOW_CDC_STATE_URL": f"sqlite:///{base / 'cdc_state.db'}",
            "CDC_WINDOW_MINUTES": "10",
            "CDC_START": history.created_at.isoformat(),
            "CDC_SPANNER_STREAM": history.stream_name,
            "CDC_SPANNER_TABLES": ",".join(TABLES),
            "CDC_DEFERRABLE": "true",
            # Every OpenLineage event the tasks emit, one JSON per line, for the credential scan.
            "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
                {"type": "file", "log_file_path": str(base / "openlineage.jsonl"), "append": True}),
            # The state store through a connection whose password is a canary: it must never
            # show up in task output, XCom or Asset extras.
            "AIRFLOW_CONN_CDC_STATE_DEFAULT": json.dumps(
                {
                    "conn_type": "cdc_state",
                    "login": "cdc",
                    "password": CANARY,
                    "extra": {"path": str(base / "cdc_state.db"), "token": CANARY},
                }
            ),
        }
    )
    with SpannerChangeStreamEmulator(history) as emulator:
        os.environ["SPANNER_EMULATOR_HOST"] = emulator.emulator_host
        dag = DagBag(str(Path(__file__).resolve().parents[2] / "dags")).get_dag(DAG_ID)
        ends = [history.created_at + WINDOW * i for i in (1, 2, 3)]
        output = base / "replay-output.log"
        with captured_output(output):
            runs = {}
            for end in ends:
                runs[end] = dag.test(logical_date=end)
                # New DAGs start paused (read when Airflow is imported): the first run
                # registered the consumer, so the later windows' events queue it.
                unpause("cdc_asset_consumer")
        lineage = base / "openlineage.jsonl"
        yield {
            "history": history, "dag": dag, "runs": runs, "ends": ends, "base": base,
            "output": output.read_text(),
            "openlineage": lineage.read_text() if lineage.exists() else "",
        }
    stop_warm_drivers(base)
    os.environ.clear()
    os.environ.update(saved)


def unpause(dag_id: str) -> None:
    """Unpause a DAG an earlier test may have registered (paused, as new DAGs are)."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import update

    with create_session() as session:
        session.execute(update(DagModel).where(DagModel.dag_id == dag_id).values(is_paused=False))


def store():
    from airflow_cdc.state import StateStore

    return StateStore(os.environ["AIRFLOW_CDC_STATE_URL"])


def test_every_window_run_succeeds(replay):
    from airflow.utils.state import DagRunState

    assert {end: run.state for end, run in replay["runs"].items()} == {
        end: DagRunState.SUCCESS for end in replay["ends"]
    }


def test_targets_equal_the_true_state_at_the_last_window_end(replay):
    from demo.compare import compare_spanner_history

    for result in compare_spanner_history(replay["history"], replay["base"] / "warehouse", replay["ends"][-1]):
        assert (result.target_rows, result.mismatches) == (result.expected_rows, 0), result.table


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

    from demo.compare import latest_metadata

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


def asset_events(run) -> dict[str, dict]:
    """Asset name -> extra of the events the run emitted."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetModel.name, AssetEvent.extra)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetEvent.source_run_id == run.run_id, AssetEvent.source_task_id == GATE)
        ).all()
    return {name: extra for name, extra in rows}


def test_every_deferrable_gate_completes_its_applied_window_at_the_first_check(
    replay, audit_events
):
    # Apply ran after extract read every partition past the window end: the window is proven
    # complete when the gate starts, so it never takes the defer-and-resume path.
    assert [audit_events(replay["runs"][end], GATE) for end in replay["ends"]] == [
        ["running", "success"]
    ] * len(replay["ends"])


def test_every_window_emits_an_asset_event_per_table_with_the_window_extra(replay):
    from airflow_cdc.model import format_ts

    records = {r.end: r for r in store().list_windows("allchanges")}
    for end in replay["ends"]:
        record = records[end]
        expected = {
            "stream": "allchanges",
            "window_start": format_ts(record.start),
            "window_end": format_ts(end),
            "low_watermark": format_ts(record.low_watermark),
            "changes": record.counts["changes"],
            "changelog_snapshot_id": record.changelog_snapshot_id,
            "target_snapshot_ids": record.target_snapshot_ids,
            "completeness": "evidence",
            "interval_start": format_ts(record.start),
            "interval_end": format_ts(end),
            "partition_key": f"{record.start:%Y-%m-%dT%H:%M:%S}",
        }
        names = ["lake.cdc.allchanges_changelog"] + [f"lake.current.{t}" for t in TABLES]
        assert asset_events(replay["runs"][end]) == {name: expected for name in names}


def test_asset_events_carry_the_snapshot_of_every_target_table(replay):
    extra = asset_events(replay["runs"][replay["ends"][-1]])["lake.current.Accounts"]
    assert set(extra["target_snapshot_ids"]) == {f"lake.current.{t}" for t in TABLES}


def test_the_asset_consumer_dag_is_queued_by_the_gate_events(replay):
    from airflow.models.asset import AssetDagRunQueue, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        queued = session.execute(
            select(AssetDagRunQueue.target_dag_id, AssetModel.name).join(
                AssetModel, AssetDagRunQueue.asset_id == AssetModel.id
            )
        ).all()
    assert ("cdc_asset_consumer", "lake.current.Accounts") in queued


def test_no_credential_appears_in_task_output_xcom_asset_extras_or_openlineage_events(replay):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    run_ids = [run.run_id for run in replay["runs"].values()]
    with create_session() as session:
        xcoms = [
            json.dumps(XComModel.deserialize_value(row), default=str)
            for row in session.scalars(select(XComModel).where(XComModel.run_id.in_(run_ids)))
        ]
    extras = [json.dumps(asset_events(run)) for run in replay["runs"].values()]
    output = replay["output"]
    # The capture did see the tasks: the gate's and the commit's log lines are there.
    assert "is complete: every partition live in the window reached its end" in output
    assert " partition(s):" in output and " records, watermark " in output
    assert len(xcoms) >= 3 * len(run_ids) and len(extras) == len(run_ids)
    # OpenLineage events: scanned when this module runs first in its process (the listener's
    # transport is read once per process; the full suite's earlier DAG tests set it up first).
    lineage = replay["openlineage"]
    # No window folder keeps the extract's source overrides (the driver read them from the
    # task's memory: airflow_cdc.spark.secrets).
    assert list((replay["base"] / "work").rglob("source-overrides.json")) == []
    for where, texts in (("task output", [output]), ("XCom", xcoms), ("Asset extras", extras),
                         ("OpenLineage events", [lineage])):
        for text in texts:
            for secret in (CANARY, "ya29.", "access_token", "BEGIN PRIVATE KEY"):
                assert secret not in text, f"{secret!r} found in {where}"


def test_spark_jobs_get_the_openlineage_parent_job_of_their_task(replay):
    # One Spark application per window: the extract task's, which applies the window too
    # (the apply task records it and starts no job of its own).
    output = replay["output"]
    parent = f"Spark job's OpenLineage parent job: {DAG_ID}.all_changes.extract (run "
    assert parent in output
    assert f"Spark job's OpenLineage parent job: {DAG_ID}.all_changes.apply (run " not in output
