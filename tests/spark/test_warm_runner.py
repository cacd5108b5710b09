"""WarmSparkRunner: our jobs run one after the other in one warm Spark application.

Real spark-submit, real warm driver (spark_jobs/warm_driver.py), real changelog writes read
back from the Iceberg tables.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

from airflow_cdc.spark.iceberg import IcebergCatalog
from airflow_cdc.spark.job import (
    SECRET_CONF_FILE_KEY,
    ChangelogWriteResult,
    SparkJobError,
    SparkJobSpec,
    changelog_writer_spec,
)
from airflow_cdc.spark.warm import (
    WarmSparkRunner,
    _flock,
    driver_key,
    warm_module,
)
from .support import TEST_SPARK_CONF, change_rows, window, write_change_rows

TABLE = "cdc.orders_changelog"


def window_spec(catalog, folder, hour: int, conf=TEST_SPARK_CONF) -> SparkJobSpec:
    """The changelog writer's spec for three changes in window ``hour``."""
    w = window(hour)
    rows = write_change_rows(folder / f"{hour}.jsonl", change_rows(w, 3, first_key=100 * hour))
    return changelog_writer_spec(catalog, TABLE, w.window_id, rows, folder / f"{hour}.result.json",
                                 conf=conf)


def write_window(runner, catalog, folder, hour: int, *, conf=TEST_SPARK_CONF) -> ChangelogWriteResult:
    runner.run(window_spec(catalog, folder, hour, conf))
    return ChangelogWriteResult.read(folder / f"{hour}.result.json")


def test_second_job_runs_in_the_application_the_first_one_started(warm):
    runner, catalog, folder = warm
    first = write_window(runner, catalog, folder, 1)
    first_driver = runner.last_driver
    second = write_window(runner, catalog, folder, 2)

    assert (first.rows_written, second.rows_written) == (3, 3)
    assert runner.last_driver["application_id"] == first_driver["application_id"]
    assert runner.last_driver["jobs"] > first_driver["jobs"]


def test_failing_job_raises_spark_job_error_and_the_driver_serves_the_next(warm, tmp_path):
    runner, catalog, folder = warm
    spec = changelog_writer_spec(catalog, TABLE, window(3).window_id, tmp_path / "missing.jsonl",
                                 tmp_path / "result.json", conf=TEST_SPARK_CONF)
    with pytest.raises(SparkJobError) as failed:
        runner.run(spec)
    failed_in = runner.last_driver["application_id"]

    assert failed.value.return_code == 1
    assert "missing.jsonl" in str(failed.value)
    assert write_window(runner, catalog, folder, 4).rows_written == 3
    assert runner.last_driver["application_id"] == failed_in


def test_emptied_table_cache_shows_a_commit_made_by_another_catalog_instance(spark, tmp_path):
    from airflow_cdc.spark_jobs.warm_driver import empty_table_caches

    warehouse = (tmp_path / "warehouse").absolute().as_uri()
    for name, cache in (("warmcached", "true"), ("warmwriter", "false")):
        spark.conf.set(f"spark.sql.catalog.{name}", "org.apache.iceberg.spark.SparkCatalog")
        spark.conf.set(f"spark.sql.catalog.{name}.type", "hadoop")
        spark.conf.set(f"spark.sql.catalog.{name}.warehouse", warehouse)
        spark.conf.set(f"spark.sql.catalog.{name}.cache-enabled", cache)
    spark.sql("CREATE TABLE warmcached.ns.t (id INT) USING iceberg")
    spark.sql("INSERT INTO warmcached.ns.t VALUES (1)")
    assert spark.table("warmcached.ns.t").count() == 1  # loaded, and cached
    spark.sql("INSERT INTO warmwriter.ns.t VALUES (2)")  # as another application would
    stale = spark.table("warmcached.ns.t").count()

    emptied = empty_table_caches(spark)

    assert stale == 1  # the cache served the table as it was
    assert "warmcached" in emptied
    assert spark.table("warmcached.ns.t").count() == 2


def test_request_that_is_not_a_job_is_refused_and_the_driver_serves_the_next(warm):
    import json
    import socket

    runner, catalog, folder = warm
    write_window(runner, catalog, folder, 12)
    serving = runner.last_driver
    sock_path = runner.paths(driver_key(window_spec(catalog, folder, 12), runner.master))["sock"]
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(sock_path))
        sock.sendall(b'{"run": {"module": "os; rm -rf /"}}\n')
        replies = [json.loads(line) for line in sock.makefile().read().splitlines()]

    assert replies[-1] == {"exit": 2}
    assert any("not a job request" in r.get("line", "") for r in replies)
    assert write_window(runner, catalog, folder, 13).rows_written == 3
    assert runner.last_driver["application_id"] == serving["application_id"]


