"""Python workers read a zip archive's directory again only when the archive changed.

PySpark's worker calls ``importlib.invalidate_caches()`` before every task it runs. On Python
3.10 and 3.11 that makes each ``zipimporter`` read its archive's whole directory again, in
Python, at once (CPython gh-103200, fixed in 3.12 by reading lazily): a worker has one importer
per package it imported from a zip, about thirty of them over ``pyspark.zip`` (793 entries,
always on a worker's path) and this project's py-files zip (270). So every task of a reused
worker spent about 150 ms of CPU before reading anything.

A performance strategy. Saves: a py-spy of the warm driver's Python workers during windows of
about 950 changes found 4.0 s of their 6.6 s of samples in ``invalidate_caches`` (the window's
read tasks took 115-305 ms each to start). Here an importer reads its archive again only when
the file's size or modification time is not what it was at its last read, which is what the
invalidation is for (a py-file replaced under the same name). The first import of a
``spark_jobs`` module in a worker installs it (``spark_jobs/__init__.py``), so it holds from
the worker's second task on; on Python 3.12 and later nothing is changed. A worker that only
ever runs functions of ``airflow_cdc.sources`` (the Datastream and commit-timestamp reads, the
Bigtable apply's mutations) imports no ``spark_jobs`` module and keeps re-reading.
"""

from __future__ import annotations

import os
import sys
import zipimport

_STAMP = "_airflow_cdc_archive_stamp"


def _archive_stamp(path: str) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_size, status.st_mtime_ns


def read_zip_directories_when_changed() -> bool:
    """Make ``zipimporter.invalidate_caches`` read an archive only when it changed since its
    last read (Python < 3.12; once per process). Returns whether it is in place."""
    if sys.version_info >= (3, 12):
        return False
    invalidate = zipimport.zipimporter.invalidate_caches
    if getattr(invalidate, "reads_when_changed", False):
        return True

    def invalidate_caches(self) -> None:
        stamp = _archive_stamp(self.archive)
        if stamp is not None and getattr(self, _STAMP, None) == stamp:
            return  # the archive is the file this importer read: its directory holds
        invalidate(self)
        setattr(self, _STAMP, stamp)

    invalidate_caches.reads_when_changed = True
    invalidate_caches.__doc__ = invalidate.__doc__
    zipimport.zipimporter.invalidate_caches = invalidate_caches
    return True
