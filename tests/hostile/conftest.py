"""Fixtures of the hostile-input tests, and their hypothesis profiles.

The default profile keeps ``make test`` cheap (200 examples a property, no example database
in the work tree); ``AIRFLOW_CDC_HYPOTHESIS_PROFILE=thorough`` (``make hostile``) runs 5,000.
"""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import HealthCheck, settings

from tests.apply.support import Lake

_SETTINGS = dict(deadline=None, database=None, print_blob=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("default", max_examples=200, **_SETTINGS)
settings.register_profile("thorough", max_examples=5000, **_SETTINGS)
settings.load_profile(os.environ.get("AIRFLOW_CDC_HYPOTHESIS_PROFILE", "default"))

_namespaces = itertools.count()


@pytest.fixture
def lake(spark, warehouse) -> Lake:
    """A fresh namespace of the shared ``lake`` catalog for one test."""
    return Lake(spark, warehouse, f"hostile_{next(_namespaces)}")


@pytest.fixture(scope="module")
def module_lake(spark, warehouse) -> Lake:
    """A namespace shared by the tests of one module (one apply run, many assertions)."""
    return Lake(spark, warehouse, f"hostile_m{next(_namespaces)}")
