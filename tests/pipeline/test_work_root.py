"""The work root as a URI: the Airflow side and the Spark side share nothing but ``gs://...``.

The hand-over files (plan, source overrides, outcome, results, the apply job's file) live on a
local GCS emulator (``gcp-storage-emulator``, reached through ``STORAGE_EMULATOR_HOST`` like
the real service); the Spark jobs run as their own ``spark-submit`` processes in a folder of
their own and read and write those files through the URI only.
"""

from __future__ import annotations

import os
import stat

import pytest

from airflow_cdc import work_root
from airflow_cdc.work_root import work_path

BUCKET = "cdc-work"


@pytest.fixture(scope="module")
def gcs():
    from demo.cluster import GcsEmulator

    patch = pytest.MonkeyPatch()
    with GcsEmulator(BUCKET) as server:
        patch.setenv("STORAGE_EMULATOR_HOST", server.url)
        yield server.url
    patch.undo()


def test_a_folder_work_root_gives_paths_and_private_files_are_owner_only(tmp_path):
    path = work_path(str(tmp_path), "stream", "window", "plan.json")

    work_root.write_text(path, "{}", private=True)

    assert path == tmp_path / "stream" / "window" / "plan.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert work_path(f"file://{tmp_path}", "x") == tmp_path / "x"


def test_a_gs_work_root_reads_writes_and_removes_objects_on_the_emulator(gcs):
    path = work_path(f"gs://{BUCKET}/roots/a", "stream", "plan.json")

    work_root.write_text(path, '{"a": 1}', private=True)
    text, there = work_root.read_text(str(path)), path.exists()
    work_root.remove(path)

    assert str(path) == f"gs://{BUCKET}/roots/a/stream/plan.json"
    assert (text, there, path.exists()) == ('{"a": 1}', True, False)


@pytest.mark.long  # make test-long (CI runs it)
def test_a_pipeline_whose_sides_share_only_the_gs_work_root_applies_its_window(
        gcs, tmp_path, monkeypatch):
    """Plan and commit here; extract and apply as spark-submit jobs started in another folder;
    the only thing both see is the gs:// work root (the warehouse is the catalog's)."""
    from airflow_cdc.spark.iceberg import IcebergCatalog
    from tests.commit_ts_window import run_split_window

    root = f"gs://{BUCKET}/cdc-work"
    catalog = IcebergCatalog(name="lake", warehouse=str(tmp_path / "warehouse"))
    run = run_split_window(tmp_path, monkeypatch, stream="shared_root", catalog=catalog,
                           work_root_uri=root, target_namespace="shared_t",
                           env={"STORAGE_EMULATOR_HOST": gcs})
    folder, applied = run.folder, run.applied
    airflow_side, spark_side = run.airflow_side, run.spark_side

    from demo.compare import read_iceberg_rows

    rows = read_iceberg_rows(tmp_path / "warehouse" / "shared_t" / "Orders")
    assert str(folder).startswith(root)
    assert sorted(r["OrderId"] for r in rows) == [1, 2, 3]
    assert applied["tables"][0]["upserts"] == 3
    assert list(airflow_side.iterdir()) == [] and [
        p.name for p in spark_side.iterdir() if p.suffix == ".json"] == []
    assert {p.name for p in folder.iterdir()} >= {
        "plan.json", "outcome.json", "extract-result.json", "apply-job.json", "apply-result.json"}
