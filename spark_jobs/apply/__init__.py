"""Apply: one window of a stream's changelog becomes current-state Iceberg tables.

For every source table in the window: route it to its target (``config.py``), type and evolve
the target's columns from the declared source types (``schema.py``,
``airflow_cdc.sources.column_types``), fold each key's changes in ordering-key order
(``fold.py``), and commit guarded MERGEs into the target, its tombstones and optional SCD type 2
history (``targets.py``), each commit tagged with the window (``spark_jobs/commits.py``). Rows that
cannot be applied go to the stream's dead-letter table with the reason (``dead_letters.py``).
``job.py`` runs the steps as its numbered procedure, one module per step (``declarations.py``,
``table_fold.py``, ``dead_letters.py``, ``table_commits.py``); ``spark_jobs/apply_job.py`` is the
spark-submit entry point.

Never imports Airflow: this runs on Spark drivers without it.
"""

from airflow_cdc.spark_jobs.apply.config import ApplyConfig, ApplyConfigError
from airflow_cdc.spark_jobs.apply.job import (
    ApplyError,
    ApplyResult,
    DeadLettersError,
    InjectedFault,
    TableResult,
    apply_window,
)

__all__ = [
    "ApplyConfig",
    "ApplyConfigError",
    "ApplyError",
    "ApplyResult",
    "DeadLettersError",
    "InjectedFault",
    "TableResult",
    "apply_window",
]
