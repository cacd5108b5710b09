"""Production Iceberg catalogs: REST (BigLake metastore, Apache Polaris, Lakekeeper) and Hive
configured as their own documentation says, catalogs read from Airflow connections, and
catalog secrets kept out of spark conf, reprs, logs and every process command line.

No REST catalog server or Hive metastore can run on these machines (no network, no Maven
Central): their Spark conf is checked against the documented property names only. The
JDBC catalog runs for real, on the local PostgreSQL.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import threading
import time
import uuid
from pathlib import Path

import psycopg2
import pytest

from airflow_cdc.hooks.iceberg_catalog import IcebergCatalogConnectionError, IcebergCatalogHook
from airflow_cdc.spark.iceberg import IcebergCatalog
from airflow_cdc.spark.job import (
    SECRET_CONF_FILE_KEY,
    SparkJobSpec,
    changelog_writer_spec,
    iceberg_job_spec,
)
from airflow_cdc.spark.runners import LocalSparkRunner, SparkSubmitHookRunner, secret_conf_file
from airflow_cdc.spark_jobs.secret_conf import SecretConfError, load_secret_conf

from .support import TEST_SPARK_CONF, change_rows, window, write_change_rows

CATALOG = "spark.sql.catalog.lake"
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
# The catalogs below run on a cluster whose Spark resolves the Iceberg runtime (spark_version).
ON_CLUSTER = {"spark_version": "3.5"}


def conf_of(catalog: IcebergCatalog) -> dict[str, str]:
    """The catalog's public conf without the runtime's jars and packages."""
    return {k: v for k, v in catalog.spark_conf().items() if not k.startswith("spark.jars")}


# --- REST and Hive catalogs against their documentation ----------------------------------------
def test_biglake_catalog_conf_has_the_properties_googles_documentation_gives():
    # https://docs.cloud.google.com/biglake/docs/blms-rest-catalog (Spark configuration) and
    # the property table of https://docs.cloud.google.com/lakehouse/docs/spark-support
    catalog = IcebergCatalog.rest(
        flavor="biglake", warehouse="gs://my-bucket", project="my-project", **ON_CLUSTER
    )

    assert conf_of(catalog) == {
        "spark.sql.extensions": EXTENSIONS,
        CATALOG: "org.apache.iceberg.spark.SparkCatalog",
        f"{CATALOG}.type": "rest",
        f"{CATALOG}.uri": "https://biglake.googleapis.com/iceberg/v1/restcatalog",
        f"{CATALOG}.warehouse": "gs://my-bucket",
        f"{CATALOG}.header.x-goog-user-project": "my-project",
        f"{CATALOG}.rest.auth.type": "org.apache.iceberg.gcp.auth.GoogleAuthManager",
        f"{CATALOG}.io-impl": "org.apache.iceberg.gcp.gcs.GCSFileIO",
    }
    assert catalog.secret_conf() == {}  # Google credentials come from the environment


def test_biglake_catalog_in_credential_vending_mode_asks_for_vended_credentials_regionally():
    # https://docs.cloud.google.com/lakehouse/docs/spark-support: the regional endpoint
    # https://biglake.LOCATION.rep.googleapis.com/iceberg/v1/restcatalog, the multi-bucket
    # warehouse bl://projects/PROJECT_ID/catalogs/CATALOG_ID and, in credential vending
    # mode, header.X-Iceberg-Access-Delegation=vended-credentials.
    catalog = IcebergCatalog.rest(
        flavor="biglake", warehouse="bl://projects/my-project/catalogs/sales",
        project="my-project", location="europe-west1", vended_credentials=True, **ON_CLUSTER,
    )

    conf = conf_of(catalog)
    assert conf[f"{CATALOG}.uri"] == (
        "https://biglake.europe-west1.rep.googleapis.com/iceberg/v1/restcatalog"
    )
    assert conf[f"{CATALOG}.warehouse"] == "bl://projects/my-project/catalogs/sales"
    assert conf[f"{CATALOG}.header.X-Iceberg-Access-Delegation"] == "vended-credentials"


def test_polaris_catalog_conf_has_the_properties_of_polaris_spark_quickstart():
    # https://polaris.apache.org/in-dev/unreleased/getting-started/using-polaris/ ("Connecting
    # with Spark"): warehouse is the catalog's NAME, vended credentials header, credential
    # <client_id>:<client_secret>, scope PRINCIPAL_ROLE:ALL. Polaris writes
    # catalog-impl=org.apache.iceberg.rest.RESTCatalog, which Iceberg's type=rest names
    # (https://iceberg.apache.org/docs/latest/spark-configuration/#catalog-configuration).
    catalog = IcebergCatalog.rest(
        "http://localhost:8181/api/catalog", flavor="polaris", warehouse="quickstart_catalog",
        client_id="user-id", client_secret="user-secret", **ON_CLUSTER,
    )

    assert conf_of(catalog) == {
        "spark.sql.extensions": EXTENSIONS,
        CATALOG: "org.apache.iceberg.spark.SparkCatalog",
        f"{CATALOG}.type": "rest",
        f"{CATALOG}.uri": "http://localhost:8181/api/catalog",
        f"{CATALOG}.warehouse": "quickstart_catalog",
        f"{CATALOG}.header.X-Iceberg-Access-Delegation": "vended-credentials",
        f"{CATALOG}.scope": "PRINCIPAL_ROLE:ALL",
        f"{CATALOG}.rest.auth.type": "oauth2",
        # Polaris's token endpoint, as its quickstart's curl and PyIceberg examples call it
        f"{CATALOG}.oauth2-server-uri": "http://localhost:8181/api/catalog/v1/oauth/tokens",
    }
    assert catalog.secret_conf() == {f"{CATALOG}.credential": "user-id:user-secret"}


def test_lakekeeper_catalog_conf_has_the_properties_of_lakekeepers_spark_page():
    # https://docs.lakekeeper.io/docs/latest/engines/ (Spark): uri .../catalog, warehouse is
    # the warehouse's NAME, credential, oauth2-server-uri of the IdP, optional scope and the
    # vended credentials header.
    keycloak = "http://keycloak:8080/realms/iceberg/protocol/openid-connect/token"
    catalog = IcebergCatalog.rest(
        "http://localhost:8181/catalog", flavor="lakekeeper", warehouse="demo",
        client_id="spark", client_secret="spark-secret", oauth2_server_uri=keycloak,
        scope="lakekeeper", **ON_CLUSTER,
    )

    assert conf_of(catalog) == {
        "spark.sql.extensions": EXTENSIONS,
        CATALOG: "org.apache.iceberg.spark.SparkCatalog",
        f"{CATALOG}.type": "rest",
        f"{CATALOG}.uri": "http://localhost:8181/catalog",
        f"{CATALOG}.warehouse": "demo",
        f"{CATALOG}.oauth2-server-uri": keycloak,
        f"{CATALOG}.scope": "lakekeeper",
        f"{CATALOG}.rest.auth.type": "oauth2",
        f"{CATALOG}.header.X-Iceberg-Access-Delegation": "vended-credentials",
    }
    assert catalog.secret_conf() == {f"{CATALOG}.credential": "spark:spark-secret"}


def test_rest_catalog_with_a_bearer_token_keeps_token_and_secret_headers_in_secret_conf():
    # https://iceberg.apache.org/docs/nightly/rest-catalog/ and OAuth2Properties.TOKEN
    # (https://iceberg.apache.org/javadoc/latest/org/apache/iceberg/rest/auth/
    # OAuth2Properties.html):
    # property "token"; header.<name> sends an HTTP header (as the BigLake and Lakekeeper
    # pages use it); io-impl org.apache.iceberg.aws.s3.S3FileIO.
    catalog = IcebergCatalog(
        kind="rest", uri="https://catalog.example.com/api", warehouse="s3://lake/wh",
        token="bearer-abc", io_impl="org.apache.iceberg.aws.s3.S3FileIO",
        headers={"X-Team": "data", "Authorization": "Bearer xyz"},
        properties={"s3.endpoint": "https://s3.example.com", "s3.secret-access-key": "k3y"},
        **ON_CLUSTER,
    )

    conf = catalog.spark_conf()
    assert conf[f"{CATALOG}.header.X-Team"] == "data"
    assert conf[f"{CATALOG}.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf[f"{CATALOG}.s3.endpoint"] == "https://s3.example.com"
    assert conf["spark.jars.packages"].endswith("org.apache.iceberg:iceberg-aws-bundle:1.11.0")
    assert catalog.secret_conf() == {
        f"{CATALOG}.token": "bearer-abc",
        f"{CATALOG}.header.Authorization": "Bearer xyz",
        f"{CATALOG}.s3.secret-access-key": "k3y",
    }
    assert not set(catalog.secret_conf()) & set(conf)


def test_hive_catalog_conf_has_the_properties_icebergs_spark_documentation_gives():
    # https://iceberg.apache.org/docs/latest/spark-configuration/#catalogs:
    # type=hive, uri=thrift://metastore-host:port (omitted: hive-site.xml's), warehouse.
    catalog = IcebergCatalog(
        kind="hive", uri="thrift://metastore:9083", warehouse="gs://bucket/warehouse",
        **ON_CLUSTER,
    )

    assert conf_of(catalog) == {
        "spark.sql.extensions": EXTENSIONS,
        CATALOG: "org.apache.iceberg.spark.SparkCatalog",
        f"{CATALOG}.type": "hive",
        f"{CATALOG}.uri": "thrift://metastore:9083",
        f"{CATALOG}.warehouse": "gs://bucket/warehouse",
    }


def test_a_rest_catalog_runs_on_the_local_runtime_from_the_jar_folder():
    catalog = IcebergCatalog.rest("http://localhost:8181/api/catalog", flavor="polaris",
                                  warehouse="quickstart_catalog")

    conf = catalog.spark_conf()

    assert "iceberg-spark-runtime-3.5_2.12-" in conf["spark.jars"]
    assert conf[f"{CATALOG}.type"] == "rest"


def test_polaris_warehouse_given_as_a_path_is_refused_asking_for_the_catalogs_name():
    with pytest.raises(ValueError, match="Polaris's warehouse is the name of the catalog"):
        IcebergCatalog.rest("http://polaris:8181/api/catalog", flavor="polaris",
                            warehouse="s3://bucket/wh")


def test_biglake_catalog_without_a_billing_project_is_refused_naming_the_fix():
    with pytest.raises(ValueError, match="no billing project: pass .*project='<project>'"):
        IcebergCatalog.rest(flavor="biglake", warehouse="gs://my-bucket")


# --- catalogs from Airflow connections --------------------------------------------------------
def set_connection(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}",
                       json.dumps({"conn_type": "iceberg_catalog", **fields}))


def test_biglake_catalog_from_an_airflow_connection(monkeypatch):
    set_connection(monkeypatch, "biglake_lake", schema="gs://my-bucket",
                   extra={"flavor": "biglake", "project": "my-project", "spark_version": "3.5"})

    catalog = IcebergCatalogHook(iceberg_conn_id="biglake_lake").get_catalog()

    assert catalog == IcebergCatalog.rest(flavor="biglake", warehouse="gs://my-bucket",
                                          project="my-project", **ON_CLUSTER)
    assert conf_of(catalog)[f"{CATALOG}.header.x-goog-user-project"] == "my-project"


def test_polaris_catalog_from_an_airflow_connection_keeps_the_client_secret_secret(monkeypatch):
    set_connection(monkeypatch, "polaris_lake", host="http://polaris:8181/api/catalog",
                   schema="quickstart_catalog", login="user-id", password="user-secret",
                   extra={"flavor": "polaris", "spark_version": "3.5"})

    catalog = IcebergCatalogHook(iceberg_conn_id="polaris_lake").get_catalog()

    assert conf_of(catalog)[f"{CATALOG}.warehouse"] == "quickstart_catalog"
    assert catalog.secret_conf() == {f"{CATALOG}.credential": "user-id:user-secret"}
    assert "user-secret" not in repr(catalog)
    assert "user-secret" not in json.dumps(catalog.spark_conf())


def test_lakekeeper_catalog_from_an_airflow_connection_with_a_bearer_token(monkeypatch):
    set_connection(monkeypatch, "lakekeeper_lake", host="https://lakekeeper.example.com/catalog",
                   schema="demo", password="bearer-token",
                   extra={"flavor": "lakekeeper", "spark_version": "3.5"})

    catalog = IcebergCatalogHook(iceberg_conn_id="lakekeeper_lake").get_catalog()

    assert conf_of(catalog)[f"{CATALOG}.uri"] == "https://lakekeeper.example.com/catalog"
    assert catalog.secret_conf() == {f"{CATALOG}.token": "bearer-token"}


def test_hive_catalog_from_an_airflow_connection_with_a_bare_host_and_port(monkeypatch):
    set_connection(monkeypatch, "hive_lake", host="metastore", port=9084,
                   schema="gs://bucket/warehouse", extra={"kind": "hive", "spark_version": "3.5"})

    catalog = IcebergCatalogHook(iceberg_conn_id="hive_lake").get_catalog()

    assert conf_of(catalog)[f"{CATALOG}.type"] == "hive"
    assert conf_of(catalog)[f"{CATALOG}.uri"] == "thrift://metastore:9084"
    assert conf_of(catalog)[f"{CATALOG}.warehouse"] == "gs://bucket/warehouse"


def test_connection_with_an_unknown_extra_is_refused_naming_the_extras(monkeypatch):
    set_connection(monkeypatch, "typo_lake", host="http://polaris:8181/api/catalog",
                   extra={"flavour": "polaris"})

    with pytest.raises(IcebergCatalogConnectionError,
                       match="'typo_lake': unknown extra 'flavour'; the extras are .*'flavor'"):
        IcebergCatalogHook(iceberg_conn_id="typo_lake").get_catalog()


def test_provider_info_registers_the_iceberg_catalog_connection_type():
    from airflow_cdc import get_provider_info

    types = {t["connection-type"]: t for t in get_provider_info()["connection-types"]}
    declared = types["iceberg_catalog"]

    assert declared["hook-class-name"] == "airflow_cdc.hooks.iceberg_catalog.IcebergCatalogHook"
    assert IcebergCatalogHook.conn_type == "iceberg_catalog"
    assert {"kind", "flavor", "project", "spark_version"} <= set(declared["conn-fields"])
    assert declared["ui-field-behaviour"]["relabeling"] == (
        IcebergCatalogHook.get_ui_field_behaviour()["relabeling"]
    )


def test_pipeline_tasks_take_their_catalog_from_iceberg_conn_id(monkeypatch):
    from datetime import datetime, timezone

    from airflow.sdk import DAG
    from airflow.timetables.interval import CronDataIntervalTimetable

    from airflow_cdc.operators.pipeline import SpannerChangeStreamPipeline

    set_connection(monkeypatch, "prod_lake", schema="gs://my-bucket",
                   extra={"flavor": "biglake", "project": "my-project", "spark_version": "3.5"})
    with DAG("conn_catalog", schedule=CronDataIntervalTimetable("@hourly", timezone="UTC"),
             start_date=datetime(2024, 5, 1, tzinfo=timezone.utc)) as dag:
        SpannerChangeStreamPipeline(group_id="g", instance_id="i", database_id="d",
                                    change_stream="Orders", iceberg_conn_id="prod_lake")

    for task_id in ("g.plan", "g.extract", "g.commit", "g.apply"):
        task = dag.get_task(task_id)
        assert task.iceberg_conn_id == "prod_lake"
        assert task.iceberg_catalog.warehouse == "gs://my-bucket"


def test_pipeline_given_both_catalog_and_iceberg_conn_id_is_refused():
    from datetime import datetime, timezone

    from airflow.sdk import DAG
    from airflow.timetables.interval import CronDataIntervalTimetable

    from airflow_cdc.operators.pipeline import SpannerChangeStreamPipeline

    with DAG("both_catalogs", schedule=CronDataIntervalTimetable("@hourly", timezone="UTC"),
             start_date=datetime(2024, 5, 1, tzinfo=timezone.utc)):
        with pytest.raises(ValueError, match="give catalog= or iceberg_conn_id=, not both"):
            SpannerChangeStreamPipeline(group_id="g", instance_id="i", database_id="d",
                                        change_stream="Orders", iceberg_conn_id="prod_lake",
                                        catalog=IcebergCatalog(warehouse="/tmp/w"))


# --- secrets stay off command lines, logs and reprs -------------------------------------------
CANARY = "canary-" + uuid.uuid4().hex


def jdbc_catalog(warehouse: Path, name: str = "lake", user: str = "postgres") -> IcebergCatalog:
    return IcebergCatalog(
        name=name, kind="jdbc", warehouse=str(warehouse),
        jdbc_url="jdbc:postgresql://127.0.0.1:5432/test", jdbc_user=user, jdbc_password=CANARY,
    )


def test_jdbc_password_is_in_secret_conf_and_not_in_spark_conf_or_repr(tmp_path):
    catalog = jdbc_catalog(tmp_path)

    assert catalog.secret_conf() == {f"{CATALOG}.jdbc.password": CANARY}
    assert CANARY not in json.dumps(catalog.spark_conf())
    assert CANARY not in repr(catalog)


def test_job_spec_carries_the_catalog_secrets_apart_and_hides_them_from_its_repr(tmp_path):
    spec = iceberg_job_spec("extract", jdbc_catalog(tmp_path), ["--plan", "p"], name="cdc-x")

    assert spec.secret_conf == {f"{CATALOG}.jdbc.password": CANARY}
    assert CANARY not in json.dumps(dict(spec.conf))
    assert CANARY not in repr(spec)
    assert "credential" in spec.conf["spark.redaction.regex"]  # Spark's UI and event log


def test_secret_catalog_property_given_as_plain_conf_moves_to_secret_conf():
    spec = SparkJobSpec("app.py", conf={f"{CATALOG}.jdbc.password": CANARY,
                                        f"{CATALOG}.jdbc.user": "postgres"})

    assert spec.conf == {f"{CATALOG}.jdbc.user": "postgres"}
    assert spec.secret_conf == {f"{CATALOG}.jdbc.password": CANARY}


def test_spark_submit_command_lines_name_a_private_secret_file_instead_of_the_secret(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CATALOG_TEST",
                       json.dumps({"conn_type": "spark", "host": "local[1]"}))
    spec = iceberg_job_spec("extract", jdbc_catalog(tmp_path), ["--plan", "p"], name="cdc-x")

    with secret_conf_file(spec) as public:
        path = Path(public.conf[SECRET_CONF_FILE_KEY])
        local = LocalSparkRunner(spark_submit="spark-submit").command(public)
        hook = SparkSubmitHookRunner("spark_catalog_test").hook(public)
        submitted = hook._build_spark_submit_command(public.application)

        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert json.loads(path.read_text()) == {f"{CATALOG}.jdbc.password": CANARY}
    for command in (local, submitted):
        assert CANARY not in " ".join(command)
        assert f"{SECRET_CONF_FILE_KEY}={path}" in command
    assert not path.exists()


def test_cluster_deploy_mode_ships_the_secret_file_with_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER_TEST", json.dumps(
        {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}))
    runner = SparkSubmitHookRunner("spark_cluster_test")
    spec = iceberg_job_spec("extract", jdbc_catalog(tmp_path), ["--plan", "p"], name="cdc-x")

    assert runner.effective_deploy_mode() == "cluster"
    with secret_conf_file(spec, ship=True) as public:
        command = runner.hook(public)._build_spark_submit_command(public.application)
        path = public.conf[SECRET_CONF_FILE_KEY]
    assert command[command.index("--files") + 1] == path
    assert CANARY not in " ".join(command)


def test_secret_file_is_deleted_when_the_job_fails(tmp_path):
    spec = iceberg_job_spec("extract", jdbc_catalog(tmp_path), ["--plan", "p"], name="cdc-x")

    with pytest.raises(RuntimeError, match="job failed"), secret_conf_file(spec) as public:
        path = Path(public.conf[SECRET_CONF_FILE_KEY])
        raise RuntimeError("job failed")
    assert not path.exists()


# --- real Spark --------------------------------------------------------------------------------
def test_secret_conf_loaded_after_the_session_started_configures_a_catalog_on_first_use(
    spark, tmp_path
):
    # What every job relies on: Spark's CatalogManager reads spark.sql.catalog.<name>.* from
    # the session conf when the catalog is first loaded, not when the session starts.
    name = f"late_{uuid.uuid4().hex[:8]}"
    secret_file = tmp_path / "secret.json"
    secret_file.write_text(json.dumps({
        f"spark.sql.catalog.{name}": "org.apache.iceberg.spark.SparkCatalog",
        f"spark.sql.catalog.{name}.type": "hadoop",
        f"spark.sql.catalog.{name}.warehouse": (tmp_path / "wh").as_uri(),
    }))
    spark.conf.set(SECRET_CONF_FILE_KEY, str(secret_file))
    try:
        loaded = load_secret_conf(spark)
    finally:
        spark.conf.unset(SECRET_CONF_FILE_KEY)

    assert loaded == sorted(json.loads(secret_file.read_text()))
    spark.sql(f"CREATE TABLE {name}.cdc.orders (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {name}.cdc.orders VALUES (1), (2)")
    assert spark.sql(f"SELECT count(*) AS n FROM {name}.cdc.orders").first().n == 2


def test_job_whose_secret_file_is_not_on_the_driver_fails_naming_file_and_deploy_mode(
    spark, tmp_path
):
    missing = tmp_path / "cdc-secret-conf-gone.json"
    spark.conf.set(SECRET_CONF_FILE_KEY, str(missing))
    try:
        with pytest.raises(SecretConfError, match=f"{missing} .* is not on this Spark driver.*"
                                                  f"client deploy mode"):
            load_secret_conf(spark)
    finally:
        spark.conf.unset(SECRET_CONF_FILE_KEY)


class CommandLineWatch(threading.Thread):
    """Reads every process's command line and environment until stopped: records a leak of
    ``secret``, whether a spark-submit JVM of ``app_name`` was seen, and the secret file it
    was given (with that file's mode while it existed)."""

    def __init__(self, secret: str, app_name: str) -> None:
        super().__init__(daemon=True)
        self.secret, self.app_name = secret.encode(), app_name.encode()
        self.stopped = threading.Event()
        self.leaks: list[str] = []
        self.saw_spark_submit = False
        self.secret_files: dict[str, int] = {}

    def run(self) -> None:
        while not self.stopped.is_set():
            for proc in Path("/proc").iterdir():
                if proc.name.isdigit():
                    self.inspect(proc)
            time.sleep(0.05)

    def inspect(self, proc: Path) -> None:
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            return  # the process ended meanwhile
        for where, data in (("cmdline", cmdline), ("environ", environ)):
            if self.secret in data:
                self.leaks.append(f"{proc.name} {where}: {data[:300]!r}")
        if b"org.apache.spark.deploy.SparkSubmit" in cmdline and self.app_name in cmdline:
            self.saw_spark_submit = True
            found = re.search(rb"spark\.airflow_cdc\.secretConfFile=([^\x00]+)", cmdline)
            if found:
                path = found.group(1).decode()
                try:
                    self.secret_files[path] = stat.S_IMODE(os.stat(path).st_mode)
                except OSError:
                    self.secret_files.setdefault(path, -1)


@pytest.fixture
def jdbc_catalog_on_postgres(tmp_path):
    """A JDBC catalog on the local PostgreSQL whose public conf names a role that does not
    exist (trust auth accepts and ignores the canary password, but not an unknown role), in the
    database ``test`` (created when missing: a fresh server has only ``postgres``), its rows
    removed afterwards."""
    catalog = jdbc_catalog(tmp_path / "warehouse", name=f"canary_{uuid.uuid4().hex[:8]}",
                           user="no_such_role")
    admin = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="postgres")
    admin.autocommit = True  # CREATE DATABASE runs outside a transaction
    with admin.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = 'test'")
        if cur.fetchone() is None:
            cur.execute("CREATE DATABASE test")
    admin.close()
    yield catalog
    with psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="test") as conn:
        cur = conn.cursor()
        for table in ("iceberg_tables", "iceberg_namespace_properties"):
            cur.execute(f"DELETE FROM {table} WHERE catalog_name = %s", (catalog.name,))


