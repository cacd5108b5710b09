"""Python workers read a zip archive's directory again only when the archive changed.

A performance strategy. Saves: each ``zipimporter`` re-reading its archive's whole directory
before every task of a reused Python worker (``bench/window.py``; docs/performance.md).
PySpark's worker calls ``importlib.invalidate_caches()`` before every task it runs; on Python
3.10 and 3.11 that makes every ``zipimporter`` (one per package a worker imported from
``pyspark.zip`` or the project's py-files zip) read its archive's directory again, in Python
(CPython gh-103200; Python 3.12 reads lazily and is left alone).

The rule: an importer reads its archive again only when the file's size or modification time
is not what it was at its last read, which is what the invalidation is for (a py-file replaced
under the same name). The first import of an ``airflow_cdc.spark_jobs`` module in a worker
installs it (``spark_jobs/__init__.py``), so it holds from the worker's second task on. The
switch: ``AIRFLOW_CDC_ZIP_IMPORTS=off`` keeps Python's own invalidation (the plain path,
:data:`PLAIN_INVALIDATE`).
"""

from __future__ import annotations

import os
import sys
import zipimport

_STAMP = "_airflow_cdc_archive_stamp"
SWITCH = "AIRFLOW_CDC_ZIP_IMPORTS"  # "off": importers read their archive at every invalidation
# Python's own zipimporter.invalidate_caches: the plain path.
PLAIN_INVALIDATE = zipimport.zipimporter.invalidate_caches


def _archive_stamp(path: str) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_size, status.st_mtime_ns


def invalidate_when_changed(importer: zipimport.zipimporter) -> None:
    """Python's invalidation for ``importer``, skipped while its archive is the file it read."""
    stamp = _archive_stamp(importer.archive)
    if stamp is not None and getattr(importer, _STAMP, None) == stamp:
        return  # the archive is the file this importer read: its directory holds
    PLAIN_INVALIDATE(importer)
    setattr(importer, _STAMP, stamp)


invalidate_when_changed.reads_when_changed = True


def read_zip_directories_when_changed() -> bool:
    """Make ``zipimporter.invalidate_caches`` read an archive only when it changed since its
    last read (Python < 3.12, unless the switch is off; once per process). Returns whether it
    is in place."""
    if sys.version_info >= (3, 12) or os.environ.get(SWITCH, "").lower() == "off":
        return False
    if not getattr(zipimport.zipimporter.invalidate_caches, "reads_when_changed", False):
        zipimport.zipimporter.invalidate_caches = invalidate_when_changed
    return True
