"""Commit threads: a table's target, tombstone and history commits made side by side.

Saves: each commit's Spark jobs use the cores the others leave idle while they plan, join or
commit (bench/window.py).

Interface: :func:`side_by_side`. The commits are independent (each is computed from the same
checkpointed fold and the same pre-window snapshots, and a re-run makes whichever is
missing), so their order is free. What running them in threads requires elsewhere:
``commits.sql_tagged`` starts py4j's callback server under a lock (two MERGEs may both be the
first), and the file-search setting (``targets.file_search``) is set around all of a table's
commits, not per thread, since it is a session setting.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from airflow_cdc.spark_jobs.spark_line import inheriting_thread_target


def side_by_side(calls: list[Callable[[], None]], name: str = "cdc-apply-commit", parallel: bool = True) -> None:
    """Run ``calls`` in parallel threads (inline when there is one); raise the first failure.

    A failed call does not stop the others; once all are done, the first failure in the
    order of ``calls`` is raised. Each thread inherits the caller's Spark local properties
    (job group, scheduler pool), so its jobs show up, and can be cancelled, with the caller's.
    Without ``parallel`` (the plain path), the calls run one after another, failures as above.
    """
    if len(calls) <= 1:
        for call in calls:
            call()
        return
    if not parallel:
        _one_after_another(calls)
        return
    with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix=name) as pool:
        futures = [pool.submit(inheriting_thread_target(call)) for call in calls]
    for future in futures:
        error = future.exception()
        if error is not None:
            raise error


def _one_after_another(calls: list[Callable[[], None]]) -> None:
    """Run every call in order; once all are done, raise the first failure."""
    failures: list[BaseException] = []
    for call in calls:
        try:
            call()
        except Exception as error:  # noqa: BLE001 - raised once the other calls are done
            failures.append(error)
    if failures:
        raise failures[0]
