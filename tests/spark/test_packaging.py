"""The --py-files zip: what it holds, when it is rebuilt, and that it imports without Airflow."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from airflow_cdc.spark.packaging import _shipped_folders, build_py_files


def test_py_files_zip_holds_airflow_cdc_with_its_spark_jobs_without_bytecode(tmp_path):
    names = zipfile.ZipFile(build_py_files(cache_dir=tmp_path)).namelist()

    assert {"airflow_cdc/model.py", "airflow_cdc/spark/job.py",
            "airflow_cdc/spark_jobs/changelog.py"} <= set(names)
    assert not [name for name in names if name.startswith("spark_jobs/")]
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]


def test_py_files_zip_ships_a_package_inside_an_earlier_one_once(tmp_path):
    outer = tmp_path / "src" / "pkg"
    (outer / "jobs").mkdir(parents=True)
    (outer / "jobs" / "job.py").write_text("X = 1\n")

    folders = _shipped_folders([("pkg", outer), ("pkg.jobs", outer / "jobs")])

    assert folders == [("pkg", outer)]


def test_py_files_zip_is_reused_while_its_content_is_unchanged(tmp_path):
    first = build_py_files(cache_dir=tmp_path)
    inode = first.stat().st_ino

    again = build_py_files(cache_dir=tmp_path)

    assert again == first
    assert again.stat().st_ino == inode  # not rebuilt (a rebuild renames a new file over it)
    assert list(tmp_path.iterdir()) == [first]


def test_py_files_zip_gets_a_new_name_when_a_file_changes(tmp_path):
    package = tmp_path / "src" / "pkg"
    package.mkdir(parents=True)
    (package / "mod.py").write_text("VALUE = 1\n")
    before = build_py_files(cache_dir=tmp_path / "cache", roots=[package])

    (package / "mod.py").write_text("VALUE = 2\n")
    after = build_py_files(cache_dir=tmp_path / "cache", roots=[package])

    assert after != before
    assert zipfile.ZipFile(after).read("pkg/mod.py") == b"VALUE = 2\n"


def test_py_files_zip_imports_the_spark_side_in_an_interpreter_without_airflow(tmp_path):
    archive = build_py_files(cache_dir=tmp_path)
    # -S: no site-packages, so neither Airflow nor the installed airflow_cdc is importable.
    probe = (
        "import sys, importlib.util\n"
        f"sys.path.insert(0, {str(archive)!r})\n"
        "import airflow_cdc.model, airflow_cdc.spark.job, airflow_cdc.spark.runners\n"
        "jobs = importlib.util.find_spec('airflow_cdc.spark_jobs.changelog').origin\n"
        "print(importlib.util.find_spec('airflow') is None, airflow_cdc.model.__file__, jobs)\n"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe], capture_output=True, text=True, cwd=tmp_path
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "True", f"{archive}/airflow_cdc/model.py", f"{archive}/airflow_cdc/spark_jobs/changelog.py"
    ]
