"""The Spark driver's class archive (airflow_cdc/spark/class_archive.py): named in the driver's
Java options when the machine has one, mapped by the driver JVM that spark-submit starts."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from airflow_cdc.spark.class_archive import (
    ARCHIVE_ENV,
    DRIVER_JAVA_OPTIONS,
    STALE_AFTER_SECONDS,
    archive_path,
    build_archive,
    prune_archives,
)
from airflow_cdc.spark.iceberg import IcebergCatalog
from airflow_cdc.spark.job import SparkJobSpec, iceberg_job_spec
from airflow_cdc.spark.runners import LocalSparkRunner

EMPTY_APPLICATION = "from pyspark.sql import SparkSession\nSparkSession.builder.getOrCreate().stop()\n"
# How -Xlog:class+load names a class the JVM took from a dynamic class archive.
FROM_ARCHIVE = "source: shared objects file (top)"


def conf_of(command: list[str]) -> dict[str, str]:
    return dict(command[i + 1].split("=", 1) for i, part in enumerate(command) if part == "--conf")


@pytest.fixture
def archive(tmp_path, monkeypatch) -> Path:
    """A class archive file the runner finds (its content is the JVM's business)."""
    path = tmp_path / "driver.jsa"
    path.write_bytes(b"archive")
    monkeypatch.setenv(ARCHIVE_ENV, str(path))
    return path


def test_a_jobs_driver_maps_the_class_archive_when_the_machine_has_one(archive):
    command = LocalSparkRunner(spark_submit="spark-submit").command(SparkJobSpec("app.py"))

    assert conf_of(command)[DRIVER_JAVA_OPTIONS] == f"-XX:SharedArchiveFile={archive}"


def test_the_users_own_driver_java_options_are_kept_beside_the_class_archive(archive):
    spec = SparkJobSpec("app.py", conf={DRIVER_JAVA_OPTIONS: "-Dmy.flag=1"})

    command = LocalSparkRunner(spark_submit="spark-submit").command(spec)

    assert conf_of(command)[DRIVER_JAVA_OPTIONS] == f"-Dmy.flag=1 -XX:SharedArchiveFile={archive}"


@pytest.mark.parametrize("setting", ["missing", "off", "runner"])
def test_no_class_archive_option_without_an_archive_or_when_turned_off(tmp_path, monkeypatch, setting):
    archive = tmp_path / "driver.jsa"
    if setting != "missing":
        archive.write_bytes(b"archive")
    monkeypatch.setenv(ARCHIVE_ENV, "off" if setting == "off" else str(archive))

    runner = LocalSparkRunner(spark_submit="spark-submit", class_archive=setting != "runner")
    command = runner.command(SparkJobSpec("app.py"))

    assert DRIVER_JAVA_OPTIONS not in conf_of(command)


def test_the_users_own_class_sharing_choice_is_left_alone(archive):
    spec = SparkJobSpec("app.py", conf={DRIVER_JAVA_OPTIONS: "-Xshare:off"})

    command = LocalSparkRunner(spark_submit="spark-submit").command(spec)

    assert conf_of(command)[DRIVER_JAVA_OPTIONS] == "-Xshare:off"


def test_archives_no_driver_mapped_for_a_week_are_removed_and_others_kept(tmp_path):
    import os
    import time

    built, recent, stale = (tmp_path / f"spark-driver-{key}.jsa" for key in ("new", "recent", "stale"))
    other = tmp_path / "notes.jsa"
    for path in (built, recent, stale, other):
        path.write_bytes(b"archive")
    week_ago = time.time() - STALE_AFTER_SECONDS - 60
    for path in (built, stale, other):
        os.utime(path, (week_ago, week_ago))

    removed = prune_archives(tmp_path, keep=built)

    assert removed == [stale]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (built, recent, other))


