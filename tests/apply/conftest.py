"""Fixtures of the apply tests: a fresh namespace of the shared ``lake`` catalog per test or module.

Tests build ChangeRow values (no source needed), append them to a changelog table, run
:func:`airflow_cdc.spark_jobs.apply.apply_window` on the suite's one SparkSession, and read the results back
both with Spark and with pyiceberg (see ``support.py``).
"""

from __future__ import annotations

import itertools

import pytest

from .support import Lake

_namespaces = itertools.count()


@pytest.fixture
def lake(spark, warehouse, request) -> Lake:
    """A fresh namespace of the shared ``lake`` catalog for one test."""
    namespace = f"apply_{next(_namespaces)}"
    return Lake(spark, warehouse, namespace)


@pytest.fixture(scope="module")
def module_lake(spark, warehouse, request) -> Lake:
    """A namespace shared by the tests of one module (one apply run, many assertions)."""
    namespace = f"apply_m{next(_namespaces)}"
    return Lake(spark, warehouse, namespace)


