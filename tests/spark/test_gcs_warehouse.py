"""A local Spark writes a ``gs://`` Iceberg warehouse and a ``gs://`` work root.

The catalog is what a user on GCS runs without Dataproc: a JDBC catalog (the table pointers
in a database; SQLite here, Cloud SQL there) whose tables live in a bucket, read and written
through Iceberg's own GCSFileIO (``iceberg-gcp-bundle`` from Maven Central, in the jar folder);
the work root's hand-over files are objects in the same bucket. The bucket is a local GCS
emulator (``gcp-storage-emulator``) named to the catalog by ``storage_emulator_host`` and to
the Python side by ``STORAGE_EMULATOR_HOST``. The Spark jobs are ``spark-submit --master
local`` processes; the tables are read back with pyiceberg, an independent reader.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from airflow_cdc import work_root

BUCKET = "cdc-lake"
LOCAL_TABLE_FILES = ("*.parquet", "*.avro", "*.metadata.json", "version-hint.text")


@pytest.fixture(scope="module")
def gcs_jars() -> list[str]:
    """The Iceberg runtime, iceberg-gcp-bundle and the GCS connector in the jar folder,
    fetched once (what ``python -m airflow_cdc.spark.iceberg iceberg-gcp-bundle
    gcs-connector`` does)."""
    from airflow_cdc.spark.iceberg import provision_iceberg_jars

    return provision_iceberg_jars(("iceberg-gcp-bundle", "gcs-connector"))


@pytest.fixture(scope="module")
def gcs():
    """The GCS emulator with the bucket, and ``STORAGE_EMULATOR_HOST`` naming it."""
    from demo.cluster import GcsEmulator

    patch = pytest.MonkeyPatch()
    with GcsEmulator(BUCKET) as server:
        patch.setenv("STORAGE_EMULATOR_HOST", server.url)
        yield server.url
    patch.undo()


def bucket_objects(prefix: str) -> list[str]:
    """The names of the emulator bucket's objects under ``prefix``, through gcsfs."""
    fs, path = work_root._object(f"gs://{BUCKET}/{prefix}")
    fs.invalidate_cache()
    return sorted(p[len(f"{BUCKET}/"):] for p in fs.find(path))


def local_table_files(*folders: Path) -> list[Path]:
    return [p for folder in folders for pattern in LOCAL_TABLE_FILES for p in folder.rglob(pattern)]


def read_table(catalog_db: Path, namespace: str, name: str, emulator: str) -> list[dict]:
    """The rows of a JDBC-catalog table: its metadata pointer from the catalog's database,
    the table read by pyiceberg through gcsfs from the emulator."""
    from pyiceberg.table import StaticTable

    with sqlite3.connect(catalog_db) as db:
        (location,) = db.execute(
            "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = ? "
            "AND table_name = ?", (namespace, name)).fetchone()
    table = StaticTable.from_metadata(location, {
        "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
        "gcs.service.host": emulator, "gcs.oauth2.token": "anon"})
    return table.scan().to_arrow().to_pylist()


