"""Step 2 as an Airflow task: the extract Spark job reads the planned partitions into the
stream's changelog."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

from airflow.providers.common.compat.sdk import TaskDeferred

from airflow_cdc.metrics import report_step
from airflow_cdc.model import Window, format_ts
from airflow_cdc.operators.base import failing_at_once
from airflow_cdc.operators.spark_step import CdcSparkOperator
from airflow_cdc.operators.task_context import mirror_task_progress, run_owner, window_summary
from airflow_cdc.pipeline.apply_step import ApplySettings
from airflow_cdc.pipeline.extract_step import (
    extract_if_empty,
    extract_job_args,
    extract_skip,
    fused_apply_args,
    record_extract,
    with_rerun_hint,
)
from airflow_cdc.pipeline.secret_handover import overrides_handover


class CdcExtractOperator(CdcSparkOperator):
    """Step 2: the extract Spark job (``spark_jobs/extract.py``, the same for every source)
    reads the planned partitions into the changelog.

    The source's short-lived secrets (:meth:`~airflow_cdc.sources.base.ChangeSource.
    extract_overrides`, through its hook) reach the job as
    :mod:`airflow_cdc.pipeline.secret_handover` says. A source that is not part of
    airflow-cdc travels with the job: its top-level package is zipped into the job's
    ``--py-files``. A window already committed, or extracted by the empty-window rule, is not
    read again (:func:`~airflow_cdc.pipeline.extract_step.extract_skip`).

    :param fused_apply: the apply task's :class:`~airflow_cdc.pipeline.apply_step.ApplySettings`:
        the same Spark application then applies the window (``spark_jobs/extract.py
        --apply-config``) and the apply task only records it. Saves one Spark application
        per window; ``bench/window.py`` shows it. None: the apply task runs its own job.
    :param empty_window_probe_limit: a window of a source that can prove it empty
        (:mod:`airflow_cdc.pipeline.empty_window`) is read here first when the previous
        window recorded at most this many changes (-1: never); an empty one starts no Spark
        (``bench/window.py``'s empty window).

    The other parameters are :class:`~airflow_cdc.operators.spark_step.CdcSparkOperator`'s.
    """

    def __init__(
        self,
        *,
        fused_apply: ApplySettings | None = None,
        empty_window_probe_limit: int = -1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.fused_apply = fused_apply
        self.empty_window_probe_limit = int(empty_window_probe_limit)
        self._resolved: dict = {}

    def source_overrides(self, context) -> dict:
        """The source's short-lived secrets for this run (kept for the lineage inputs)."""
        source = self.change_source()
        self._resolved = source.extract_overrides(self.source_hook(source))
        return self._resolved

    @contextmanager
    def _overrides_file(self, context, folder):
        """The path the job reads the source overrides from, or None without any
        (:func:`~airflow_cdc.pipeline.secret_handover.overrides_handover`): a driver on this
        machine reads a memory file of this process, a driver elsewhere a 0600 file in the
        window folder, kept while the task waits in the triggerer."""
        from airflow_cdc.spark.secrets import process_files_supported, process_secret_file

        overrides = self.source_overrides(context)
        resumed = self._resumed is not None
        local = (bool(overrides) and not resumed and process_files_supported()
                 and self.runner().driver_is_local)
        with overrides_handover(overrides, folder, resumed=resumed,
                                in_process=process_secret_file if local else None,
                                kept_on=(TaskDeferred,)) as path:
            yield path

    def source_datasets(self) -> list:
        """OpenLineage inputs: what the source names as read (its stream, bucket, tables)."""
        from airflow_cdc.assets import source_datasets

        return source_datasets(self.change_source().lineage_inputs(self._resolved))

    def source_py_files(self) -> list[str]:
        """The source's own code when Spark must be given it: its package zipped, or its
        module file (see :func:`airflow_cdc.sources.registry.source_package`)."""
        import importlib.util

        from airflow_cdc.sources.registry import source_package
        from airflow_cdc.spark.packaging import build_py_files

        top = source_package(self.source_spec)
        if top is None:
            return []
        found = importlib.util.find_spec(top)
        if found is not None and not found.submodule_search_locations and found.origin:
            return [found.origin]  # a single module: spark-submit takes the .py file itself
        return [str(build_py_files([top]))]

    def get_openlineage_facets_on_complete(self, task_instance):
        """Lineage: the source stream in, the stream's Iceberg changelog out."""
        from airflow_cdc.assets import operator_lineage

        return operator_lineage(self.source_datasets(), self.changelog_dataset())

    def execute(self, context) -> dict:
        """Skip a window read before, try the empty-window rule, else run the extract job."""
        config = self.stream_config
        store = self.state_store()
        covered = self.covered(context, store)
        if covered is not None:
            return covered
        window = self.window(context)
        owner = run_owner(context)
        folder = config.window_dir(window)
        skip = extract_skip(store, window, folder)
        if skip is not None:
            return self._skipped(window, skip)
        store.renew_lease(window, owner, self.lease_seconds)
        counts = extract_if_empty(
            store, config, window, owner, source=self.change_source(),
            probe_limit=self.empty_window_probe_limit,
            overrides=lambda: self.source_overrides(context), lease_seconds=self.lease_seconds,
            log=self.log,
        )
        if counts is not None:
            summary = {"window_id": window.window_id, "changelog_snapshot_id": None,
                       "skipped": False, "empty": True, **counts}
        else:
            self._run_extract_job(context, store, window, owner, folder)
            with failing_at_once():
                summary = record_extract(store, window, owner, folder)
        report_step(context, store, window, "extract")
        mirror_task_progress(context, "extract", summary)
        return summary

    def _skipped(self, window: Window, skip) -> dict:
        if skip.reason == "committed":
            self.log.info("window %s is already %s: nothing to extract", window.window_id,
                          skip.record.state.value)
            return {**window_summary(skip.record), "skipped": True}
        self.log.info("window %s was proven empty before: nothing to extract", window.window_id)
        return {"window_id": window.window_id, "changelog_snapshot_id": None, "skipped": True}

    def _fused_job_config(self, window: Window):
        """What builds the fused apply's job config, or None without a fused apply."""
        if self.fused_apply is None:
            return None
        return lambda: self.fused_apply.job_config(self.stream_config, self.iceberg_catalog.name,
                                                   window)

    def _run_extract_job(self, context, store, window: Window, owner: str, folder) -> None:
        """The extract Spark job; a failure says what the window keeps and how to re-run it."""
        from airflow_cdc.spark.job import SparkJobError, iceberg_job_spec

        args = extract_job_args(self.stream_config, window, folder)
        args += fused_apply_args(store, window, folder, self._fused_job_config(window), log=self.log)
        with self._overrides_file(context, folder) as overrides_path:
            if overrides_path is not None:
                args += ["--source-overrides", overrides_path]
            spec = iceberg_job_spec(
                "extract",
                self.iceberg_catalog,
                args,
                name=f"cdc-extract-{window.stream_id}-{format_ts(window.start)}",
                conf=self.job_conf(context),
                py_files=self.source_py_files(),
            )
            try:
                self.run_job(spec, store, window, owner)
            except SparkJobError as error:
                raise with_rerun_hint(error, window) from None
