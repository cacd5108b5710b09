"""What a source's read does when the service breaks it off or refuses it, or a file is gone.

* **Transient** (:data:`TRANSIENT_ERRORS`: UNAVAILABLE, DEADLINE_EXCEEDED sent by the service,
  RESOURCE_EXHAUSTED): the partition read runs again, whole, from its planned position
  (:func:`read_with_retries`). A read is a function of (partition, position, window) and keeps
  nothing of an attempt that broke, so the window gets every change once. The waits grow
  exponentially with full jitter (``google.api_core.retry``), and are never shorter than the
  delay the service asks for in a ``google.rpc.RetryInfo`` (RESOURCE_EXHAUSTED carries one);
  after :data:`RETRY_TIMEOUT_SECONDS` the read fails, naming the partition and the window.
  (The Spanner client resumes a stream broken by UNAVAILABLE itself, from its last resume
  token; what it does not resume reaches the retry here.)
* **A position the service no longer accepts** (older than the change stream's retention):
  no retry can help. :class:`PositionExpiredError` names the partition, the window and the fix
  (``airflow-cdc reset-stream``, then the targets from a snapshot).
* **A planned file that is gone** (file sources: deleted or moved between plan and extract):
  a window reads exactly the files it planned, so :class:`PlannedFileMissingError` names the
  files, the window and the fix (put them back; if they are gone for good, reset the stream).
* **A local folder that cannot be listed** (no permission, removed while listed):
  :func:`walk_files` raises :class:`FolderListingError` naming the folder, the error and the
  fix, where ``os.walk`` alone would skip the folder and the window would miss its files.

Only google-api-core, which every Google client library brings: Spark executors have it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from airflow_cdc.model import CdcError, Window

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRY_TIMEOUT_SECONDS = 600.0
INITIAL_BACKOFF_SECONDS = 1.0
MAXIMUM_BACKOFF_SECONDS = 32.0


class PositionExpiredError(CdcError):
    """The service no longer accepts a partition's recorded position: its changes are gone."""


class ReadRetriesExhaustedError(CdcError):
    """A partition read kept failing with transient errors for the whole retry budget."""


def transient_errors() -> tuple[type[Exception], ...]:
    from google.api_core import exceptions

    return (exceptions.ServiceUnavailable, exceptions.DeadlineExceeded,
            exceptions.ResourceExhausted)


def retry_delay_of(error: Exception) -> float | None:
    """The delay the service asked for (``google.rpc.RetryInfo`` in the status details)."""
    for detail in getattr(error, "details", None) or ():
        if type(detail).__name__ == "RetryInfo" and detail.HasField("retry_delay"):
            return detail.retry_delay.ToTimedelta().total_seconds()
    return None


class ServerPacedBackoff:
    """Truncated exponential backoff with full jitter, floored at the service's RetryInfo.

    ``google.api_core.retry.retry_target`` draws the next sleep after calling ``on_error``
    (documented for this use), so :meth:`on_error` sets the floor of the coming wait."""

    def __init__(self, initial: float, maximum: float, multiplier: float = 2.0) -> None:
        from google.api_core.retry import exponential_sleep_generator

        self._backoff = exponential_sleep_generator(initial, maximum, multiplier)
        self._asked = 0.0

    def on_error(self, error: Exception) -> None:
        self._asked = retry_delay_of(error) or 0.0

    def __iter__(self):
        for delay in self._backoff:
            yield max(delay, self._asked)


def read_with_retries(read: Callable[[], T], *, partition: str, window: Window,
                      timeout: float = RETRY_TIMEOUT_SECONDS,
                      initial: float = INITIAL_BACKOFF_SECONDS,
                      maximum: float = MAXIMUM_BACKOFF_SECONDS) -> T:
    """``read()``, run again after each transient error until ``timeout`` seconds passed."""
    from google.api_core import retry
    from google.api_core.retry import RetryFailureReason

    pacing = ServerPacedBackoff(initial, maximum)
    what = f"partition {partition} of window {window.window_id} of stream {window.stream_id}"

    def on_error(error: Exception) -> None:
        pacing.on_error(error)
        log.warning("%s: the service broke the read off (%s: %s); reading it again from its "
                    "planned position", what, type(error).__name__, _message(error))

    def give_up(errors: list[Exception], reason, _timeout):
        last = errors[-1]
        if reason is RetryFailureReason.TIMEOUT:
            return ReadRetriesExhaustedError(
                f"{what} failed {len(errors)} times with transient errors for {timeout:.0f} s; "
                f"last {type(last).__name__}: {_message(last)}. Nothing of it was written: run "
                f"the extract task again once the service answers (check its quotas and status)"
            ), last
        return last, None

    return retry.retry_target(read, retry.if_exception_type(*transient_errors()), pacing,
                              timeout=timeout, on_error=on_error, exception_factory=give_up)


def position_expired(source: str, partition: str, window: Window, position: str,
                     detail: str, error_class: type[CdcError] = PositionExpiredError) -> CdcError:
    """The error for a recorded position the service refuses as older than its retention."""
    return error_class(
        f"{source} no longer accepts the recorded position of partition {partition} "
        f"({position}) for window {window.window_id} of stream {window.stream_id}: {detail}. "
        f"The changes after that position are gone from the change stream (older than its "
        f"retention period): the stream cannot continue from its recorded positions and no "
        f"retry can help. Fix: Reset the stream's state with `airflow-cdc reset-stream "
        f"{window.stream_id}` (with --conn-id or --url naming its state store), reload the "
        f"target tables from a snapshot of the source, and start the stream again from a "
        f"time within the retention period (and run windows more often than that period)"
    )


def _message(error: Exception) -> str:
    return getattr(error, "message", None) or str(error)


class PlannedFileMissingError(CdcError, FileNotFoundError):
    """Files a window planned to read are gone: the window cannot be read as planned."""


def planned_files_missing(paths: list[str], window: Window) -> PlannedFileMissingError:
    """The error for files that were listed when ``window`` was planned and are gone now."""
    shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
    return PlannedFileMissingError(
        f"{len(paths)} file(s) planned for window {window.window_id} of stream "
        f"{window.stream_id} are gone since the plan (deleted or moved): {shown}. A window "
        f"reads exactly the files it planned, so it stays unread and nothing of it was "
        f"written. Fix: put the file(s) back at that path (GCS: restore the noncurrent "
        f"version or the soft-deleted object; keep lifecycle rules from deleting files younger "
        f"than the stream's windows) and clear the extract task. If they are gone for good, "
        f"their changes are lost to this stream: Reset the stream's state with `airflow-cdc "
        f"reset-stream {window.stream_id}` and reload the target tables from a snapshot of the "
        f"source"
    )


class FolderListingError(CdcError):
    """A folder under a local file source's root could not be listed: its files would be missed."""


def walk_files(root: Path, what: str) -> Iterator[Path]:
    """Every file under ``root`` (``what`` names the source's folder in errors); a subfolder
    that cannot be listed raises :class:`FolderListingError` instead of being skipped."""

    def refuse(error: OSError) -> None:
        raise FolderListingError(
            f"{what}: folder {error.filename!r} under {str(root)!r} cannot be listed "
            f"({error.strerror or error}): its files would be missing from the window. Give the "
            f"Airflow and Spark users read and execute permission on it (or move it out of "
            f"the folder), then clear the task"
        ) from error

    for folder, _, names in os.walk(root, onerror=refuse):
        for name in names:
            yield Path(folder) / name
