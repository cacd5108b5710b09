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
from airflow_cdc.spark_jobs.zip_imports import PLAIN_INVALIDATE, SWITCH, read_zip_directories_when_changed

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


def imports_across_a_replaced_archive(archive) -> tuple[int, int]:
    """Import a module from ``archive``, invalidate twice, replace the archive with one that
    also holds a second module, invalidate, import that: both modules' values."""
    first = importlib.import_module("cdc_zip_first").VALUE
    importlib.invalidate_caches()
    importlib.invalidate_caches()
    with zipfile.ZipFile(archive, "a") as zf:
        zf.writestr("cdc_zip_second.py", "VALUE = 2\n")
    os.utime(archive, ns=(0, 1))  # a replaced file: another size and time than the one read
    importlib.invalidate_caches()
    return first, importlib.import_module("cdc_zip_second").VALUE


def test_importing_spark_jobs_puts_the_rule_in_place():
    assert getattr(zipimport.zipimporter.invalidate_caches, "reads_when_changed", False)
    assert read_zip_directories_when_changed() is True  # once: a second call changes nothing


def test_the_switch_off_leaves_pythons_own_invalidation(monkeypatch):
    monkeypatch.setenv(SWITCH, "off")
    monkeypatch.setattr(zipimport.zipimporter, "invalidate_caches", PLAIN_INVALIDATE)

    assert read_zip_directories_when_changed() is False
    assert zipimport.zipimporter.invalidate_caches is PLAIN_INVALIDATE


def test_invalidating_the_caches_does_not_read_an_unchanged_archive_again(archive, directory_reads):
    importlib.import_module("cdc_zip_first")
    importlib.invalidate_caches()  # the first invalidation reads it, as a worker's first task does
    directory_reads.clear()
    for _ in range(3):
        importlib.invalidate_caches()
    assert directory_reads == []


def test_a_module_added_to_a_replaced_archive_imports_after_the_caches_are_invalidated(archive, directory_reads):
    assert imports_across_a_replaced_archive(archive) == (1, 2)
    assert str(archive) in directory_reads


def test_imports_are_the_same_with_the_rule_and_with_pythons_own_invalidation(archive, monkeypatch):
    with_rule = imports_across_a_replaced_archive(archive)
    for name in ("cdc_zip_first", "cdc_zip_second"):
        sys.modules.pop(name)
    with zipfile.ZipFile(archive, "w") as zf:  # the archive as the fixture made it
        zf.writestr("cdc_zip_first.py", "VALUE = 1\n")
    os.utime(archive, ns=(0, 2))
    monkeypatch.setattr(zipimport.zipimporter, "invalidate_caches", PLAIN_INVALIDATE)
    importlib.invalidate_caches()

    assert imports_across_a_replaced_archive(archive) == with_rule == (1, 2)
