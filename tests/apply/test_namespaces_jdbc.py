"""The first window's apply on a new JDBC catalog: the target namespace is created once, before
the tables' commit threads, so no two threads insert it into ``iceberg_namespace_properties``."""

from __future__ import annotations

import threading
import uuid

import pytest

from .support import STREAM, Changes, at, window, write_changelog

CATALOG = "nsrace"


@pytest.fixture
def jdbc_lake(spark, tmp_path):
    """A JDBC catalog in a fresh PostgreSQL database, configured on the suite's session."""
    import psycopg

    from airflow_cdc.spark.iceberg import IcebergCatalog

    database = f"cdc_ns_{uuid.uuid4().hex[:12]}"
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    catalog = IcebergCatalog(name=CATALOG, kind="jdbc", warehouse=str(tmp_path / "lake"),
                             jdbc_url=f"jdbc:postgresql://127.0.0.1:5432/{database}",
                             jdbc_user="postgres", jdbc_password="unused")
    for key, value in {**catalog.spark_conf(), **catalog.secret_conf()}.items():
        if key.startswith(f"spark.sql.catalog.{CATALOG}"):
            spark.conf.set(key, value)
    return f"host=127.0.0.1 user=postgres dbname={database}"


def test_the_first_windows_apply_of_two_tables_on_a_new_jdbc_catalog_creates_their_namespace_once(
    spark, jdbc_lake
):
    import psycopg

    from airflow_cdc.spark_jobs.apply import apply_window

    win = window(0)
    orders, items = Changes("orders", {"id": "INT64", "v": "STRING"}), Changes("items", {"id": "INT64"})
    orders.add(win, "INSERT", 1, {"id": 1, "v": "a"}, when=at(0, 1))
    items.add(win, "INSERT", 2, {"id": 2}, when=at(0, 2))
    write_changelog(spark, f"{CATALOG}.cdc.{STREAM}_changelog", orders.rows + items.rows)
    # Inserts into the namespace table wait while this lock is held (reads do not): threads
    # that each found the namespace missing would all be waiting to insert it when it ends.
    with psycopg.connect(jdbc_lake) as locker:
        locker.execute("LOCK TABLE iceberg_namespace_properties IN EXCLUSIVE MODE")
        threading.Timer(5, locker.commit).start()
        result = apply_window(spark, {
            "catalog": CATALOG, "stream": STREAM, "window_id": win.window_id,
            "changelog_table": f"cdc.{STREAM}_changelog", "targets": {"namespace": "current"},
            "policies": {},
        })

    assert result.status == "applied"
    assert [r.id for r in spark.table(f"{CATALOG}.current.orders").collect()] == [1]
    assert [r.id for r in spark.table(f"{CATALOG}.current.items").collect()] == [2]
