"""Which Spark is here and which Iceberg runtime fits it: read from files, pyspark never imported."""

from __future__ import annotations

import pytest

from airflow_cdc.spark.environment import (
    UnsupportedSparkError,
    find_spark,
    iceberg_runtime_package,
)
from airflow_cdc.spark.iceberg import IcebergCatalog, IcebergProvisioningError


def spark_home(tmp_path, version: str, scala: str):
    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    (jars / f"spark-core_{scala}-{version}.jar").write_bytes(b"")
    (jars / f"scala-library-{scala}.15.jar").write_bytes(b"")
    return tmp_path / "spark"


@pytest.mark.parametrize(("spark", "scala", "expected"), [
    ("3.5", None, "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.11.0"),
    ("3.5.1", "2.13", "org.apache.iceberg:iceberg-spark-runtime-3.5_2.13:1.11.0"),
    ("4.0.1", None, "org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.11.0"),
    ("4.1.2", None, "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.11.0"),
])
def test_the_iceberg_runtime_is_chosen_by_spark_version(spark, scala, expected):
    assert iceberg_runtime_package(spark, scala) == expected


def test_a_spark_without_an_iceberg_runtime_is_refused_naming_the_supported_ones():
    with pytest.raises(UnsupportedSparkError, match=r"Spark 3.3.2 has no Iceberg .* supported are Spark \['3.5', '4.0', '4.1'\]"):
        iceberg_runtime_package("3.3.2")


def test_spark_4_with_scala_2_12_is_refused():
    with pytest.raises(UnsupportedSparkError, match=r"Spark 4.0 with Scala 2.12 has no Iceberg runtime"):
        iceberg_runtime_package("4.0.0", "2.12")


def test_spark_home_is_found_before_this_interpreters_pyspark(tmp_path):
    found = find_spark({"SPARK_HOME": str(spark_home(tmp_path, "4.0.1", "2.13"))})

    assert (found.version, found.scala, found.found_by) == ("4.0.1", "2.13", "SPARK_HOME")


def test_without_spark_home_this_interpreters_pyspark_is_found():
    found = find_spark({})

    assert found.found_by == "pyspark" and found.minor == "3.5"


def test_a_catalog_for_a_cluster_names_the_runtime_of_the_clusters_spark():
    conf = IcebergCatalog(spark_version="4.0", warehouse="gs://bucket/lake").spark_conf()

    assert conf["spark.jars.packages"] == "org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.11.0"
    assert "spark.jars" not in conf


def test_a_catalog_with_no_spark_to_choose_for_names_the_fix(monkeypatch):
    monkeypatch.setattr("airflow_cdc.spark.environment.find_spark", lambda: None)

    with pytest.raises(IcebergProvisioningError, match=r"no Spark was found here .*IcebergCatalog\(spark_version='3.5'\)"):
        IcebergCatalog(warehouse="/tmp/lake").spark_conf()


def test_the_doctor_reports_this_install_without_problems():
    from airflow_cdc.cli import doctor_report

    lines, problems = doctor_report()

    assert problems == []
    assert any(line.startswith("spark: 3.5.") for line in lines)


def test_the_java_in_use_follows_java_home_before_path(tmp_path):
    from airflow_cdc.spark.environment import java_in_use

    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text('#!/bin/sh\necho \'openjdk version "21.0.2" 2024-01-16\' >&2\n')
    java.chmod(0o755)

    found = java_in_use({"JAVA_HOME": str(home), "PATH": "/usr/bin:/bin"})

    assert (found.path, found.major, found.found_by) == (str(java), 21, "$JAVA_HOME")


def test_the_java_in_use_reads_java_8_from_its_old_version_text(tmp_path):
    from airflow_cdc.spark.environment import java_in_use

    (tmp_path / "java").write_text('#!/bin/sh\necho \'openjdk version "1.8.0_402"\' >&2\n')
    (tmp_path / "java").chmod(0o755)

    assert java_in_use({"PATH": str(tmp_path)}).major == 8


def test_the_doctor_names_the_java_a_run_uses():
    from airflow_cdc.cli import doctor_report

    lines, _ = doctor_report()

    java = [line for line in lines if line.startswith("java: ")]
    assert len(java) == 1 and "found by" in java[0] and 'version "17' in java[0]
