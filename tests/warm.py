"""Warm Spark drivers for the example DAGs' tests.

Most DAG tests run their windows' Spark jobs in a warm driver (``CDC_WARM_DRIVER_IDLE_SECONDS``,
:mod:`airflow_cdc.spark.warm`), as a user on a worker with small windows would: one Spark
application per test module instead of a spark-submit per job. The window-strategies test and
the reliability matrix's cell (``tests/faults``, both in ``make test-long``) keep a spark-submit
per job, so both ways stay covered through real DAGs.
"""

from __future__ import annotations

from pathlib import Path

# Seconds a test's driver waits for its next job: longer than the Airflow work between two
# jobs of a test, short enough that a driver a failed test left behind goes soon.
IDLE_SECONDS = 120


def warm_driver_env(base: Path) -> dict[str, str]:
    """The environment that makes the example DAGs run their Spark jobs in a warm driver whose
    socket and log live under ``base / "warm"``."""
    return {"CDC_WARM_DRIVER_IDLE_SECONDS": str(IDLE_SECONDS), "AIRFLOW_CDC_WARM_DIR": str(base / "warm")}


def stop_warm_drivers(base: Path) -> None:
    """Stop the drivers :func:`warm_driver_env` started under ``base``."""
    from airflow_cdc.spark.warm import stop_warm_drivers as stop

    stop(base / "warm")
