"""Warehouses and work roots given as URIs stay whole wherever they are taken.

A warehouse or work root on shared storage (``gs://``, ``s3://``, ``abfss://`` with its
account, ``hdfs://`` with its name node and port) is what lets every worker and every Spark
driver see the same tables and hand-over files. Read as a path, ``gs://b/p`` collapses to
``gs:/b/p``, a folder under the worker's working directory; re-spelled from parsed parts,
``abfss://c@account...`` loses its account and ``hdfs://nn:8020`` its name node. Either way
each process keeps its own short-lived copy, silently.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_cdc.assets import iceberg_location
from airflow_cdc.hooks.iceberg_catalog import catalog_from_connection
from airflow_cdc.model import Window
from airflow_cdc.pipeline.work_folder import default_work_root
from airflow_cdc.pipeline.protocol import StreamConfig
from airflow_cdc.spark.dataproc import DataprocRun, secret_uri_of
from airflow_cdc.spark.iceberg import IcebergCatalog, default_warehouse
from airflow_cdc.work_root import work_path

PROPERTY = settings(max_examples=150, deadline=None, database=None)
WAREHOUSE_KEY = "spark.sql.catalog.lake.warehouse"
WINDOW = Window("orders", datetime(2030, 1, 1, tzinfo=timezone.utc),
                datetime(2030, 1, 1, 1, tzinfo=timezone.utc))

_name = st.from_regex(r"[a-z0-9][a-z0-9-]{1,14}[a-z0-9]", fullmatch=True)
_segments = st.lists(st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,11}", fullmatch=True),
                     min_size=1, max_size=3).map("/".join)
_authority = st.one_of(
    st.tuples(st.sampled_from(["gs", "s3", "s3a"]), _name).map(lambda t: f"{t[0]}://{t[1]}"),
    st.tuples(st.sampled_from(["abfss", "abfs"]), _name, _name).map(
        lambda t: f"{t[0]}://{t[1]}@{t[2]}.dfs.core.windows.net"),
    st.tuples(_name, st.integers(1, 65535)).map(lambda t: f"hdfs://{t[0]}:{t[1]}"),
)
# A URI on shared storage: scheme, its bucket / container@account / namenode:port, a prefix.
SHARED_URIS = st.tuples(_authority, _segments).map(lambda t: f"{t[0]}/{t[1]}")
LOCAL_FILE_URIS = _segments.map(lambda path: f"file:///tmp/{path}")


def test_a_gs_warehouse_from_the_environment_is_the_catalogs_warehouse(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CDC_WAREHOUSE", "gs://bucket/prefix")

    assert IcebergCatalog().catalog_properties()[WAREHOUSE_KEY] == "gs://bucket/prefix"


@PROPERTY
@given(uri=st.one_of(SHARED_URIS, LOCAL_FILE_URIS))
def test_every_warehouse_uri_reaches_the_spark_conf_whole(uri):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_CDC_WAREHOUSE", uri)
        from_environment = IcebergCatalog(kind="jdbc", jdbc_url="jdbc:sqlite:/tmp/c.db")
        default = default_warehouse()
    given_one = IcebergCatalog(warehouse=uri)
    from_connection = catalog_from_connection(
        "lake_conn", host=None, port=None, schema=uri, login=None, password=None, extra={})

    assert default == uri
    assert [c.catalog_properties()[WAREHOUSE_KEY]
            for c in (from_environment, given_one, from_connection)] == [uri, uri, uri]
    assert iceberg_location(given_one, "cdc", "orders") == f"{uri}/cdc/orders"


@PROPERTY
@given(uri=SHARED_URIS)
def test_every_work_root_uri_names_the_hand_over_files_under_the_whole_uri(uri):
    config = StreamConfig("orders", "spanner", {}, work_root=uri)
    run = DataprocRun("job", "cdc-extract", "project", "region", "job-1")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_CDC_WORK_ROOT", uri)
        default = default_work_root()

    plan = config.plan_path(WINDOW)

    assert default == uri
    assert str(plan) == f"{uri}/orders/20300101T000000.000000Z_20300101T010000.000000Z/plan.json"
    assert str(plan.parent / "outcome.json") == str(config.outcome_path(WINDOW))
    assert secret_uri_of(uri, run) == f"{uri}/_secrets/job-1.json"


@pytest.mark.parametrize("uri", ["file:///srv/cdc", "file:/srv/cdc", "file://localhost/srv/cdc"])
def test_a_file_uri_work_root_is_the_local_folder_it_names(uri):
    assert work_path(uri, "orders", "plan.json") == Path("/srv/cdc/orders/plan.json")


def test_a_file_uri_work_root_on_another_host_is_refused_naming_the_host():
    with pytest.raises(ValueError, match="'file://nas/srv/cdc' names host 'nas'"):
        work_path("file://nas/srv/cdc", "orders")


def test_a_warehouse_uri_missing_a_slash_is_refused_naming_the_whole_uri():
    with pytest.raises(ValueError, match=r"warehouse 'gs:/bucket/prefix'.*'gs://bucket/prefix'"):
        IcebergCatalog(warehouse="gs:/bucket/prefix")


def test_a_work_root_uri_missing_a_slash_is_refused_naming_the_whole_uri():
    with pytest.raises(ValueError, match=r"work root 's3:/bucket/cdc'.*'s3://bucket/cdc'"):
        StreamConfig("orders", "spanner", {}, work_root="s3:/bucket/cdc").plan_path(WINDOW)


def test_an_object_under_a_uri_work_root_is_written_and_read_at_that_uri():
    path = work_path("memory://cdc-work/root", "orders", "plan.json")

    path.write_text('{"a": 1}')

    assert (str(path), path.read_text(), path.exists()) == (
        "memory://cdc-work/root/orders/plan.json", '{"a": 1}', True)
    path.unlink()
    assert not path.exists()



@pytest.mark.parametrize("uri", ["file:///srv/cdc/staging", "file:/srv/cdc/staging", "file://localhost/srv/cdc/staging"])
def test_a_file_uri_snapshot_staging_folder_is_the_local_folder_it_names(uri):
    from airflow_cdc.spark_jobs.snapshot import _path

    assert _path(uri) == Path("/srv/cdc/staging")
