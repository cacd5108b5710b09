"""Fixtures for the Spark layer: a real standalone Spark cluster on 127.0.0.1.

Tables the submitted jobs write are read back through the suite's one session (``spark``,
tests/conftest.py), each warehouse registered as a catalog of its own (support.open_warehouse).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from demo.cluster import StandaloneSpark


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory) -> Iterator[StandaloneSpark]:
    """A Spark standalone master and one worker (1 core, 1 GB) on 127.0.0.1, stopped at the
    end (``master_url``, ``port``, ``state()``: the demos' :class:`StandaloneSpark`)."""
    with StandaloneSpark(tmp_path_factory.mktemp("standalone"), cores=1, memory="1g") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A warm runner with drivers of its own (state folder), the module's folder and the
    catalog of its warehouse (one catalog, so one driver serves the module's submits that
    share its conf): ``(runner, catalog, folder)``; the drivers stop after the module."""
    from airflow_cdc.spark.iceberg import IcebergCatalog
    from airflow_cdc.spark.warm import WarmSparkRunner, stop_warm_drivers

    folder = tmp_path_factory.mktemp("warm")
    runner = WarmSparkRunner(master="local[2]", idle_seconds=300, state_dir=folder / "state")
    yield runner, IcebergCatalog(warehouse=str(folder / "warehouse")), folder
    stop_warm_drivers(folder / "state")
