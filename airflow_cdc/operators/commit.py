"""Step 3 as an Airflow task: record the extract's partition outcomes in one transaction."""

from __future__ import annotations

from airflow_cdc.metrics import report_step
from airflow_cdc.operators.base import CdcWindowOperator
from airflow_cdc.operators.task_context import mirror_task_progress, run_owner, window_summary
from airflow_cdc.pipeline.commit_step import commit_step, log_partition_progress, source_counts

__all__ = ["CdcCommitWindowOperator", "log_partition_progress"]


class CdcCommitWindowOperator(CdcWindowOperator):
    """Step 3: record the extract's partition outcomes in one state-store transaction
    (:func:`~airflow_cdc.pipeline.commit_step.commit_step`; a committed window is not
    committed again).

    The summary adds the source's own counts (:attr:`~airflow_cdc.sources.base.ChangeSource.
    summary_counts`), and the source's warnings about them are logged. The parameters are
    :class:`~airflow_cdc.operators.base.CdcWindowOperator`'s.
    """

    def execute(self, context) -> dict:
        """Commit the window; its summary."""
        store = self.state_store()
        covered = self.covered(context, store)
        if covered is not None:
            return covered
        window = self.window(context)
        record = commit_step(store, self.stream_config, window, run_owner(context),
                             self.lease_seconds, log=self.log)
        report_step(context, store, window, "commit", record)
        own = source_counts(self.change_source(), record, window, log=self.log)
        summary = {**window_summary(record), **own}
        mirror_task_progress(context, "commit", summary)
        return summary
