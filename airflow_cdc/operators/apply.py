"""Step 4 as an Airflow task: fold the window's changelog rows into current-state Iceberg
tables."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from airflow_cdc.metrics import report_step
from airflow_cdc.model import Window, WindowState, format_ts
from airflow_cdc.operators.base import failing_at_once
from airflow_cdc.operators.spark_step import CdcSparkOperator
from airflow_cdc.operators.task_context import mirror_task_progress, run_owner, window_summary
from airflow_cdc.pipeline.apply_step import (
    DEFAULT_TOMBSTONE_HORIZON_SECONDS,
    ApplySettings,
    apply_counts,
    dead_letter_failure,
    record_apply,
    recorded_apply_result,
    window_to_apply,
)


class CdcApplyOperator(CdcSparkOperator):
    """Step 4: fold the window's changelog rows into current-state Iceberg tables.

    Windows apply in order: the job runs only once every earlier window of the stream is
    applied (:func:`~airflow_cdc.pipeline.apply_step.window_to_apply`). An empty window, or
    one the extract's Spark application applied already (a fused apply), runs no job.

    :param targets: the apply job's ``targets`` object: ``namespace`` for target tables,
        ``mapping`` from source table to target name, ``history`` (SCD type 2, off by
        default), ``write_mode`` (``copy-on-write``, the default, or ``merge-on-read``: a
        window's changes as delete files beside the rows, for small windows against large
        targets; apply compacts a table once it holds ``compact_delete_files`` delete files,
        default 32, 0 never). Templated.
    :param on_dead_letter: ``fail`` (the default: the window fails and names the bad rows) or
        ``continue``.
    :param tombstone_horizon_seconds: how long deletes are remembered (I3).

    The other parameters are :class:`~airflow_cdc.operators.spark_step.CdcSparkOperator`'s.
    """

    template_fields = (*CdcSparkOperator.template_fields, "targets")
    template_fields_renderers = {**CdcSparkOperator.template_fields_renderers, "targets": "json"}

    def __init__(
        self,
        *,
        targets: Mapping[str, Any] | None = None,
        on_dead_letter: str = "fail",
        tombstone_horizon_seconds: int = DEFAULT_TOMBSTONE_HORIZON_SECONDS,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.targets = dict(targets or {})
        self.on_dead_letter = on_dead_letter
        self.tombstone_horizon_seconds = int(tombstone_horizon_seconds)
        self._applied_tables: list[str] = []

    @property
    def settings(self) -> ApplySettings:
        return ApplySettings(self.targets, self.on_dead_letter, self.tombstone_horizon_seconds)

    def apply_config(self, window: Window) -> dict:
        return self.settings.job_config(self.stream_config, self.iceberg_catalog.name, window)

    def execute(self, context) -> dict:
        """Apply the window (or record what is already applied); its summary."""
        store = self.state_store()
        covered = self.covered(context, store)
        if covered is not None:
            return covered
        window = self.window(context)
        owner = run_owner(context)
        with failing_at_once():
            record = window_to_apply(store, window)
        if record.state is WindowState.COMPLETE:
            self.log.info("window %s is already COMPLETE: nothing to apply", window.window_id)
            return {**window_summary(record), "skipped": True}
        store.renew_lease(window, owner, self.lease_seconds)
        folder = self.stream_config.window_dir(window)
        result = (recorded_apply_result(record, window, folder, self.log)
                  or self._run_apply_job(context, store, window, owner, folder))
        record, self._applied_tables = record_apply(store, window, owner, result, log=self.log)
        report_step(context, store, window, "apply", record,
                    {"dead_letter_rows": result.get("dead_letter_rows", 0)})
        summary = {**window_summary(record), **apply_counts(result)}
        mirror_task_progress(context, "apply", summary)
        return summary

    def _run_apply_job(self, context, store, window: Window, owner: str, folder) -> dict:
        """The apply Spark job (``spark_jobs/apply_job.py``); its result."""
        from airflow_cdc.pipeline.files import write_private
        from airflow_cdc.spark.job import SparkJobError, iceberg_job_spec

        config_path, result_path = folder / "apply.json", folder / "apply-result.json"
        write_private(config_path, json.dumps(self.apply_config(window), indent=1))
        spec = iceberg_job_spec(
            "apply_job",
            self.iceberg_catalog,
            ["--job-config", str(config_path), "--result", str(result_path)],
            name=f"cdc-apply-{window.stream_id}-{format_ts(window.start)}",
            conf=self.job_conf(context),
        )
        try:
            self.run_job(spec, store, window, owner)
        except SparkJobError as error:
            failure = dead_letter_failure(result_path, window, error)
            if failure is not None:  # the dead-letter policy: a retry cannot help
                with failing_at_once():
                    raise failure from None
            raise  # a lost driver, a failed commit: the task's retries run the job again (I1)
        return json.loads(result_path.read_text())

    def get_openlineage_facets_on_complete(self, task_instance):
        """Lineage: the changelog in, the target tables apply committed out.

        Targets are known once apply ran (a change stream may cover any table); before that,
        or for a skipped re-run, the declared ``targets.mapping`` is all there is.
        """
        from airflow_cdc.assets import iceberg_datasets, operator_lineage, target_tables

        tables = self._applied_tables or [
            f"{ns}.{name}" for ns, name in target_tables(self.targets, None)
        ]
        outputs = iceberg_datasets(
            self.iceberg_catalog, tables, self.targets.get("namespace", "current")
        )
        return operator_lineage(self.changelog_dataset(), outputs)
