"""How a protocol step says that running it again cannot help.

The steps raise :class:`StepFailure` for a state only a person can mend (a window applied
before it was committed, a changelog snapshot that expired, dead letters under the ``fail``
policy); the Airflow side turns it into a task failure that skips the task's retries. Every
other error may pass with a retry (a lost driver, a failed commit: each step is safe to run
again, I1).
"""

from __future__ import annotations

from airflow_cdc.model import CdcError


class StepFailure(CdcError):
    """A step's failure that no retry can mend; the message names the fix."""


class JobWaitError(CdcError):
    """The wait for a deferred Spark job ended without its final state: a retry runs the step
    again."""


def check_resumed_job(event, run_name: str, run_label: str, job_name: str) -> None:
    """A task resumed after waiting for its deferred job may take only that job's final state.

    :param event: the trigger's event (``status`` ``done`` with the job's final state, or an
        error ``message``).
    :param run_name: the job name the waited-for run was submitted under.
    :param run_label: how the run is named to a person (its kind and id).
    :param job_name: the name of the job this task runs now.
    :raises StepFailure: the run is another job's (the task's job changed since it deferred).
    :raises JobWaitError: the wait ended without the job's final state.
    """
    if run_name != job_name:
        raise StepFailure(
            f"resumed after Dataproc {run_label} of {run_name!r}, but this "
            f"task's job is {job_name!r}: clear the task to run it again")
    if event.get("status") != "done":
        raise JobWaitError(event.get("message") or f"Dataproc wait failed: {event!r}")