def test_an_extract_and_an_apply_into_a_gs_warehouse_keep_every_file_in_the_bucket(
        gcs_jars, gcs, tmp_path, monkeypatch):
    """Plan and commit here; extract and apply as spark-submit jobs in another folder; the
    warehouse and the work root are both in the bucket, nothing of either on local disk."""
    from airflow_cdc.spark.iceberg import IcebergCatalog
    from tests.commit_ts_window import run_split_window

    catalog_db = tmp_path / "catalog.db"
    catalog = IcebergCatalog(name="lake", kind="jdbc", jdbc_url=f"jdbc:sqlite:{catalog_db}",
                             warehouse=f"gs://{BUCKET}/warehouse", storage_emulator_host=gcs)
    run = run_split_window(tmp_path, monkeypatch, stream="gcs_lake", catalog=catalog,
                           work_root_uri=f"gs://{BUCKET}/work", target_namespace="gcs_t",
                           env={"STORAGE_EMULATOR_HOST": gcs})
    config, applied = run.config, run.applied
    airflow_side, spark_side = run.airflow_side, run.spark_side

    rows = read_table(catalog_db, "gcs_t", "Orders", gcs)
    changelog_namespace, changelog_name = config.changelog_table.split(".")
    changelog = read_table(catalog_db, changelog_namespace, changelog_name, gcs)
    warehouse, work = bucket_objects("warehouse"), bucket_objects("work")
    assert sorted((r["OrderId"], r["CustomerName"]) for r in rows) == [(1, "o1"), (2, "o2"), (3, "o3")]
    assert applied["tables"][0]["upserts"] == 3 and len(changelog) == 3
    for table in ("warehouse/gcs_t/Orders/", f"warehouse/{changelog_namespace}/{changelog_name}/"):
        assert any(n.startswith(f"{table}data/") and n.endswith(".parquet") for n in warehouse)
        assert any(n.startswith(f"{table}metadata/") and n.endswith(".metadata.json") for n in warehouse)
        assert any(n.startswith(f"{table}metadata/snap-") and n.endswith(".avro") for n in warehouse)
    assert {n.rpartition("/")[2] for n in work} >= {
        "plan.json", "outcome.json", "extract-result.json", "apply-job.json", "apply-result.json"}
    assert local_table_files(tmp_path) == []
    assert [p.name for p in spark_side.rglob("*.json")] == [] and list(airflow_side.iterdir()) == []


HADOOP_GS_JOB = """
import json, sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
spark.sql("CREATE TABLE lake.cdc.orders (id BIGINT, name STRING) USING iceberg")
spark.sql("INSERT INTO lake.cdc.orders VALUES (1, 'a'), (2, 'b')")
staged = sys.argv[1]
spark.table("lake.cdc.orders").write.parquet(staged)
rows = sorted(tuple(r) for r in spark.read.parquet(staged).collect())
print("ROWS " + json.dumps(rows))
"""


def test_a_hadoop_catalog_on_gs_and_sparks_own_gs_files_go_through_the_gcs_connector(
        gcs_jars, tmp_path, monkeypatch):
    """A Hadoop catalog commits by renaming in its file system, and Spark's own readers and
    writers of gs:// paths use Hadoop's file systems: both go through the GCS connector
    (on fake-gcs-server, which serves the connector's batch requests)."""
    from airflow_cdc.spark.iceberg import IcebergCatalog
    from airflow_cdc.spark.job import SparkJobSpec
    from airflow_cdc.spark.runners import LocalSparkRunner

    from .fake_gcs import FakeGcsServer

    app = tmp_path / "hadoop_gs_job.py"
    app.write_text(HADOOP_GS_JOB)
    monkeypatch.chdir(tmp_path)
    with FakeGcsServer(BUCKET) as server:
        catalog = IcebergCatalog(warehouse=f"gs://{BUCKET}/warehouse",
                                 storage_emulator_host=server.url)
        result = LocalSparkRunner(master="local[1]").run(SparkJobSpec(
            str(app), application_args=(f"gs://{BUCKET}/work/staged",), name="hadoop-gs",
            conf={**catalog.spark_conf(), "spark.ui.enabled": "false"}))
        warehouse, work = server.objects("warehouse/"), server.objects("work/")

    printed = [line for line in result.log_tail if line.startswith("ROWS ")]
    assert json.loads(printed[-1][len("ROWS "):]) == [[1, "a"], [2, "b"]]
    table = "warehouse/cdc/orders/"
    assert any(n.startswith(f"{table}data/") and n.endswith(".parquet") for n in warehouse)
    assert {f"{table}metadata/v2.metadata.json", f"{table}metadata/version-hint.text"} <= set(warehouse)
    assert any(n.startswith("work/staged/part-") and n.endswith(".parquet") for n in work)
    assert local_table_files(tmp_path) == []


