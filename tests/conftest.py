"""Fixtures shared by the whole suite.

One SparkSession per test session (a JVM start costs seconds on two cores): tests that need
Spark take the ``spark`` fixture and keep their tables apart by namespace or table name.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Airflow reads its home when first imported: give the whole test session its own, so tests
# never touch a developer's ~/airflow and every run starts from an empty metadata DB.
_AIRFLOW_HOME = tempfile.mkdtemp(prefix="cdc-tests-airflow-home-")
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
os.environ.pop("AIRFLOW_CDC_STATE_URL", None)
os.environ.pop("SPANNER_EMULATOR_HOST", None)


@pytest.fixture
def audit_events():
    """``audit_events(run, task_id)``: a task's state changes as Airflow's audit log recorded them."""

    def events(run, task_id: str) -> list[str]:
        from airflow.models.log import Log
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            return list(
                session.scalars(
                    select(Log.event).where(Log.run_id == run.run_id, Log.task_id == task_id).order_by(Log.id)
                )
            )

    return events


@pytest.fixture(scope="session")
def airflow_db():
    """The session's Airflow metadata DB, migrated once (for tests that run DAGs)."""
    import subprocess

    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        check=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ},
    )
    return _AIRFLOW_HOME


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory) -> Path:
    """The Iceberg warehouse folder of the shared session's ``lake`` catalog."""
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="session")
def iceberg_catalog(warehouse):
    from airflow_cdc.spark.iceberg import JDBC_DRIVER_JARS, IcebergCatalog

    # The JDBC drivers ride along so tests can also add a JDBC catalog at run time.
    return IcebergCatalog(
        name="lake",
        kind="hadoop",
        warehouse=str(warehouse),
        extra_jars=tuple(str(jar) for jar in JDBC_DRIVER_JARS.values()),
    )


@pytest.fixture(scope="session")
def spark(iceberg_catalog):
    """The suite's one SparkSession, with the Hadoop Iceberg catalog ``lake``."""
    from airflow_cdc.spark.iceberg import local_session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = local_session(
        iceberg_catalog,
        app_name="airflow-cdc-tests",
        master="local[2]",
        extra_conf={"spark.default.parallelism": "4", "spark.driver.memory": "2g"},
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    # Shut the py4j gateway down now: left to interpreter exit, its __del__ logs into a
    # closed stream once Airflow has set up logging.
    from pyspark import SparkContext

    if SparkContext._gateway is not None:
        SparkContext._gateway.shutdown()
        SparkContext._gateway = SparkContext._jvm = None
