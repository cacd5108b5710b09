"""How a source's short-lived secrets (an access token) reach a Spark job, and that they never
outlive the task that handed them over.

A driver on the worker reads them from a memory file of the task's process (nothing is left
on disk even when the task is killed); a driver elsewhere reads a 0600 file in the window
folder, which the job deletes once read and the task deletes when the job ends. While the task
waits for the job in the triggerer the file is kept: the job may not have read it yet.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextlib import contextmanager

from airflow_cdc.pipeline.files import write_private

OVERRIDES_FILE = "source-overrides.json"


@contextmanager
def overrides_handover(overrides: Mapping | None, folder, *, resumed: bool,
                       in_process: Callable | None = None, kept_on: tuple = ()):
    """The path the job reads ``overrides`` from while the block runs, or None without any.

    :param overrides: the source's overrides (:meth:`~airflow_cdc.sources.base.ChangeSource.
        extract_overrides`); empty or None: nothing is handed over.
    :param folder: the window folder, for a driver elsewhere.
    :param resumed: the task resumes after waiting for the job: the file written before the
        wait is the one the job reads, and is deleted now.
    :param in_process: a context manager factory taking the text and yielding the path of a
        memory file of this process, for a driver on this machine (None: a file in ``folder``).
    :param kept_on: exceptions after which the file is kept (the task defers while the job
        runs).
    """
    if not overrides:
        yield None
        return
    text = json.dumps(overrides)
    if not resumed and in_process is not None:
        with in_process(text) as path:
            yield path
        return
    path = folder / OVERRIDES_FILE
    if not resumed:
        write_private(path, text)
    deferred = False
    try:
        yield str(path)
    except kept_on:
        deferred = True  # the job reads the file while the task waits in the triggerer
        raise
    finally:
        if not deferred:
            path.unlink(missing_ok=True)
