"""Iceberg catalog configuration: Apache Iceberg's jars from the jar folder or Maven Central,
Maven packages on request, JDBC."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
import zipfile
from pathlib import Path

import psycopg2
import pytest

from airflow_cdc.model import InvalidIdentifierError
from airflow_cdc.spark.environment import ICEBERG_VERSION
from airflow_cdc.spark.iceberg import (
    IcebergCatalog,
    jar_file_name,
    local_runtime_package,
    provision_iceberg_jars,
)


def test_make_setup_fills_the_jar_folder_with_icebergs_own_runtime_for_the_local_spark():
    (runtime,) = (Path(p) for p in provision_iceberg_jars())

    assert runtime.name == f"iceberg-spark-runtime-3.5_2.12-{ICEBERG_VERSION}.jar"
    with zipfile.ZipFile(runtime) as jar:
        names = set(jar.namelist())
    # Shaded inside it: Jackson (every catalog) and HttpClient 5 (the REST client).
    assert "org/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactoryBuilder.class" in names
    assert any(name.startswith("org/apache/iceberg/shaded/org/apache/hc/client5/") for name in names)


def test_provisioning_twice_fetches_nothing_again():
    first = provision_iceberg_jars()
    mtime = Path(first[0]).stat().st_mtime_ns

    assert provision_iceberg_jars() == first
    assert Path(first[0]).stat().st_mtime_ns == mtime


def test_a_jar_folder_without_the_runtime_leaves_it_to_sparks_own_resolver(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CDC_JARS_DIR", str(tmp_path / "empty"))

    conf = IcebergCatalog(warehouse=str(tmp_path)).spark_conf()

    assert conf["spark.jars.packages"] == local_runtime_package()
    assert "spark.jars" not in conf and "spark.jars.ivy" not in conf


def test_sparks_resolver_caches_in_the_ivy_folder_the_user_places(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CDC_JARS_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("AIRFLOW_CDC_IVY_DIR", str(tmp_path / "ivy"))

    conf = IcebergCatalog(warehouse=str(tmp_path)).spark_conf()

    assert conf["spark.jars.ivy"] == str(tmp_path / "ivy")


def test_a_fileio_bundle_the_folder_lacks_is_resolved_beside_the_runtime_it_has(tmp_path, monkeypatch):
    folder = tmp_path / "jars"
    folder.mkdir()
    runtime = Path(provision_iceberg_jars()[0])
    (folder / runtime.name).symlink_to(runtime)
    monkeypatch.setenv("AIRFLOW_CDC_JARS_DIR", str(folder))

    conf = IcebergCatalog(warehouse="gs://bucket/lake", io_impl="org.apache.iceberg.gcp.gcs.GCSFileIO").spark_conf()

    assert conf["spark.jars"] == str(folder / runtime.name)
    assert conf["spark.jars.packages"] == f"org.apache.iceberg:iceberg-gcp-bundle:{ICEBERG_VERSION}"


def test_a_maven_coordinate_names_its_jar_file():
    assert jar_file_name("org.apache.iceberg:iceberg-gcp-bundle:1.11.0") == "iceberg-gcp-bundle-1.11.0.jar"
    assert (jar_file_name("com.google.cloud.bigdataoss:gcs-connector:3.1.3:shaded")
            == "gcs-connector-3.1.3-shaded.jar")
    with pytest.raises(ValueError, match="'iceberg-gcp-bundle' is not group:artifact:version"):
        jar_file_name("iceberg-gcp-bundle")


@pytest.mark.long
def test_a_local_spark_without_the_jar_folder_gets_iceberg_from_maven_central(tmp_path):
    script = textwrap.dedent(f"""
        from airflow_cdc.spark.iceberg import IcebergCatalog, local_session
        spark = local_session(IcebergCatalog(warehouse={str(tmp_path / 'lake')!r}), master="local[1]")
        spark.sql("CREATE TABLE lake.maven.t (id bigint) USING iceberg")
        spark.sql("INSERT INTO lake.maven.t VALUES (1), (2)")
        print("rows", spark.table("lake.maven.t").count())
    """)
    env = {**os.environ, "AIRFLOW_CDC_JARS_DIR": str(tmp_path / "no-jars"),
           "AIRFLOW_CDC_IVY_DIR": str(tmp_path / "ivy")}

    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)

    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows 2" in done.stdout
    assert list((tmp_path / "ivy" / "jars").glob("org.apache.iceberg_iceberg-spark-runtime-*.jar"))


def test_hadoop_catalog_conf_points_at_the_warehouse_with_the_jar_folders_runtime(tmp_path):
    conf = IcebergCatalog(name="lake", warehouse=str(tmp_path)).spark_conf()
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lake.type"] == "hadoop"
    assert conf["spark.sql.catalog.lake.warehouse"] == tmp_path.as_uri()
    assert "iceberg-spark-runtime" in conf["spark.jars"]
    assert "spark.jars.packages" not in conf


def test_requested_maven_packages_replace_the_jar_folders_runtime(tmp_path):
    coordinate = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.11.0"
    conf = IcebergCatalog(warehouse=str(tmp_path), packages=[coordinate]).spark_conf()
    assert conf["spark.jars.packages"] == coordinate
    assert "spark.jars" not in conf


def test_jdbc_catalog_without_url_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="has no jdbc_url: pass e.g. jdbc_url="):
        IcebergCatalog(name="meta", kind="jdbc", warehouse="/tmp/w")


def test_catalog_name_must_be_an_identifier():
    with pytest.raises(InvalidIdentifierError, match="Iceberg catalog name 'la-ke'"):
        IcebergCatalog(name="la-ke")


def test_table_names_are_validated_before_sql_is_built(tmp_path):
    catalog = IcebergCatalog(warehouse=str(tmp_path))
    assert catalog.table("cdc", "orders") == "lake.cdc.orders"
    with pytest.raises(InvalidIdentifierError, match="Iceberg table name 'orders; drop'"):
        catalog.table("cdc", "orders; drop")


@pytest.fixture
def postgres_database():
    name = f"iceberg_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="postgres")
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {name}")
    yield name
    admin.cursor().execute(f"DROP DATABASE {name} WITH (FORCE)")
    admin.close()


def test_jdbc_catalog_on_postgresql_keeps_table_pointers_in_the_database(
    spark, tmp_path, postgres_database
):
    catalog = IcebergCatalog(
        name="pgcat",
        kind="jdbc",
        warehouse=str(tmp_path / "jdbc-warehouse"),
        jdbc_url=f"jdbc:postgresql://127.0.0.1:5432/{postgres_database}",
        jdbc_user="postgres",
    )
    # Catalogs are resolved lazily from the SQL conf; the driver jar is on the session already.
    for key, value in catalog.spark_conf().items():
        if key.startswith("spark.sql.catalog."):
            spark.conf.set(key, value)
    spark.sql("CREATE TABLE pgcat.cdc.orders (id BIGINT, status STRING) USING iceberg")
    spark.sql("INSERT INTO pgcat.cdc.orders VALUES (1, 'new'), (2, 'paid')")

    assert spark.sql("SELECT count(*) AS n FROM pgcat.cdc.orders").first().n == 2
    with psycopg2.connect(
        host="127.0.0.1", port=5432, user="postgres", dbname=postgres_database
    ) as conn:
        cur = conn.cursor()
        cur.execute("SELECT table_namespace, table_name FROM iceberg_tables")
        assert cur.fetchall() == [("cdc", "orders")]
