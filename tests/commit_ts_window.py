"""One Spanner commit-timestamp window run the way a split deployment runs it: plan and commit
on the Airflow side, extract and apply as spark-submit jobs from another folder, the two
sides sharing only the stream's work root (and the catalog). Tests that move the work root or
the warehouse (a ``gs://`` bucket on an emulator) call :func:`run_split_window`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

START = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)


@dataclass
class SplitWindow:
    config: object  # StreamConfig
    folder: object  # the window's folder under the work root
    applied: dict  # the apply job's result
    airflow_side: Path
    spark_side: Path


def run_split_window(tmp_path: Path, monkeypatch, *, stream: str, catalog, work_root_uri: str,
                     target_namespace: str, env: dict) -> SplitWindow:
    """Three orders committed in a 10-minute window from :data:`START`, read into
    ``target_namespace`` through ``catalog``; the plan, outcome and job files under
    ``work_root_uri``; the Spark jobs get ``env``."""
    from airflow_cdc_emulators.spanner import (
        COMMIT_TIMESTAMP,
        COMMIT_TIMESTAMP_SCHEMA,
        SpannerEmulator,
        VersionedDatabase,
        mutations,
    )
    from airflow_cdc import work_root
    from airflow_cdc.model import Window
    from airflow_cdc.pipeline.protocol import StreamConfig, commit_window, plan_window
    from airflow_cdc.sources.registry import build_source
    from airflow_cdc.sources.spanner.reader import SpannerConnection
    from airflow_cdc.spark.job import iceberg_job_spec
    from airflow_cdc.spark.runners import LocalSparkRunner
    from airflow_cdc.state import StateStore

    window = Window(stream, START, START + timedelta(minutes=10))
    tables = VersionedDatabase(COMMIT_TIMESTAMP_SCHEMA, created_at=START, now=window.end)
    for order_id in (1, 2, 3):
        tables.commit([mutations.insert("Orders", ("OrderId", "CustomerName", "LastUpdateTime"),
                                        [(order_id, f"o{order_id}", COMMIT_TIMESTAMP)])],
                      at=START + timedelta(minutes=order_id))
    airflow_side, spark_side = tmp_path / "airflow-side", tmp_path / "spark-side"
    airflow_side.mkdir()
    spark_side.mkdir()
    with SpannerEmulator(tables=tables) as emulator:
        monkeypatch.chdir(airflow_side)
        store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
        store.migrate()
        config = StreamConfig.for_source("spanner_commit_ts", stream, {
            "connection": {"project": "p", "instance": "i", "database": "shop"},
            "tables": {"Orders": "LastUpdateTime"},
            "settings": {"safety_margin_seconds": 0},
        }, namespace=stream, work_root=work_root_uri)
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
        monkeypatch.chdir(spark_side)
        runner.run(iceberg_job_spec("extract", catalog, [
            "--plan", str(config.plan_path(window)), "--outcome", str(config.outcome_path(window)),
            "--result", str(folder / "extract-result.json"),
            "--source-overrides", str(folder / "source-overrides.json")],
            name=f"{stream}-extract", env_vars=env))
        monkeypatch.chdir(airflow_side)
        extracted = json.loads((folder / "extract-result.json").read_text())
        store.mark_extracted(window, "run", int(extracted["snapshot_id"]))
        commit_window(store, config, window, "run")
        work_root.write_text(folder / "apply-job.json", json.dumps({
            "catalog": catalog.name, "stream": stream, "window_id": window.window_id,
            "changelog_table": config.changelog_table, "targets": {"namespace": target_namespace},
            "catalog_conf": catalog.spark_conf()}))
        monkeypatch.chdir(spark_side)
        runner.run(iceberg_job_spec("apply_job", catalog, [
            "--job-config", str(folder / "apply-job.json"),
            "--result", str(folder / "apply-result.json")], name=f"{stream}-apply",
            env_vars=env))
        applied = json.loads((folder / "apply-result.json").read_text())
    return SplitWindow(config, folder, applied, airflow_side, spark_side)
