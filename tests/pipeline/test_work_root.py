"""The work root as a URI: the Airflow side and the Spark side share nothing but ``gs://...``.

The hand-over files (plan, source overrides, outcome, results, the apply job's file) live on a
local GCS emulator (``gcp-storage-emulator``, reached through ``STORAGE_EMULATOR_HOST`` like
the real service); the Spark jobs run as their own ``spark-submit`` processes in a folder of
their own and read and write those files through the URI only.
"""

from __future__ import annotations

import json
import os
import stat
from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc import work_root
from airflow_cdc.work_root import work_path

BUCKET = "cdc-work"


@pytest.fixture(scope="module")
def gcs():
    from demo.cluster import GcsEmulator

    patch = pytest.MonkeyPatch()
    with GcsEmulator(BUCKET) as server:
        patch.setenv("STORAGE_EMULATOR_HOST", server.url)
        yield server.url
    patch.undo()


def test_a_folder_work_root_gives_paths_and_private_files_are_owner_only(tmp_path):
    path = work_path(str(tmp_path), "stream", "window", "plan.json")

    work_root.write_text(path, "{}", private=True)

    assert path == tmp_path / "stream" / "window" / "plan.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert work_path(f"file://{tmp_path}", "x") == tmp_path / "x"


def test_a_gs_work_root_reads_writes_and_removes_objects_on_the_emulator(gcs):
    path = work_path(f"gs://{BUCKET}/roots/a", "stream", "plan.json")

    work_root.write_text(path, '{"a": 1}', private=True)
    text, there = work_root.read_text(str(path)), path.exists()
    work_root.remove(path)

    assert str(path) == f"gs://{BUCKET}/roots/a/stream/plan.json"
    assert (text, there, path.exists()) == ('{"a": 1}', True, False)


@pytest.mark.long  # make test-long (CI runs it)
def test_a_pipeline_whose_sides_share_only_the_gs_work_root_applies_its_window(
        gcs, tmp_path, monkeypatch):
    """Plan and commit here; extract and apply as spark-submit jobs started in another folder;
    the only thing both see is the gs:// work root (the warehouse is the catalog's)."""
    from airflow_cdc_emulators.spanner import (
        COMMIT_TIMESTAMP,
        COMMIT_TIMESTAMP_SCHEMA,
        SpannerEmulator,
        VersionedDatabase,
        mutations,
    )
    from airflow_cdc.model import Window
    from airflow_cdc.pipeline.protocol import StreamConfig, commit_window, plan_window
    from airflow_cdc.sources.registry import build_source
    from airflow_cdc.sources.spanner.reader import SpannerConnection
    from airflow_cdc.spark.iceberg import IcebergCatalog
    from airflow_cdc.spark.job import iceberg_job_spec
    from airflow_cdc.spark.runners import LocalSparkRunner
    from airflow_cdc.state import StateStore

    start = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
    window = Window("shared_root", start, start + timedelta(minutes=10))
    tables = VersionedDatabase(COMMIT_TIMESTAMP_SCHEMA, created_at=start, now=window.end)
    for order_id in (1, 2, 3):
        tables.commit([mutations.insert("Orders", ("OrderId", "CustomerName", "LastUpdateTime"),
                                        [(order_id, f"o{order_id}", COMMIT_TIMESTAMP)])],
                      at=start + timedelta(minutes=order_id))
    root = f"gs://{BUCKET}/cdc-work"
    airflow_side, spark_side = tmp_path / "airflow-side", tmp_path / "spark-side"
    airflow_side.mkdir()
    spark_side.mkdir()
    catalog = IcebergCatalog(name="lake", warehouse=str(tmp_path / "warehouse"))
    with SpannerEmulator(tables=tables) as emulator:
        monkeypatch.chdir(airflow_side)
        store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
        store.migrate()
        config = StreamConfig.for_source("spanner_commit_ts", "shared_root", {
            "connection": {"project": "p", "instance": "i", "database": "shop"},
            "tables": {"Orders": "LastUpdateTime"},
            "settings": {"safety_margin_seconds": 0},
        }, namespace="shared_root", work_root=root)
        source = build_source(config.source_spec)

        class Databases:  # the plan's view of the database, as the Spanner hook gives it
            def get_database(self, instance, database, project=None):
                return SpannerConnection(project="p", instance=instance, database=database,
                                         emulator_host=emulator.emulator_host).open_database()

            def reseed_requests(self, stream_id):
                return []

        plan_window(store, config, window, "run", 600, source.initial_positions(window), "lake",
                    plan_options=lambda kept, positions: source.plan_options(
                        kept, window.end, Databases(), positions, window=window))
        folder = config.window_dir(window)
        work_root.write_text(folder / "source-overrides.json", json.dumps(
            {"connection": {"emulator_host": emulator.emulator_host}}), private=True)
        runner = LocalSparkRunner(master="local[1]")
        env = {"STORAGE_EMULATOR_HOST": gcs}
        monkeypatch.chdir(spark_side)
        runner.run(iceberg_job_spec("extract", catalog, [
            "--plan", str(config.plan_path(window)), "--outcome", str(config.outcome_path(window)),
            "--result", str(folder / "extract-result.json"),
            "--source-overrides", str(folder / "source-overrides.json")],
            name="shared-root-extract", env_vars=env))
        monkeypatch.chdir(airflow_side)
        extracted = json.loads((folder / "extract-result.json").read_text())
        store.mark_extracted(window, "run", int(extracted["snapshot_id"]))
        commit_window(store, config, window, "run")
        work_root.write_text(folder / "apply-job.json", json.dumps({
            "catalog": "lake", "stream": "shared_root", "window_id": window.window_id,
            "changelog_table": config.changelog_table, "targets": {"namespace": "shared_t"},
            "catalog_conf": catalog.spark_conf()}))
        monkeypatch.chdir(spark_side)
        runner.run(iceberg_job_spec("apply_job", catalog, [
            "--job-config", str(folder / "apply-job.json"),
            "--result", str(folder / "apply-result.json")], name="shared-root-apply",
            env_vars=env))
        applied = json.loads((folder / "apply-result.json").read_text())

    from demo.compare import read_iceberg_rows

    rows = read_iceberg_rows(tmp_path / "warehouse" / "shared_t" / "Orders")
    assert str(folder).startswith(root)
    assert sorted(r["OrderId"] for r in rows) == [1, 2, 3]
    assert applied["tables"][0]["upserts"] == 3
    assert list(airflow_side.iterdir()) == [] and [
        p.name for p in spark_side.iterdir() if p.suffix == ".json"] == []
    assert {p.name for p in folder.iterdir()} >= {
        "plan.json", "outcome.json", "extract-result.json", "apply-job.json", "apply-result.json"}
