"""The base of the protocol steps that run a Spark job: the runner, keeping the window's lease
while the job runs, waiting for a Dataproc job in the triggerer, and ``on_kill``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from airflow_cdc.model import Window, format_ts
from airflow_cdc.operators.base import CdcWindowOperator, failing_at_once
from airflow_cdc.operators.task_context import default_deferrable
from airflow_cdc.pipeline.lease import kept_lease
from airflow_cdc.pipeline.step_errors import JobWaitError, check_resumed_job


def check_runner_choice(task_id, spark_conn_id, dataproc, warm_driver_idle_seconds) -> None:
    """Refuse runner arguments that contradict each other, naming the task."""
    if spark_conn_id and dataproc is not None:
        raise ValueError(f"task {task_id!r}: give spark_conn_id or dataproc, not both")
    if warm_driver_idle_seconds and (spark_conn_id or dataproc is not None):
        raise ValueError(f"task {task_id!r}: warm_driver_idle_seconds keeps a "
                         f"local Spark driver warm; it does not apply with spark_conn_id or "
                         f"dataproc (leave it unset there)")
    if warm_driver_idle_seconds is not None and warm_driver_idle_seconds < 0:
        raise ValueError(f"task {task_id!r}: warm_driver_idle_seconds="
                         f"{warm_driver_idle_seconds!r} is negative: give seconds, or 0/None "
                         f"for a spark-submit per job")


class CdcSparkOperator(CdcWindowOperator):
    """A protocol step that runs a Spark job through a runner.

    :param spark_conn_id: a Spark connection id: the job runs through the Spark provider's
        SparkSubmitHook (standalone, YARN, k8s). None (the default) runs
        ``spark-submit --master local[*]`` on the worker.
    :param spark_conf: Spark properties for the job.
    :param dataproc: :class:`~airflow_cdc.spark.dataproc.DataprocCluster` or
        :class:`~airflow_cdc.spark.dataproc.DataprocServerless`: the job is submitted to
        Dataproc, the files it needs staged under the work root (a ``gs://`` URI).
    :param deferrable: wait for a Dataproc job in the triggerer
        (:class:`~airflow_cdc.triggers.dataproc.CdcDataprocRunTrigger`, which keeps the
        window's lease); default ``[operators] default_deferrable``. The task then resumes in
        :meth:`execute_complete`, which runs ``execute`` again (its steps before the job are
        idempotent) and takes the job's final state instead of submitting it again.
    :param warm_driver_idle_seconds: local Spark only: run the job in a warm driver on the
        worker (:class:`~airflow_cdc.spark.warm.WarmSparkRunner`), started by the first job
        and kept that many seconds after the last (None: a spark-submit per job).
    """

    def __init__(
        self,
        *,
        spark_conn_id: str | None = None,
        spark_conf: Mapping[str, str] | None = None,
        dataproc: Any = None,
        deferrable: bool | None = None,
        warm_driver_idle_seconds: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_runner_choice(kwargs.get("task_id"), spark_conn_id, dataproc,
                            warm_driver_idle_seconds)
        self.warm_driver_idle_seconds = warm_driver_idle_seconds or None
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.dataproc = dataproc
        self.deferrable = default_deferrable() if deferrable is None else bool(deferrable)
        self._runner = None
        self._resumed: dict | None = None

    def runner(self):
        """The job's runner: Dataproc, a Spark connection, a warm local driver, or local Spark."""
        from airflow_cdc.spark.runners import LocalSparkRunner, SparkSubmitHookRunner

        if self.dataproc is not None:
            from airflow_cdc.hooks.dataproc import CdcDataprocHook

            hook = CdcDataprocHook(gcp_conn_id=self.dataproc.gcp_conn_id,
                                   impersonation_chain=self.dataproc.impersonation_chain)
            project = self.dataproc.project_id or hook.project_id
            if not project:
                raise AirflowFailException(
                    f"Dataproc runner of {self.task_id!r} has no project: give "
                    f"project_id=... or a project in the connection {self.dataproc.gcp_conn_id!r}")
            return self.dataproc.runner(hook, project, self.stream_config.work_root,
                                        logger=self.log)
        if self.spark_conn_id:
            return SparkSubmitHookRunner(conn_id=self.spark_conn_id)
        if self.warm_driver_idle_seconds:
            from airflow_cdc.spark.warm import WarmSparkRunner

            return WarmSparkRunner(master="local[*]", idle_seconds=self.warm_driver_idle_seconds)
        return LocalSparkRunner(master="local[*]")

    def run_job(self, spec, store=None, window: Window | None = None, owner: str | None = None) -> None:
        """Run the job; with ``store``, ``window`` and ``owner`` the window's lease is kept
        meanwhile. A deferrable Dataproc job defers here (TaskDeferred) after its submission;
        a task resumed after that wait takes the job's final state instead."""
        if self._resumed is not None:
            return self._finish_resumed(spec)
        self._runner = self.runner()
        try:
            if self.deferrable and hasattr(self._runner, "submit"):
                self._defer_job(self._runner.submit(spec), window, owner)
            if store is None:
                self._runner.run(spec)
            else:
                with kept_lease(store, window, owner, self.lease_seconds, log=self.log):
                    self._runner.run(spec)
        finally:
            self._runner = None

    def _defer_job(self, run, window: Window | None, owner: str | None) -> None:
        from airflow_cdc.triggers.dataproc import CdcDataprocRunTrigger

        lease = None if window is None else {
            "cdc_state_conn_id": self.cdc_state_conn_id, "stream_id": window.stream_id,
            "window_start": format_ts(window.start), "window_end": format_ts(window.end),
            "owner": owner, "lease_seconds": self.lease_seconds,
        }
        self.defer(
            trigger=CdcDataprocRunTrigger(
                run=run.to_dict(), gcp_conn_id=self.dataproc.gcp_conn_id,
                impersonation_chain=self.dataproc.impersonation_chain,
                poll_interval=self.dataproc.poll_seconds, lease=lease),
            method_name="execute_complete",
        )

    def execute_complete(self, context, event: dict | None = None):
        """Resume after a deferred Dataproc job: ``execute`` again, taking its final state."""
        self._resumed = dict(event or {"status": "error", "message": "no event"})
        return self.execute(context)

    # A task deferred under this name resumes into the same method.
    execute_after_job = execute_complete

    def _finish_resumed(self, spec) -> None:
        from airflow_cdc.spark.dataproc import DataprocRun, RunState

        event, self._resumed = self._resumed, None
        run = DataprocRun.from_dict(event.get("run") or {})
        try:
            with failing_at_once():
                check_resumed_job(event, run.name, f"{run.kind} {run.resource_id}", spec.name)
        except JobWaitError as error:
            raise AirflowException(str(error)) from None
        self.runner().finish(run, RunState(event["state"], True, bool(event["succeeded"]),
                                           event.get("details") or "",
                                           event.get("driver_output_uri")))

    def on_kill(self) -> None:
        """Kill the running Spark job, if any (a job in the triggerer's wait is not this
        task's to kill: the trigger follows it)."""
        if self._runner is not None:
            self._runner.kill()

    def job_conf(self, context) -> dict:
        """``spark_conf`` plus the OpenLineage parent-job properties of this task."""
        from airflow_cdc.assets import inject_parent_job

        conf = inject_parent_job(self.spark_conf, context)
        if "spark.openlineage.parentJobName" in conf:
            self.log.info(
                "Spark job's OpenLineage parent job: %s (run %s)",
                conf["spark.openlineage.parentJobName"], conf.get("spark.openlineage.parentRunId"),
            )
        return conf

    def changelog_dataset(self):
        from airflow_cdc.assets import iceberg_datasets

        return iceberg_datasets(self.iceberg_catalog, [self.stream_config.changelog_table])
