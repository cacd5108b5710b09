"""Fixtures for the Spark layer: a real standalone Spark cluster on 127.0.0.1.

Tables the submitted jobs write are read back through the suite's one session (``spark``,
tests/conftest.py), each warehouse registered as a catalog of its own (support.open_warehouse).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_cdc.demo.cluster import StandaloneSpark


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory) -> Iterator[StandaloneSpark]:
    """A Spark standalone master and one worker (1 core, 1 GB) on 127.0.0.1, stopped at the
    end (``master_url``, ``port``, ``state()``: the demos' :class:`StandaloneSpark`)."""
    with StandaloneSpark(tmp_path_factory.mktemp("standalone"), cores=1, memory="1g") as cluster:
        yield cluster
