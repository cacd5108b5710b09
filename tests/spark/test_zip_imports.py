"""Python workers read a zip archive's directory again only when it changed
(spark_jobs/zip_imports.py): PySpark invalidates the import caches before every task."""

from __future__ import annotations

import importlib
import os
import sys
import zipfile
import zipimport

import pytest

import airflow_cdc.spark_jobs  # noqa: F401 - importing the package puts the rule in place
from airflow_cdc.spark_jobs.zip_imports import read_zip_directories_when_changed

pytestmark = pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12 reads zip directories lazily")


@pytest.fixture
def archive(tmp_path):
    """A zip archive of one module on sys.path, removed from the path and modules after."""
    path = tmp_path / "shipped.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("cdc_zip_first.py", "VALUE = 1\n")
    sys.path.insert(0, str(path))
    yield path
    sys.path.remove(str(path))
    sys.path_importer_cache.pop(str(path), None)
    for name in ("cdc_zip_first", "cdc_zip_second"):
        sys.modules.pop(name, None)


@pytest.fixture
def directory_reads(monkeypatch):
    """How many times a zip archive's directory is read."""
    reads = []
    read = zipimport._read_directory
    monkeypatch.setattr(zipimport, "_read_directory", lambda path: reads.append(path) or read(path))
    return reads


def test_importing_spark_jobs_puts_the_rule_in_place():
    assert getattr(zipimport.zipimporter.invalidate_caches, "reads_when_changed", False)
    assert read_zip_directories_when_changed() is True  # once: a second call changes nothing


def test_invalidating_the_caches_does_not_read_an_unchanged_archive_again(archive, directory_reads):
    importlib.import_module("cdc_zip_first")
    importlib.invalidate_caches()  # the first invalidation reads it, as a worker's first task does
    directory_reads.clear()
    for _ in range(3):
        importlib.invalidate_caches()
    assert directory_reads == []


def test_a_module_added_to_a_replaced_archive_imports_after_the_caches_are_invalidated(archive, directory_reads):
    importlib.import_module("cdc_zip_first")
    importlib.invalidate_caches()
    with zipfile.ZipFile(archive, "a") as zf:
        zf.writestr("cdc_zip_second.py", "VALUE = 2\n")
    os.utime(archive, ns=(0, 1))  # a replaced file: another size and time than the one read
    importlib.invalidate_caches()
    assert str(archive) in directory_reads
    assert importlib.import_module("cdc_zip_second").VALUE == 2
