"""Hand a secret (catalog password, source access token) to a Spark driver so that nothing is
left behind when the task holding it is killed.

A driver on this machine (local Spark, spark-submit in client mode) reads it from an anonymous
memory file of the task's process (``memfd_create``): the path is
``/proc/<task pid>/fd/<n>``, readable only by the task's user (mode 0600, and the kernel's
ptrace rule for ``/proc/<pid>/fd``), never on a disk, never in a folder listing, and freed by
the kernel when the task's process ends, however it ends: a SIGKILL leaves nothing. The task
waits for its job, so the file lives as long as the driver needs it.

A driver elsewhere (Dataproc, cluster deploy mode) cannot see this machine's processes: the
runner ships a 0600 file the job deletes as soon as it has read it, and the task deletes it
again when the job ends (see :func:`airflow_cdc.spark.runners.secret_conf_file` and the
extract's ``--source-overrides``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

PROCESS_FILE_PREFIX = "/proc/"


def process_files_supported() -> bool:
    """Whether this system has anonymous memory files readable through ``/proc`` (Linux)."""
    return hasattr(os, "memfd_create") and os.path.isdir(f"/proc/{os.getpid()}/fd")


@contextmanager
def process_secret_file(text: str) -> Iterator[str]:
    """A path a process on this machine can open to read ``text`` while the block runs; the
    memory is released when the block ends or this process dies."""
    fd = os.memfd_create("airflow-cdc-secret", os.MFD_CLOEXEC)
    try:
        os.fchmod(fd, 0o600)
        data = text.encode("utf-8")
        while data:
            data = data[os.write(fd, data):]
        yield f"/proc/{os.getpid()}/fd/{fd}"
    finally:
        os.close(fd)


def is_process_file(path: str) -> bool:
    """Whether ``path`` is a :func:`process_secret_file` (nothing to delete after reading)."""
    return str(path).startswith(PROCESS_FILE_PREFIX)
