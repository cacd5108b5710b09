"""The base of the window protocol's operators: the stream, its source, the state store, the
Iceberg catalog and the work folder, as one task of one DAG run sees them.

Each DAG run owns one interval ``[data_interval_start, data_interval_end)``: the window planned
from it (which a catch-up window extends past the interval), or a record pointing at the
catch-up window of an earlier run that read it (:mod:`airflow_cdc.pipeline.catchup`). The
lease owner is the DAG run (I6). The protocol's decisions live in :mod:`airflow_cdc.pipeline`; an operator
asks Airflow what only Airflow knows and hands it to them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from airflow.providers.common.compat.sdk import AirflowFailException, BaseOperator

from airflow_cdc.hooks.state import DEFAULT_CONN_ID, CdcStateHook
from airflow_cdc.model import Window
from airflow_cdc.operators.task_context import (
    FINISHED_RUN_STATES,
    GONE_RUN,
    holder_run_state,
    window_from_context,
)
from airflow_cdc.pipeline.catchup import RunWindow, covered_summary, run_window
from airflow_cdc.pipeline.lease import DEFAULT_LEASE_SECONDS
from airflow_cdc.pipeline.plan_step import plan_or_take_over
from airflow_cdc.pipeline.protocol import StreamConfig
from airflow_cdc.pipeline.step_errors import StepFailure
from airflow_cdc.pipeline.work_folder import with_work_root
from airflow_cdc.spark.iceberg import IcebergCatalog


@contextmanager
def failing_at_once():
    """A step's :class:`~airflow_cdc.pipeline.step_errors.StepFailure` as Airflow's
    AirflowFailException: no retry can mend it, so the task fails without its retries."""
    try:
        yield
    except StepFailure as failure:
        raise AirflowFailException(str(failure)) from failure


class CdcWindowOperator(BaseOperator):
    """Base of the protocol's operators (plan, extract, commit, apply).

    :param stream: the stream (:class:`~airflow_cdc.pipeline.protocol.StreamConfig`); its spec
        names the source (:mod:`airflow_cdc.sources.registry`).
    :param source_conn: the arguments of the source's Airflow hook (e.g. ``gcp_conn_id``).
    :param catalog: the Iceberg catalog (:class:`~airflow_cdc.spark.iceberg.IcebergCatalog`);
        default: the local Hadoop catalog.
    :param iceberg_conn_id: an ``iceberg_catalog`` connection instead of ``catalog``
        (:mod:`airflow_cdc.hooks.iceberg_catalog`, read when the task runs).
    :param cdc_state_conn_id: the state store's connection.
    :param lease_seconds: how long the window's lease lasts; each step renews it when it
        starts and a Spark job keeps renewing it while it runs.
    :param stream_id: the stream's id, when it differs from ``stream``'s (default: the
        stream's). Templated.
    :param spec: the stream's source spec (default: the stream's). Templated: a Jinja value
        the source accepted when the DAG was parsed is rendered when the task runs.
    :param work_root: where plan and outcome files live (default: the stream's, else
        :func:`~airflow_cdc.pipeline.work_folder.default_work_root`). Templated.

    ``source_conn`` is templated too; the rendered values make the stream the task runs
    (:attr:`stream_config`).
    """

    ui_color = "#e8f4fd"
    template_fields: tuple[str, ...] = ("stream_id", "spec", "work_root", "source_conn")
    template_fields_renderers = {"spec": "json", "source_conn": "json"}

    def __init__(
        self,
        *,
        stream: StreamConfig,
        source_conn: Mapping[str, Any] | None = None,
        catalog: IcebergCatalog | None = None,
        iceberg_conn_id: str | None = None,
        cdc_state_conn_id: str = DEFAULT_CONN_ID,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        stream_id: str | None = None,
        spec: Mapping[str, Any] | None = None,
        work_root: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if catalog is not None and iceberg_conn_id:
            raise ValueError(
                f"task {kwargs.get('task_id')!r}: give catalog= or iceberg_conn_id=, not both"
            )
        self.stream = stream
        self.stream_id = stream.stream_id if stream_id is None else stream_id
        self.spec = stream.source_spec if spec is None else dict(spec)
        self.work_root = stream.work_root if work_root is None else work_root
        self.source_conn = dict(source_conn or {})
        self.catalog = catalog
        self.iceberg_conn_id = iceberg_conn_id
        self._connection_catalog: IcebergCatalog | None = None
        self.cdc_state_conn_id = cdc_state_conn_id
        self.lease_seconds = lease_seconds

    @property
    def source_spec(self) -> dict:
        """The source spec the task runs with: ``spec`` as rendered, naming ``stream_id``."""
        if self.spec.get("stream_id", self.stream_id) == self.stream_id:
            return self.spec
        return {**self.spec, "stream_id": self.stream_id}

    @property
    def stream_config(self) -> StreamConfig:
        """The stream as the task runs it: its templated fields rendered, and the default work
        root (:func:`~airflow_cdc.pipeline.work_folder.default_work_root`) when none is named."""
        stream, spec = self.stream, self.source_spec
        if (self.stream_id, spec, self.work_root) != (
                stream.stream_id, stream.source_spec, stream.work_root):
            stream = replace(stream, stream_id=self.stream_id, source_spec=dict(spec),
                             work_root=self.work_root)
        return with_work_root(stream)

    def change_source(self, options: Mapping[str, Any] | None = None):
        """The stream's source (:class:`~airflow_cdc.sources.base.ChangeSource`)."""
        from airflow_cdc.sources.registry import build_source

        return build_source(self.source_spec, options)

    def source_hook(self, source):
        """The source's Airflow hook built from ``source_conn`` (None if it needs none)."""
        from airflow_cdc.hooks.source import source_hook

        return source_hook(source, self.source_conn)

    @property
    def iceberg_catalog(self) -> IcebergCatalog:
        if self.catalog is not None:
            return self.catalog
        if self.iceberg_conn_id:
            if self._connection_catalog is None:
                from airflow_cdc.hooks.iceberg_catalog import IcebergCatalogHook

                hook = IcebergCatalogHook(iceberg_conn_id=self.iceberg_conn_id)
                self._connection_catalog = hook.get_catalog()
            return self._connection_catalog
        return IcebergCatalog()

    def on_kill(self) -> None:
        """Nothing of the step runs outside this task's process: a killed step leaves the
        window as its last guarded transition recorded it, and a re-run continues from there
        (I1). Steps that run a Spark job kill it (:class:`~airflow_cdc.operators.spark_step.
        CdcSparkOperator`)."""

    def state_store(self):
        return CdcStateHook(cdc_state_conn_id=self.cdc_state_conn_id).get_store()

    def interval(self, context) -> Window:
        """The DAG run's data interval as a window of the stream."""
        return window_from_context(self.stream_id, context)

    def run_window(self, context, store=None) -> RunWindow:
        """What the run's interval is to the stream: unplanned, planned (possibly as a
        catch-up window reaching past it) or covered by an earlier run's catch-up window."""
        return run_window(store or self.state_store(), self.interval(context))

    def window(self, context) -> Window:
        """The window the run's steps act on: the one planned from the run's interval (its
        recorded end, a catch-up window's lying past the interval), else the interval."""
        return self.run_window(context).effective()

    def covered(self, context, store) -> dict | None:
        """A covered run's summary when an earlier run's catch-up window reads this run's
        interval (the step has nothing to do: that run's steps read, commit and apply it);
        None otherwise."""
        run = self.run_window(context, store)
        if not run.covered:
            return None
        self.log.info("interval %s is read by the catch-up window %s: nothing to do here",
                      run.interval.window_id, run.window.window_id)
        return covered_summary(run)

    def open_window(self, context, store, window: Window, plan: Callable[[], Any]) -> Any:
        """Run ``plan``; take the window over from a run that holds its lease but can act no
        more (:func:`~airflow_cdc.pipeline.plan_step.plan_or_take_over`).

        Airflow says what became of the holder: a run that finished (success or failed) or
        that Airflow no longer has (deleted: ``airflow dags test`` of the same date, the UI)
        gives the window up. A run still running keeps it: WindowLeaseHeldError names it,
        what Airflow says of it, and the ``airflow-cdc release-lease`` command.
        """
        def holder_gone(holder: str | None) -> tuple[bool, str]:
            state = holder_run_state(context, holder)
            if state in FINISHED_RUN_STATES | {GONE_RUN}:
                return True, str(state)
            return False, ("Airflow could not say whether that run still exists" if state is None
                           else f"Airflow says that DAG run is {state}")

        return plan_or_take_over(store, window, plan, holder_gone, log=self.log)
