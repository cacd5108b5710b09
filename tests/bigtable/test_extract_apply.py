"""The Bigtable source through the extract and apply Spark jobs (in this session's Spark),
the state store and Iceberg: exactly once across crashes and re-runs (I1)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc_emulators.bigtable import BigtableEmulator, generate_history
from airflow_cdc.model import Window
from airflow_cdc.pipeline.protocol import StreamConfig, commit_window, plan_window
from airflow_cdc.sources.registry import build_source
from airflow_cdc.state import StateStore
from airflow_cdc.spark_jobs import apply_job
from airflow_cdc.spark_jobs.extract import extract_window

START = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
WINDOW = timedelta(minutes=20)


@pytest.fixture(scope="module")
def emulator():
    history = generate_history(seed=5, start=START, hours=1.0, commits_per_second=0.2)
    with BigtableEmulator(history, now=START + timedelta(hours=1, minutes=5)) as running:
        yield running


@pytest.fixture
def pipeline(emulator, tmp_path):
    return new_pipeline(emulator, tmp_path)


@pytest.fixture(scope="module")
def extracted(spark, emulator, tmp_path_factory):
    """One stream with its three windows extracted and committed, for tests that apply them
    into targets of their own (``apply(..., namespace=)``)."""
    store, config = new_pipeline(emulator, tmp_path_factory.mktemp("extracted"))
    for window in windows(config.stream_id):
        extract(spark, store, config, window)
        commit_window(store, config, window, "run")
    return config


def new_pipeline(emulator, tmp_path):
    stream_id = f"bt_{uuid.uuid4().hex[:8]}"
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.migrate()
    config = StreamConfig.for_source("bigtable_change_stream", stream_id, {
        "project": "demo-project", "instance": "demo-instance", "table": "events",
        "app_profile": "default", "settings": {"heartbeat_seconds": 0.2},
    }, namespace=stream_id, work_root=str(tmp_path / "work"))
    config.source_spec["connection"] = {"emulator_host": emulator.emulator_host}
    return store, config


def windows(stream_id: str) -> list[Window]:
    return [Window(stream_id, START + WINDOW * i, START + WINDOW * (i + 1)) for i in range(3)]


def extract(spark, store, config, window):
    plan = plan_window(store, config, window, "run", 600,
                       build_source(config.source_spec).initial_positions(window), "lake")
    result = extract_window(spark, plan, str(config.outcome_path(window)))
    store.mark_extracted(window, "run", result["snapshot_id"])
    return result


def apply(spark, config, window, tmp_path, namespace: str | None = None, **targets) -> dict:
    job = tmp_path / f"apply-{uuid.uuid4().hex[:6]}.json"
    result = tmp_path / f"{job.stem}-result.json"
    job.write_text(json.dumps({
        "catalog": "lake", "stream": config.stream_id, "window_id": window.window_id,
        "changelog_table": config.changelog_table,
        "targets": {"namespace": namespace or f"{config.stream_id}_t", **targets}, "source": config.source_spec,
    }))
    assert apply_job.main(["--job-config", str(job), "--result", str(result)], spark=spark) == 0
    return json.loads(result.read_text())


def mutation_ids(history, end: datetime) -> set[str]:
    micros = int(end.timestamp() * 1_000_000)
    return {f"{c.row_key.hex()}/{c.commit_us}/{c.tiebreaker}/{c.cluster or '-'}/{i}"
            for c in history.commits if c.commit_us < micros for i in range(len(c.mutations))}


def cells(spark, config, namespace: str | None = None) -> dict:
    rows = spark.table(f"lake.{namespace or config.stream_id + '_t'}.events_cells").collect()
    return {(bytes(r.row_key), r.family, bytes(r.qualifier), r.cell_ts): bytes(r.value)
            for r in rows}


def true_cells(emulator, at) -> dict:
    return {(row, family, qualifier, ts): value
            for row, families in emulator.true_state(at).items()
            for family, columns in families.items()
            for qualifier, versions in columns.items() for ts, value in versions.items()}


def test_a_crash_between_the_changelog_commit_and_the_state_commit_loses_and_repeats_nothing(
        spark, pipeline, emulator):
    store, config = pipeline
    first, second, third = windows(config.stream_id)
    table = f"lake.{config.changelog_table}"
    extract(spark, store, config, first)
    commit_window(store, config, first, "run")
    extract(spark, store, config, second)
    config.outcome_path(second).unlink()  # the run dies before the state commit, files gone

    rerun = extract(spark, store, config, second)
    commit_window(store, config, second, "run")
    extract(spark, store, config, third)  # continues from the tokens the re-run recorded
    commit_window(store, config, third, "run")

    ids = [r.event_id for r in spark.table(table).select("event_id").collect()]
    assert rerun["skipped"] is True
    assert len(ids) == len(set(ids))
    assert set(ids) == mutation_ids(emulator.history, third.end)


def test_cells_and_latest_equal_the_true_state_and_a_second_apply_changes_nothing(
        spark, pipeline, emulator, tmp_path):
    store, config = pipeline
    for window in windows(config.stream_id):
        extract(spark, store, config, window)
        commit_window(store, config, window, "run")
        apply(spark, config, window, tmp_path)
    last = windows(config.stream_id)[-1]
    truth = true_cells(emulator, last.end)
    latest = {(bytes(r.row_key), r.family, bytes(r.qualifier)): (r.cell_ts, bytes(r.value))
              for r in spark.table(f"lake.{config.stream_id}_t.events_latest").collect()}
    newest: dict = {}
    for (row, family, qualifier, ts), value in truth.items():
        if (row, family, qualifier) not in newest or ts > newest[(row, family, qualifier)][0]:
            newest[(row, family, qualifier)] = (ts, value)
    snapshots = spark.sql(
        f"SELECT snapshot_id FROM lake.{config.stream_id}_t.events_cells.snapshots").count()

    again = apply(spark, config, last, tmp_path)

    assert cells(spark, config) == truth
    assert latest == newest
    assert again["tables"][0]["already_applied"] is True
    assert spark.sql(
        f"SELECT snapshot_id FROM lake.{config.stream_id}_t.events_cells.snapshots").count() == snapshots


def table_state(spark, table: str) -> tuple[str | None, int]:
    """The table's merge mode and the delete files its current snapshot holds."""
    properties = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
    summary = spark.sql(f"SELECT summary FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]
    return properties.get("write.merge.mode"), int(summary.get("total-delete-files", 0))


@pytest.mark.long
def test_merge_on_read_tables_hold_the_true_state_with_their_changes_in_delete_files(
        spark, extracted, emulator, tmp_path):
    config, namespace = extracted, f"mor_{uuid.uuid4().hex[:6]}"
    for window in windows(config.stream_id):
        apply(spark, config, window, tmp_path, namespace, write_mode="merge-on-read", compact_delete_files=0)

    mode, deletes = table_state(spark, f"lake.{namespace}.events_latest")

    assert cells(spark, config, namespace) == true_cells(emulator, windows(config.stream_id)[-1].end)
    assert mode == "merge-on-read"
    assert deletes > 0
    assert table_state(spark, f"lake.{namespace}.events_cells")[0] == "merge-on-read"


# make test-long: compaction itself is covered by tests/apply/test_write_mode.py; this is its
# run on Bigtable's two targets (45 s of make test's time on a slow machine)
@pytest.mark.long
def test_merge_on_read_tables_holding_delete_files_are_compacted_after_the_windows_commits(
        spark, extracted, emulator, tmp_path):
    config, namespace = extracted, f"mor_{uuid.uuid4().hex[:6]}"
    results = [apply(spark, config, window, tmp_path, namespace, write_mode="merge-on-read", compact_delete_files=1)
               for window in windows(config.stream_id)]
    latest = f"lake.{namespace}.events_latest"

    compacted = {t for r in results for t in r["tables"][0]["compacted_tables"]}

    assert latest in compacted
    assert table_state(spark, latest)[1] == 0
    assert all(r["tables"][0]["compaction_errors"] == [] for r in results)
    assert cells(spark, config, namespace) == true_cells(emulator, windows(config.stream_id)[-1].end)