def test_a_jdbc_catalog_on_gcs_takes_gcsfileio_and_points_both_clients_at_the_emulator(gcs_jars):
    from airflow_cdc.spark.iceberg import IcebergCatalog, jar_file_name, local_gcs_connector_package

    conf = IcebergCatalog(kind="jdbc", jdbc_url="jdbc:sqlite:/tmp/c.db", warehouse="gs://b/wh",
                          storage_emulator_host="127.0.0.1:4443").spark_conf()

    assert {k: v for k, v in conf.items() if ".gcs." in k or "io-impl" in k or "fs.gs." in k} == {
        "spark.sql.catalog.lake.io-impl": "org.apache.iceberg.gcp.gcs.GCSFileIO",
        "spark.sql.catalog.lake.gcs.service.host": "http://127.0.0.1:4443",
        "spark.sql.catalog.lake.gcs.no-auth.enabled": "true",
        "spark.sql.catalog.lake.gcs.project-id": "local-emulator",
        "spark.hadoop.fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
        "spark.hadoop.fs.gs.storage.root.url": "http://127.0.0.1:4443/",
        "spark.hadoop.fs.gs.project.id": "local-emulator",
        "spark.hadoop.fs.gs.auth.type": "UNAUTHENTICATED",
        "spark.hadoop.fs.gs.auth.service.account.enable": "false",
        "spark.hadoop.fs.gs.auth.null.enable": "true",
        "spark.hadoop.fs.gs.operation.move.enable": "false",
    }
    assert {Path(jar).name for jar in conf["spark.jars"].split(",")} >= {
        "iceberg-gcp-bundle-1.11.0.jar", jar_file_name(local_gcs_connector_package())}


def test_an_emulator_for_a_warehouse_off_gcs_is_refused_naming_the_warehouse(tmp_path):
    from airflow_cdc.spark.iceberg import IcebergCatalog

    with pytest.raises(ValueError, match=f"warehouse '{tmp_path}' is not on GCS: give a gs://"):
        IcebergCatalog(warehouse=str(tmp_path), storage_emulator_host="http://127.0.0.1:4443")


def test_the_doctor_names_the_gcs_connector_of_a_gs_warehouse_and_reports_it_missing(
        gcs_jars, tmp_path, monkeypatch):
    from airflow_cdc.cli import doctor_report
    from airflow_cdc.spark.iceberg import jar_file_name, local_gcs_connector_package

    connector = local_gcs_connector_package()
    monkeypatch.setenv("AIRFLOW_CDC_WAREHOUSE", "gs://b/warehouse")
    lines, _ = doctor_report()
    folder = tmp_path / "jars"  # a jar folder with the runtime only
    folder.mkdir()
    runtime = next(Path(jar) for jar in gcs_jars if "iceberg-spark-runtime" in jar)
    (folder / runtime.name).symlink_to(runtime)
    monkeypatch.setenv("AIRFLOW_CDC_JARS_DIR", str(folder))
    _, problems = doctor_report()

    assert any(line.startswith("gcs connector: ") and line.split()[2].endswith(
        jar_file_name(connector)) for line in lines)
    assert [p for p in problems if "GCS connector" in p] == [
        f"Iceberg catalog 'lake' has warehouse 'gs://b/warehouse', and the jar folder {folder} "
        f"lacks the GCS connector ({jar_file_name(connector)}) a local Spark opens gs:// "
        f"paths with: run 'python -m airflow_cdc.spark.iceberg iceberg-gcp-bundle "
        f"gcs-connector' (Maven fetches {connector}), or put that jar there"]


def test_an_iceberg_catalog_connection_names_the_gcs_emulator_of_its_gs_warehouse(monkeypatch):
    from airflow_cdc.hooks.iceberg_catalog import IcebergCatalogHook

    monkeypatch.setenv("AIRFLOW_CONN_GCS_LAKE", json.dumps({
        "conn_type": "iceberg_catalog", "host": "jdbc:sqlite:/tmp/catalog.db",
        "schema": "gs://b/warehouse", "extra": {"storage_emulator_host": "http://127.0.0.1:4443"}}))

    catalog = IcebergCatalogHook(iceberg_conn_id="gcs_lake").get_catalog()

    assert (catalog.kind, catalog.io_impl, catalog.storage_emulator_host) == (
        "jdbc", "org.apache.iceberg.gcp.gcs.GCSFileIO", "http://127.0.0.1:4443")