@pytest.mark.long  # make test-long (CI runs it)
def test_driver_killed_between_jobs_is_replaced_by_a_new_one(warm):
    runner, catalog, folder = warm
    write_window(runner, catalog, folder, 5)
    dead = runner.last_driver
    os.kill(dead["pid"], signal.SIGKILL)
    _wait_gone(dead["pid"])

    assert write_window(runner, catalog, folder, 6).rows_written == 3
    assert runner.last_driver["application_id"] != dead["application_id"]
    assert runner.last_driver["jobs"] == 0


@pytest.mark.long
def test_secret_conf_reaches_the_job_but_not_the_driver_command_line(warm, tmp_path):
    runner, catalog, folder = warm
    spec = changelog_writer_spec(catalog, TABLE, window(7).window_id,
                                 write_change_rows(tmp_path / "7.jsonl", change_rows(window(7), 2)),
                                 tmp_path / "7.result.json", conf=TEST_SPARK_CONF)
    spec = replace(spec, secret_conf={"spark.airflow_cdc.test.token": "canary-warm-7741"})
    runner.run(spec)
    python = runner.last_driver["pid"]
    with open(f"/proc/{python}/stat") as stat:
        jvm = int(stat.read().split(") ", 1)[1].split()[1])
    commands = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().decode() for pid in (python, jvm)}

    assert ChangelogWriteResult.read(tmp_path / "7.result.json").rows_written == 2
    assert "warm_driver.py" in commands[python]
    assert "airflow-cdc-warm-driver" in commands[jvm]  # the JVM that spark-submit started
    assert not any("canary-warm-7741" in command for command in commands.values())


@pytest.mark.long  # make test-long (CI runs it)
def test_busy_driver_makes_the_job_run_cold_after_the_wait(warm, caplog, tmp_path):
    runner, catalog, folder = warm
    spec = changelog_writer_spec(catalog, TABLE, window(8).window_id,
                                 write_change_rows(tmp_path / "8.jsonl", change_rows(window(8), 2)),
                                 tmp_path / "8.result.json", conf=TEST_SPARK_CONF)
    busy = runner.paths(driver_key(spec, runner.master))["busy"]
    impatient = WarmSparkRunner(master="local[2]", idle_seconds=300, state_dir=runner.state_dir,
                                busy_wait_seconds=0.5)
    with caplog.at_level(logging.INFO), _flock(busy, 0) as held:
        assert held
        impatient.run(spec)

    assert ChangelogWriteResult.read(tmp_path / "8.result.json").rows_written == 2
    assert impatient.last_driver is None
    assert any("busy" in r.getMessage() and "cold" in r.getMessage() for r in caplog.records)


@pytest.mark.long  # make test-long (CI runs it)
def test_idle_driver_stops_and_removes_its_socket(tmp_path):
    runner = WarmSparkRunner(master="local[1]", idle_seconds=3, state_dir=tmp_path / "state")
    catalog = IcebergCatalog(warehouse=str(tmp_path / "warehouse"))
    write_window(runner, catalog, tmp_path, 9)
    pid = runner.last_driver["pid"]

    _wait_gone(pid, timeout=120)
    assert list((tmp_path / "state").glob("*.sock")) == []


def test_same_launch_gives_one_key_and_any_launch_difference_another():
    spec = SparkJobSpec("/x/extract.py", conf={"spark.a": "1"}, py_files=("/z/code-abc.zip",),
                        secret_conf={"spark.sql.catalog.lake.token": "one"})
    same = replace(spec, name="another-name", application_args=("--plan", "p.json"),
                   conf={**spec.conf, SECRET_CONF_FILE_KEY: "/proc/1/fd/3"})
    env = {"AIRFLOW_CDC_WORK_ROOT": "/w", "HOME": "/root"}

    assert driver_key(spec, "local[*]", env) == driver_key(same, "local[*]", {**env, "HOME": "/h"})
    assert driver_key(spec, "local[*]", env) != driver_key(spec, "local[2]", env)
    assert driver_key(spec, "local[*]", env) != driver_key(
        replace(spec, py_files=("/z/code-def.zip",)), "local[*]", env)
    assert driver_key(spec, "local[*]", env) != driver_key(
        replace(spec, secret_conf={"spark.sql.catalog.lake.token": "two"}), "local[*]", env)
    assert driver_key(spec, "local[*]", env) != driver_key(
        spec, "local[*]", {**env, "AIRFLOW_CDC_WORK_ROOT": "/v"})


def test_only_our_entry_points_run_warm(tmp_path):
    own = tmp_path / "extract.py"
    own.write_text("")
    from airflow_cdc.spark.job import spark_job_application

    assert warm_module(spark_job_application("extract")) == "extract"
    assert warm_module(str(own)) is None
    assert warm_module(spark_job_application("warm_driver")) is None


def _wait_gone(pid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        # A zombie of this process's own child counts as gone.
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split(") ", 1)[1].startswith("Z"):
                    return
        except OSError:
            return
        time.sleep(0.2)
    raise AssertionError(f"process {pid} still runs after {timeout} s")