def test_naming_the_archive_in_a_job_marks_it_used_so_pruning_keeps_it(tmp_path, monkeypatch):
    import os
    import time

    archive = tmp_path / "spark-driver-inuse.jsa"
    archive.write_bytes(b"archive")
    monkeypatch.setenv(ARCHIVE_ENV, str(archive))
    week_ago = time.time() - STALE_AFTER_SECONDS - 60
    os.utime(archive, (week_ago, week_ago))

    LocalSparkRunner(spark_submit="spark-submit").command(SparkJobSpec("app.py"))

    assert archive.stat().st_mtime > week_ago + 60
    assert prune_archives(archive.parent, keep=archive.parent / "spark-driver-other.jsa") == []


def classes_from_archive(work: Path) -> int:
    """Run an empty PySpark application through the runner (Iceberg conf, as a window's jobs);
    the classes its driver took from a class archive."""
    application = work / "empty.py"
    application.write_text(EMPTY_APPLICATION)
    loaded = work / "class-load.log"
    spec = iceberg_job_spec("extract", IcebergCatalog(warehouse=str(work / "warehouse")), [], name="archive-check",
                            conf={DRIVER_JAVA_OPTIONS: f"-Xlog:class+load=info:file={loaded}"})
    spec = replace(spec, application=str(application))
    runner = LocalSparkRunner(master="local[1]")
    subprocess.run(runner.command(spec), env=runner.environment(spec), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    return sum(FROM_ARCHIVE in line for line in loaded.read_text().splitlines())


# Writes, merges and reads an Iceberg table: the classes a window's jobs load, and a result to compare.
TABLE_APPLICATION = """\
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
spark.sql("CREATE TABLE lake.db.t (id bigint, v string) USING iceberg")
spark.createDataFrame([(1, "a"), (2, "b")], "id bigint, v string").writeTo("lake.db.t").append()
spark.createDataFrame([(2, "c"), (3, "d")], "id bigint, v string").createOrReplaceTempView("changes")
spark.sql("MERGE INTO lake.db.t t USING changes s ON t.id = s.id "
          "WHEN MATCHED THEN UPDATE SET t.v = s.v WHEN NOT MATCHED THEN INSERT *")
print("RESULT", sorted((r.id, r.v) for r in spark.table("lake.db.t").collect()))
spark.stop()
"""


def table_result(work: Path, class_archive: bool) -> tuple[list[str], int]:
    """The result lines of TABLE_APPLICATION run through the runner, and how many classes its
    driver took from a class archive."""
    application = work / "table.py"
    application.write_text(TABLE_APPLICATION)
    loaded = work / "class-load.log"
    spec = iceberg_job_spec("extract", IcebergCatalog(name="lake", warehouse=str(work / "warehouse")), [],
                            name="archive-equivalence",
                            conf={DRIVER_JAVA_OPTIONS: f"-Xlog:class+load=info:file={loaded}"})
    spec = replace(spec, application=str(application))
    runner = LocalSparkRunner(master="local[1]", class_archive=class_archive)
    done = subprocess.run(runner.command(spec), env=runner.environment(spec), check=True,
                          capture_output=True, text=True, timeout=300)
    from_archive = sum(FROM_ARCHIVE in line for line in loaded.read_text().splitlines())
    return [line for line in done.stdout.splitlines() if line.startswith("RESULT")], from_archive


def test_a_job_gives_the_same_result_with_the_class_archive_make_setup_built_and_without(tmp_path):
    path = archive_path()
    if path is None or not path.is_file():
        pytest.fail(f"no class archive at {path}: `make setup` builds it "
                    f"(python -m airflow_cdc.spark.class_archive), and said why if it could not")
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()

    with_archive, mapped = table_result(tmp_path / "on", class_archive=True)
    without, not_mapped = table_result(tmp_path / "off", class_archive=False)

    assert mapped > 1000 and not_mapped == 0
    assert with_archive == without == ["RESULT [(1, 'a'), (2, 'c'), (3, 'd')]"]


@pytest.mark.long
def test_a_built_class_archive_is_mapped_by_the_next_driver(tmp_path, monkeypatch):
    archive = tmp_path / "built.jsa"
    monkeypatch.setenv(ARCHIVE_ENV, str(archive))

    assert build_archive(archive) == archive
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]
    assert classes_from_archive(tmp_path) > 1000
