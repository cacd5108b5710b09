"""The pipeline's Spark jobs on a real Iceberg REST catalog server (demo/rest_catalog.py: Apache
Iceberg's REST catalog servlet and adapter from Maven Central, on 127.0.0.1, checking OAuth2
client credentials at a token endpoint of its own, a bearer token and the warehouse's name).

One window goes through it as a deployment runs it: the catalog comes from an Airflow
connection of kind rest (IcebergCatalogHook), the changelog writer commits the window in a real
spark-submit whose client secret travels by the secret hand-over (watched on every process's
command line and environment), apply MERGEs the window in the suite's session, and the tables
are read back through the REST API by pyiceberg, an independent client.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from airflow_cdc.hooks.iceberg_catalog import IcebergCatalogHook
from airflow_cdc.model import ChangeRow, Image, Op, encode_ordering_key
from airflow_cdc.spark.job import SECRET_CONF_FILE_KEY, changelog_writer_spec
from airflow_cdc.spark.runners import LocalSparkRunner
from airflow_cdc.spark_jobs import apply_job
from airflow_cdc.spark_jobs.secret_conf import CatalogLoadError, load_secret_conf
from demo.rest_catalog import RestCatalogServer

from .support import TEST_SPARK_CONF, free_port, window, write_change_rows
from .test_catalogs import CommandLineWatch

CLIENT_ID = "cdc-pipeline"
CLIENT_SECRET = "client-secret-" + uuid.uuid4().hex
TOKEN = "bearer-token-" + uuid.uuid4().hex
WAREHOUSE = "lakehouse"  # the catalog's warehouse name, as Polaris and Lakekeeper name theirs
TOKEN_PATH = "/oauth/token"  # not the REST spec's default: oauth2_server_uri must reach Spark
W = window(30)


@pytest.fixture(scope="module")
def rest_server(tmp_path_factory):
    with RestCatalogServer(tmp_path_factory.mktemp("rest-catalog"), client_id=CLIENT_ID,
                           client_secret=CLIENT_SECRET, token=TOKEN, token_path=TOKEN_PATH,
                           warehouse_name=WAREHOUSE) as server:
        yield server


def connection(monkeypatch, server: RestCatalogServer, name: str, **fields) -> IcebergCatalogHook:
    """A hook on an ``iceberg_catalog`` connection to ``server`` (host, warehouse name as
    schema, the token endpoint as extra), with ``fields`` added."""
    conn_id = f"rest_{uuid.uuid4().hex[:8]}"
    host, port = server.uri.rsplit(":", 1)
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({
        "conn_type": "iceberg_catalog", "host": host, "port": int(port), "schema": WAREHOUSE,
        "extra": {"oauth2_server_uri": server.token_uri}, **fields,
    }))
    return IcebergCatalogHook(iceberg_conn_id=conn_id, catalog_name=name)


def orders_changes() -> list[ChangeRow]:
    """Orders 1-4 inserted, 2 updated, 3 deleted: the target keeps 1, 2 (updated) and 4."""
    changes = [("INSERT", k, 10.0 * k) for k in (1, 2, 3, 4)] + [("UPDATE", 2, 99.5), ("DELETE", 3, None)]
    rows = []
    for i, (op, key, total) in enumerate(changes):
        commit_ts = W.start + timedelta(minutes=5 * i + 1)
        rows.append(ChangeRow(
            stream="orders", window_id=W.window_id, source_table="Orders", op=Op(op),
            image=Image.FULL, keys={"OrderId": key},
            new_values=None if op == "DELETE" else {"OrderId": key, "Total": total},
            old_values=None, column_types={"OrderId": "INT64", "Total": "FLOAT64"},
            commit_ts=commit_ts, ordering_key=encode_ordering_key(commit_ts, f"tx-{i}", 0),
            transaction_id=f"tx-{i}", event_id=f"ev-{i:03d}", partition_id="token-0",
        ))
    return rows


def use_catalog(spark, catalog) -> None:
    """Make ``catalog`` a catalog of the suite's session, its secrets set at run time as the
    jobs set theirs."""
    for key, value in {**catalog.spark_conf(), **catalog.secret_conf()}.items():
        if key.startswith("spark.sql.catalog."):
            spark.conf.set(key, value)


def load_with_secret_conf(spark, tmp_path: Path, catalog) -> None:
    """Configure ``catalog`` on the session as a job does: public conf, then its secret file."""
    for key, value in catalog.spark_conf().items():
        if key.startswith("spark.sql.catalog."):
            spark.conf.set(key, value)
    secret_file = tmp_path / "secret.json"
    secret_file.write_text(json.dumps(catalog.secret_conf()))
    spark.conf.set(SECRET_CONF_FILE_KEY, str(secret_file))
    try:
        load_secret_conf(spark)
    finally:
        spark.conf.unset(SECRET_CONF_FILE_KEY)


def pyiceberg_rows(server: RestCatalogServer, table: str) -> list[dict]:
    """``table``'s rows as pyiceberg reads them through the REST API, with the client's own
    credentials (not Spark's)."""
    from pyiceberg.catalog.rest import RestCatalog

    catalog = RestCatalog("check", uri=server.uri, warehouse=WAREHOUSE,
                          credential=f"{CLIENT_ID}:{CLIENT_SECRET}",
                          **{"oauth2-server-uri": server.token_uri})
    return catalog.load_table(table).scan().to_arrow().to_pylist()


@pytest.fixture(scope="module")
def window_through_rest(rest_server, spark, tmp_path_factory):
    """The window extracted by spark-submit and applied, through a connection whose login and
    password are the OAuth2 client: (extract result, apply result, command line watch)."""
    folder = tmp_path_factory.mktemp("rest-window")
    with pytest.MonkeyPatch.context() as monkeypatch:
        hook = connection(monkeypatch, rest_server, "restlake", login=CLIENT_ID,
                          password=CLIENT_SECRET)
        catalog = hook.get_catalog()
    # (the connection's variable is gone again: it would hand the secret to every child's
    # environment, which the watch below reads)
    rows = orders_changes()
    spec = changelog_writer_spec(
        catalog, "cdc.orders_changelog", W.window_id, write_change_rows(folder / "rows.jsonl", rows),
        folder / "result.json", conf=TEST_SPARK_CONF,
    )
    watch = CommandLineWatch(CLIENT_SECRET, spec.name)
    watch.start()
    try:
        LocalSparkRunner(master="local[1]").run(spec)
    finally:
        watch.stopped.set()
        watch.join()
    use_catalog(spark, catalog)
    config = folder / "apply.json"
    config.write_text(json.dumps({
        "catalog": "restlake", "stream": "orders", "window_id": W.window_id,
        "changelog_table": "cdc.orders_changelog", "policies": {},
        "targets": {"namespace": "current", "mapping": {"Orders": "orders"}},
        "result": str(folder / "apply-result.json"),
    }))
    assert apply_job.main(["--job-config", str(config)], spark=spark) == 0
    extract = json.loads((folder / "result.json").read_text())
    return extract, json.loads((folder / "apply-result.json").read_text()), watch


def test_the_changelog_commit_of_a_spark_submit_job_is_read_back_through_the_rest_catalog(
    rest_server, window_through_rest
):
    extract, _, _ = window_through_rest
    rows = pyiceberg_rows(rest_server, "cdc.orders_changelog")

    assert extract["rows_written"] == 6
    assert sorted((r["event_id"], r["op"]) for r in rows) == [
        ("ev-000", "INSERT"), ("ev-001", "INSERT"), ("ev-002", "INSERT"), ("ev-003", "INSERT"),
        ("ev-004", "UPDATE"), ("ev-005", "DELETE")]
    assert {r["window_id"] for r in rows} == {W.window_id}
    assert (rest_server.warehouse / "cdc" / "orders_changelog" / "metadata").is_dir()


def test_apply_merges_the_window_into_a_target_read_back_through_the_rest_catalog(
    rest_server, window_through_rest
):
    _, applied, _ = window_through_rest
    rows = pyiceberg_rows(rest_server, "current.orders")

    assert applied["status"] == "applied"
    assert sorted((r["OrderId"], r["Total"]) for r in rows) == [(1, 10.0), (2, 99.5), (4, 40.0)]


def test_the_client_secret_reaches_the_job_without_appearing_on_any_command_line(
    window_through_rest
):
    # The catalog refuses callers without a token it issued for this client and secret: the
    # job committed, so the secret reached its Spark; the watch saw the spark-submit JVM.
    _, _, watch = window_through_rest

    assert watch.saw_spark_submit, "the spark-submit JVM was never seen: the watch proves nothing"
    assert watch.leaks == []


def test_a_bearer_token_given_as_the_connections_password_opens_the_catalog(
    rest_server, spark, monkeypatch, tmp_path
):
    name = f"rtok_{uuid.uuid4().hex[:6]}"
    catalog = connection(monkeypatch, rest_server, name, password=TOKEN).get_catalog()

    load_with_secret_conf(spark, tmp_path, catalog)

    assert TOKEN not in json.dumps(catalog.spark_conf())
    assert catalog.secret_conf() == {f"spark.sql.catalog.{name}.token": TOKEN}
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {name}.tokens")
    spark.sql(f"CREATE TABLE {name}.tokens.t (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {name}.tokens.t VALUES (7)")
    assert [r["id"] for r in pyiceberg_rows(rest_server, "tokens.t")] == [7]


def test_a_wrong_client_secret_is_refused_by_the_catalog_naming_its_uri(
    rest_server, spark, monkeypatch, tmp_path
):
    name = f"rbad_{uuid.uuid4().hex[:6]}"
    catalog = connection(monkeypatch, rest_server, name, login=CLIENT_ID,
                         password="not-the-secret").get_catalog()

    with pytest.raises(CatalogLoadError, match=rf"'{name}' \(type rest, uri {rest_server.uri}\) "
                                               rf"could not be loaded: .*NotAuthorized"):
        load_with_secret_conf(spark, tmp_path, catalog)


def test_an_unreachable_rest_uri_fails_naming_the_uri(spark, monkeypatch, tmp_path):
    name = f"rgone_{uuid.uuid4().hex[:6]}"
    uri = f"http://127.0.0.1:{free_port()}/catalog"  # nothing listens there
    monkeypatch.setenv(f"AIRFLOW_CONN_{name.upper()}", json.dumps(
        {"conn_type": "iceberg_catalog", "host": uri, "schema": WAREHOUSE, "password": TOKEN}))
    catalog = IcebergCatalogHook(iceberg_conn_id=name, catalog_name=name).get_catalog()

    with pytest.raises(CatalogLoadError, match=rf"'{name}' \(type rest, uri {uri}\) could not be "
                                               rf"loaded: .*Connection refused"):
        load_with_secret_conf(spark, tmp_path, catalog)


def test_a_rest_connection_whose_port_field_contradicts_its_uri_is_refused(monkeypatch):
    from airflow_cdc.hooks.iceberg_catalog import IcebergCatalogConnectionError

    monkeypatch.setenv("AIRFLOW_CONN_REST_PORTS", json.dumps(
        {"conn_type": "iceberg_catalog", "host": "http://127.0.0.1:8181/api", "port": 9191}))

    with pytest.raises(IcebergCatalogConnectionError,
                       match="'rest_ports': uri 'http://127.0.0.1:8181/api' names port 8181 but "
                             "the port field is 9191"):
        IcebergCatalogHook(iceberg_conn_id="rest_ports").get_catalog()
