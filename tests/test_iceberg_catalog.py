"""Iceberg catalog configuration: offline jars by default, Maven packages on request, JDBC."""

from __future__ import annotations

import uuid
import zipfile
from pathlib import Path

import psycopg2
import pytest

from airflow_cdc.model import InvalidIdentifierError
from airflow_cdc.spark.iceberg import IcebergCatalog, provision_iceberg_jars


def test_offline_provisioning_gives_runtime_and_relocated_jackson_jars():
    runtime, jackson = (Path(p) for p in provision_iceberg_jars())
    assert runtime.name.startswith("iceberg-spark-runtime-3.5_2.12-")
    with zipfile.ZipFile(jackson) as jar:
        names = jar.namelist()
    assert "org/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactoryBuilder.class" in names
    assert not any(name.startswith("com/fasterxml/") for name in names)


def test_provisioning_twice_reuses_the_built_jar():
    first = provision_iceberg_jars()
    mtime = Path(first[1]).stat().st_mtime_ns
    assert provision_iceberg_jars() == first
    assert Path(first[1]).stat().st_mtime_ns == mtime


def test_hadoop_catalog_conf_points_at_the_warehouse_with_offline_jars(tmp_path):
    conf = IcebergCatalog(name="lake", warehouse=str(tmp_path)).spark_conf()
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lake.type"] == "hadoop"
    assert conf["spark.sql.catalog.lake.warehouse"] == tmp_path.as_uri()
    assert "iceberg-spark-runtime" in conf["spark.jars"]
    assert "spark.jars.packages" not in conf


def test_requested_maven_packages_replace_the_offline_jars(tmp_path):
    coordinate = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"
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
