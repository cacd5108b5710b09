"""airflow-cdc doctor when Spark would find no Java: the problem names what the machine has."""

import shutil
from pathlib import Path

import pytest

from airflow_cdc.cli import doctor_report, missing_java_problem


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a java on PATH")
def test_a_java_home_that_points_nowhere_is_named_with_the_java_on_path(tmp_path, monkeypatch):
    nowhere = tmp_path / "no-such-jdk"
    monkeypatch.setenv("JAVA_HOME", str(nowhere))

    _, problems = doctor_report()

    on_path = str(Path(shutil.which("java")).resolve())
    [problem] = [p for p in problems if "JAVA_HOME" in p]
    assert f"JAVA_HOME={nowhere} has no bin/java" in problem
    assert f"java on PATH is {on_path}" in problem


def test_without_any_java_the_problem_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.setattr("airflow_cdc.cli.JVM_FOLDER", tmp_path / "jvm")
    monkeypatch.setattr("airflow_cdc.spark.environment.java_home", lambda environ=None: None)

    problem = missing_java_problem({"PATH": str(tmp_path)})

    assert "install Java 17" in problem


def test_the_javas_of_the_jvm_folder_are_listed(tmp_path, monkeypatch):
    jdk = tmp_path / "jvm" / "temurin-17"
    (jdk / "bin").mkdir(parents=True)
    (jdk / "bin" / "java").write_text("#!/bin/sh\n")
    monkeypatch.setattr("airflow_cdc.cli.JVM_FOLDER", tmp_path / "jvm")
    monkeypatch.setattr("airflow_cdc.spark.environment.java_home", lambda environ=None: None)

    problem = missing_java_problem({"JAVA_HOME": "/opt/gone", "PATH": str(tmp_path)})

    assert problem.startswith("JAVA_HOME=/opt/gone has no bin/java")
    assert str(jdk) in problem