def test_real_spark_submit_with_a_jdbc_catalog_never_shows_its_password_on_a_command_line(
    spark, tmp_path, jdbc_catalog_on_postgres, caplog
):
    catalog = jdbc_catalog_on_postgres
    # The real user travels with the password: the job connects only if it set its secret
    # conf on the session before the catalog's first use.
    secret_user = {f"spark.sql.catalog.{catalog.name}.jdbc.user": "postgres"}
    w = window(10)
    rows = change_rows(w, 6)
    events = tmp_path / "spark-events"
    events.mkdir()
    spec = changelog_writer_spec(
        catalog, "cdc.orders_changelog", w.window_id,
        write_change_rows(tmp_path / "rows.jsonl", rows), tmp_path / "result.json",
        # The Spark event log records every SQL execution's session conf (the secrets set at
        # run time included) unless redacted.
        conf={**TEST_SPARK_CONF, "spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri()},
        secret_conf=secret_user,
    )
    watch = CommandLineWatch(CANARY, spec.name)
    watch.start()
    caplog.set_level(logging.INFO, logger="airflow_cdc.spark.runners")
    try:
        result = LocalSparkRunner(master="local[1]").run(spec)
    finally:
        watch.stopped.set()
        watch.join()

    assert watch.saw_spark_submit, "the spark-submit JVM was never seen: the watch proves nothing"
    assert watch.leaks == []
    assert CANARY not in caplog.text and CANARY not in "\n".join(result.log_tail)
    assert list(watch.secret_files.values()) == [0o600]
    assert not any(Path(path).exists() for path in watch.secret_files)
    logged = "".join(f.read_text(errors="replace") for f in events.rglob("*") if f.is_file())
    assert "SparkListenerSQLExecutionStart" in logged, "no SQL execution in the event log: it proves nothing"
    assert CANARY not in logged
    assert json.loads((tmp_path / "result.json").read_text())["rows_written"] == len(rows)
    # Read back through the suite's session, the catalog configured at run time the same way.
    for key, value in {**catalog.spark_conf(), **catalog.secret_conf(), **secret_user}.items():
        if key.startswith("spark.sql.catalog."):
            spark.conf.set(key, value)
    table = f"{catalog.name}.cdc.orders_changelog"
    assert spark.sql(f"SELECT count(*) AS n FROM {table}").first().n == len(rows)
