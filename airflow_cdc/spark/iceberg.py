"""Iceberg catalog configuration for Spark, and offline provisioning of the Iceberg jars.

A catalog is described once (:class:`IcebergCatalog`) and turned into Spark configuration,
so every job (changelog writer, apply, snapshot) sees the same tables whatever runner
launches it.

Where the Iceberg runtime comes from (:meth:`IcebergCatalog.runtime`), first that applies:

* ``packages`` given (for example ``org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2``):
  Spark resolves them (``spark.jars.packages``).
* ``spark_version`` given (the cluster's Spark, e.g. ``"3.5"`` on Dataproc 2.2): the runtime
  coordinate for that Spark (:func:`~airflow_cdc.spark.environment.iceberg_runtime_package`),
  resolved by the cluster from Maven.
* a local pyspark with the runtime repack installed (the ``spark`` extra): offline, the
  runtime jar shipped in the PyPI package
  ``snowpark-connect-deps-iceberg`` plus a Jackson jar relocated into Iceberg's shaded
  namespace, because that repack lacks it (``NoClassDefFoundError:
  org/apache/iceberg/shaded/com/fasterxml/jackson/...``). The relocated jar is built once,
  with Debian's jarjar, from the Jackson jars pyspark itself ships, and cached.
* otherwise the coordinate for the Spark found on this machine (``$SPARK_HOME``); with no
  Spark found, building a job's conf fails naming ``spark_version`` and ``packages``.

No pyspark import at module level: Airflow-side code imports this to build job specs.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from airflow_cdc.model import CdcError, validate_identifier
from airflow_cdc.work_root import refuse_half_uri

JARJAR = Path("/usr/share/java/jarjar.jar")
JDBC_DRIVER_JARS = {
    "postgresql": Path("/usr/share/java/postgresql.jar"),
    "sqlite": Path("/usr/share/java/sqlite-jdbc.jar"),
    "mariadb": Path("/usr/share/java/mariadb-java-client.jar"),  # the parallel snapshot's reader
}
# The Debian package of each driver (make setup installs them).
JDBC_DRIVER_PACKAGES = {
    "postgresql": "libpostgresql-jdbc-java",
    "sqlite": "libxerial-sqlite-jdbc-java",
    "mariadb": "libmariadb-java",
}
_JACKSON_RULE = "rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1\n"
_JACKSON_JARS = ("jackson-annotations", "jackson-core", "jackson-databind")
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


class IcebergProvisioningError(CdcError):
    """The offline Iceberg jars cannot be found or built."""


def jars_cache_dir() -> Path:
    """Where provisioned jars live: ``$AIRFLOW_CDC_JARS_DIR`` or ``~/.cache/airflow-cdc/jars``."""
    configured = os.environ.get("AIRFLOW_CDC_JARS_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "airflow-cdc" / "jars"


def _pyspark_home() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise IcebergProvisioningError(
            "pyspark is not installed in this interpreter: the offline Iceberg jars are built "
            "from its Jackson jars. Install pyspark (make setup) or pass packages=[...]"
        )
    return Path(spec.origin).parent


def _spark_and_scala_version() -> tuple[str, str]:
    from airflow_cdc.spark.environment import find_spark

    _pyspark_home()  # names the fix when pyspark is missing
    found = find_spark({})  # this interpreter's pyspark, whatever SPARK_HOME says
    if found is None:
        raise IcebergProvisioningError(
            "this interpreter's pyspark carries no Spark (pyspark-client?): install "
            "'airflow-cdc[spark]' or pass packages=[...]"
        )
    return found.minor, found.scala


def _java() -> str:
    from airflow_cdc.spark.environment import java_home

    home = java_home() or os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


def offline_runtime_available() -> bool:
    """Whether this machine can give Spark the Iceberg runtime without Maven: a local pyspark,
    the PyPI repack of the runtime jar for its Spark (the ``spark`` extra), and the relocated
    Jackson jar built already or Debian's jarjar to build it."""
    if find_spec("snowpark_connect_deps_iceberg") is None:
        return False
    if not JARJAR.exists() and not any(jars_cache_dir().glob("iceberg-shaded-jackson-*.jar")):
        return False
    try:
        iceberg_runtime_jar()
    except IcebergProvisioningError:
        return False
    return True


def iceberg_runtime_jar() -> Path:
    """The Iceberg Spark runtime jar matching the installed pyspark, from PyPI's repack."""
    import importlib.util

    spark, scala = _spark_and_scala_version()
    spec = importlib.util.find_spec("snowpark_connect_deps_iceberg")
    if spec is None or not spec.submodule_search_locations:
        raise IcebergProvisioningError(
            "package snowpark-connect-deps-iceberg is not installed: it carries the Iceberg "
            "runtime jar used offline. Run `make setup`, or pass "
            "packages=['org.apache.iceberg:iceberg-spark-runtime-<spark>_<scala>:<version>']"
        )
    jars_dir = Path(list(spec.submodule_search_locations)[0]) / "jars"
    found = sorted(jars_dir.glob(f"iceberg-spark-runtime-{spark}_{scala}-*.jar"))
    if not found:
        raise IcebergProvisioningError(
            f"no iceberg-spark-runtime jar for Spark {spark} / Scala {scala} in {jars_dir}: "
            f"install a matching snowpark-connect-deps-iceberg or pass packages=[...]"
        )
    return found[-1]


def relocated_jackson_jar() -> Path:
    """Build (once) pyspark's Jackson relocated into Iceberg's shaded package; return its path."""
    pyspark_jars = _pyspark_home() / "jars"
    sources = []
    for name in _JACKSON_JARS:
        match = sorted(pyspark_jars.glob(f"{name}-2*.jar"))
        if not match:
            raise IcebergProvisioningError(f"{name} jar not found in {pyspark_jars}")
        sources.append(match[-1])
    digest = hashlib.sha256("|".join(p.name for p in sources).encode()).hexdigest()[:12]
    target = jars_cache_dir() / f"iceberg-shaded-jackson-{digest}.jar"
    if target.exists():
        return target
    if not JARJAR.exists():
        raise IcebergProvisioningError(
            f"{JARJAR} is missing: install Debian's libjarjar-java (make setup does), "
            f"or pass packages=[...] to use Maven coordinates instead of the offline jars"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cdc-jackson-") as tmp:
        merged = Path(tmp) / "jackson.jar"
        seen: set[str] = set()
        with zipfile.ZipFile(merged, "w", zipfile.ZIP_DEFLATED) as out:
            for source in sources:
                with zipfile.ZipFile(source) as jar:
                    for entry in jar.infolist():
                        if entry.filename.startswith("META-INF/") or entry.filename in seen:
                            continue
                        seen.add(entry.filename)
                        out.writestr(entry, jar.read(entry.filename))
        rules = Path(tmp) / "rules.txt"
        rules.write_text(_JACKSON_RULE)
        partial = Path(tmp) / "relocated.jar"
        proc = subprocess.run(
            [_java(), "-jar", str(JARJAR), "process", str(rules), str(merged), str(partial)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0 or not partial.exists():
            raise IcebergProvisioningError(
                f"jarjar failed to relocate Jackson (exit {proc.returncode}): {proc.stderr[-2000:]}"
            )
        # Write under a temporary name, then rename: concurrent provisioners never see a
        # half-written jar.
        staging = target.with_suffix(f".{os.getpid()}.tmp")
        shutil.copyfile(partial, staging)
        os.replace(staging, target)
    return target


def provision_iceberg_jars() -> list[str]:
    """The jars an offline Spark needs for Iceberg; builds what is missing. Idempotent."""
    return [str(iceberg_runtime_jar()), str(relocated_jackson_jar())]


KINDS = ("hadoop", "jdbc", "rest", "hive")
BIGLAKE_REST_URI = "https://biglake.googleapis.com/iceberg/v1/restcatalog"
# What a known REST catalog server documents for Spark, filled in where the catalog leaves a
# field unset (docs/catalogs.md cites each server's page).
REST_FLAVORS: dict[str, dict[str, object]] = {
    "biglake": {
        "uri": BIGLAKE_REST_URI,
        "auth_type": "org.apache.iceberg.gcp.auth.GoogleAuthManager",
        "io_impl": "org.apache.iceberg.gcp.gcs.GCSFileIO",
    },
    "polaris": {"scope": "PRINCIPAL_ROLE:ALL", "vended_credentials": True},
    "lakekeeper": {"vended_credentials": True},
}
# The Iceberg bundle a FileIO needs besides the runtime, added when the runtime comes from Maven.
FILE_IO_BUNDLES = {
    "org.apache.iceberg.gcp.gcs.GCSFileIO": "iceberg-gcp-bundle",
    "org.apache.iceberg.aws.s3.S3FileIO": "iceberg-aws-bundle",
    "org.apache.iceberg.azure.adlsv2.ADLSFileIO": "iceberg-azure-bundle",
}
VENDED_CREDENTIALS_HEADER = "X-Iceberg-Access-Delegation"
# A catalog property (or HTTP header) with a name like these carries a secret: it goes to
# secret_conf(), never to spark_conf() (which ends on a spark-submit command line).
_SECRET_NAME = re.compile(
    r"password|secret|credential|authorization|cookie|api[-_.]?key|private[-_.]?key"
    r"|access[-_.]?key|(^|[-_.])token$",
    re.IGNORECASE,
)
# Spark's own redaction (UI, event log) plus the names above: set on jobs that carry secrets.
REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|credential|authorization"


def is_secret_name(name: str) -> bool:
    """Whether a catalog property or header named ``name`` holds a secret (``jdbc.password``,
    ``credential``, ``token``, ``header.Authorization``, ``s3.secret-access-key``)."""
    return bool(_SECRET_NAME.search(name))


@dataclass(frozen=True)
class IcebergCatalog:
    """One Iceberg catalog as Spark sees it.

    ``kind`` (default ``"hadoop"``, or ``"rest"`` when a ``flavor`` is given):

    * ``"hadoop"`` keeps tables under ``warehouse`` (a local folder by default);
    * ``"jdbc"`` keeps the table pointers in a database at ``jdbc_url`` (PostgreSQL or
      SQLite, drivers from Debian's jars) with data under ``warehouse``;
    * ``"rest"``: an Iceberg REST catalog at ``uri`` (BigLake metastore, Apache Polaris,
      Lakekeeper ...). ``flavor`` (``"biglake"``, ``"polaris"``, ``"lakekeeper"``) fills in
      what that server documents (:data:`REST_FLAVORS`); :meth:`rest` builds one from client
      id and secret or a BigLake project. OAuth2 client credentials go in ``credential``
      (``"<client_id>:<secret>"``), a bearer token in ``token``;
    * ``"hive"``: a Hive metastore at ``uri`` (``thrift://host:9083``; none: hive-site.xml's).

    ``headers`` are HTTP headers of a REST catalog, ``properties`` any further catalog
    properties (``client.region``, ``s3.endpoint`` ...). Secrets (``jdbc_password``,
    ``credential``, ``token``, headers and properties named like a secret) are left out of
    ``repr`` and :meth:`spark_conf`: :meth:`secret_conf` has them, and the runners hand them
    to the job in a file only the task's user can read (docs/catalogs.md).
    """

    name: str = "lake"
    kind: str | None = None
    warehouse: str = ""
    jdbc_url: str | None = None
    jdbc_user: str | None = None
    jdbc_password: str | None = field(default=None, repr=False)
    packages: tuple[str, ...] | None = None
    extra_jars: tuple[str, ...] = ()
    spark_version: str | None = None
    uri: str | None = None
    flavor: str | None = None
    credential: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    oauth2_server_uri: str | None = None
    scope: str | None = None
    auth_type: str | None = None
    io_impl: str | None = None
    vended_credentials: bool | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False, hash=False)
    properties: Mapping[str, str] = field(default_factory=dict, repr=False, hash=False)

    def __post_init__(self) -> None:
        validate_identifier("Iceberg catalog name", self.name)
        kind = self.kind or ("rest" if self.flavor else "hadoop")
        if kind not in KINDS:
            raise ValueError(
                f"Iceberg catalog kind {kind!r} is not supported: use one of {list(KINDS)}"
            )
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "headers", {str(k): str(v) for k, v in dict(self.headers).items()})
        object.__setattr__(
            self, "properties", {str(k): str(v) for k, v in dict(self.properties).items()}
        )
        if self.packages is not None:
            object.__setattr__(self, "packages", tuple(self.packages))
        object.__setattr__(self, "extra_jars", tuple(self.extra_jars))
        if self.flavor is not None:
            self._apply_flavor()
        if self.vended_credentials is None:
            object.__setattr__(self, "vended_credentials", False)
        if not self.warehouse and kind in ("hadoop", "jdbc"):
            object.__setattr__(self, "warehouse", default_warehouse())
        if kind != "rest":  # a REST warehouse may be a catalog's name, the server's to read
            refuse_half_uri(f"Iceberg catalog {self.name!r} has warehouse", self.warehouse)
        if kind == "jdbc" and not self.jdbc_url:
            raise ValueError(
                f"Iceberg catalog {self.name!r} is kind 'jdbc' but has no jdbc_url: pass e.g. "
                f"jdbc_url='jdbc:postgresql://127.0.0.1:5432/iceberg'"
            )
        if kind == "rest":
            self._check_rest()
        elif kind == "hive" and self.uri and not self.uri.startswith("thrift://"):
            raise ValueError(
                f"Hive catalog {self.name!r} has uri {self.uri!r}: a Hive metastore is reached "
                f"at thrift://<host>:<port> (e.g. thrift://metastore:9083), or leave uri out "
                f"to use hive-site.xml's hive.metastore.uris"
            )
        rest_only = [
            f for f in ("credential", "token", "oauth2_server_uri", "scope", "auth_type")
            if getattr(self, f)
        ] + (["headers"] if self.headers else []) + (
            ["vended_credentials"] if self.vended_credentials else []
        )
        if kind != "rest" and rest_only:
            raise ValueError(
                f"Iceberg catalog {self.name!r} is kind {kind!r} but sets {rest_only}, which "
                f"only a REST catalog uses: pass kind='rest' with its uri, or leave them out"
            )

    def _apply_flavor(self) -> None:
        if self.flavor not in REST_FLAVORS:
            raise ValueError(
                f"Iceberg catalog {self.name!r} has flavor {self.flavor!r}: known flavors are "
                f"{sorted(REST_FLAVORS)} (or leave flavor out for any other REST catalog)"
            )
        if self.kind != "rest":
            raise ValueError(
                f"Iceberg catalog {self.name!r} has flavor {self.flavor!r}, a REST catalog, but "
                f"kind {self.kind!r}: leave kind out or pass kind='rest'"
            )
        for attribute, value in REST_FLAVORS[self.flavor].items():
            if getattr(self, attribute) is None:
                object.__setattr__(self, attribute, value)
        if self.flavor == "polaris" and self.credential and not self.oauth2_server_uri and self.uri:
            # Polaris serves the token endpoint under its catalog API (its quickstart's
            # /api/catalog/v1/oauth/tokens); saying so spares the REST client's fallback warning.
            object.__setattr__(self, "oauth2_server_uri", f"{self.uri.rstrip('/')}/v1/oauth/tokens")

    def _check_rest(self) -> None:
        if not self.uri or not self.uri.startswith(("http://", "https://")):
            raise ValueError(
                f"REST catalog {self.name!r} has uri {self.uri!r}: pass the catalog's HTTP "
                f"endpoint, e.g. uri='https://polaris.example.com/api/catalog'"
            )
        if self.credential is not None and ":" not in self.credential:
            raise ValueError(
                f"REST catalog {self.name!r}: credential must be '<client_id>:<client_secret>' "
                f"(OAuth2 client credentials); a bearer token goes in token="
            )
        if self.flavor == "biglake":
            if not self.warehouse.startswith(("gs://", "bl://", "bq://")):
                raise ValueError(
                    f"BigLake catalog {self.name!r} has warehouse {self.warehouse!r}: pass "
                    f"'gs://<bucket>' (a single-bucket catalog) or "
                    f"'bl://projects/<project>/catalogs/<catalog>'"
                )
            if not any(h.lower() == "x-goog-user-project" for h in self.headers):
                raise ValueError(
                    f"BigLake catalog {self.name!r} has no billing project: pass "
                    f"IcebergCatalog.rest(flavor='biglake', project='<project>', ...), the "
                    f"connection extra 'project', or headers={{'x-goog-user-project': '<project>'}}"
                )
        elif self.flavor in ("polaris", "lakekeeper"):
            what = "catalog in Polaris" if self.flavor == "polaris" else "warehouse in Lakekeeper"
            if not self.warehouse or "://" in self.warehouse:
                raise ValueError(
                    f"{self.flavor.capitalize()} catalog {self.name!r} has warehouse "
                    f"{self.warehouse!r}: {self.flavor.capitalize()}'s warehouse is the name of "
                    f"the {what} (e.g. warehouse='quickstart_catalog'), not a storage path"
                )

    @classmethod
    def rest(
        cls,
        uri: str | None = None,
        *,
        flavor: str | None = None,
        warehouse: str = "",
        client_id: str | None = None,
        client_secret: str | None = None,
        project: str | None = None,
        location: str | None = None,
        **fields: Any,
    ) -> IcebergCatalog:
        """A REST catalog: ``client_id`` and ``client_secret`` become the OAuth2 ``credential``;
        for BigLake, ``project`` the billing header and ``location`` the regional endpoint.

        ``IcebergCatalog.rest(flavor="biglake", warehouse="gs://bucket", project="p")``,
        ``IcebergCatalog.rest("http://polaris:8181/api/catalog", flavor="polaris",
        warehouse="quickstart_catalog", client_id=..., client_secret=...)``.
        """
        if (client_id is None) != (client_secret is None):
            raise ValueError(
                "REST catalog credentials need both client_id and client_secret (or neither; "
                "a bearer token goes in token=)"
            )
        if client_id is not None:
            fields["credential"] = f"{client_id}:{client_secret}"
        headers = dict(fields.pop("headers", None) or {})
        if project:
            headers["x-goog-user-project"] = project
        if location and uri is None:
            uri = f"https://biglake.{location}.rep.googleapis.com/iceberg/v1/restcatalog"
        fields.setdefault("kind", "rest")
        return cls(flavor=flavor, uri=uri, warehouse=warehouse, headers=headers, **fields)

    @property
    def warehouse_uri(self) -> str:
        """The warehouse as a URI (a local folder as ``file:``; a URI exactly as given). A
        REST catalog whose warehouse is a name (Polaris, Lakekeeper) gives ``<uri>/<name>``:
        table locations are the server's to choose, so this only names them for lineage."""
        if self.kind == "rest" and "://" not in self.warehouse:
            return "/".join(p for p in (str(self.uri).rstrip("/"), self.warehouse) if p)
        if not self.warehouse:
            return self.uri or ""
        if "://" in self.warehouse or self.warehouse.startswith("file:"):
            return self.warehouse
        return Path(self.warehouse).absolute().as_uri()

    def runtime(self) -> tuple[list[str], tuple[str, ...]]:
        """(local jars, Maven packages) that give Spark the Iceberg runtime (see the module)."""
        from airflow_cdc.spark.environment import find_spark, iceberg_runtime_package

        if self.packages:
            return [], tuple(self.packages)
        if self.spark_version:
            return [], (iceberg_runtime_package(self.spark_version), *self._file_io_bundles())
        if offline_runtime_available():
            if self.kind == "rest":
                raise IcebergProvisioningError(
                    f"REST catalog {self.name!r} cannot run on the offline Iceberg runtime of "
                    f"this machine: that jar (PyPI's snowpark-connect-deps-iceberg) lacks the "
                    f"relocated Apache HttpClient 5 (org.apache.iceberg.shaded.org.apache.hc."
                    f"client5) the REST client needs. Give the Spark the jobs run on, e.g. "
                    f"spark_version='3.5' (Dataproc 2.2), so Spark resolves the official runtime "
                    f"from Maven, or packages=['org.apache.iceberg:iceberg-spark-runtime-3.5_2.12"
                    f":{_iceberg_version()}']"
                )
            return provision_iceberg_jars(), ()
        found = find_spark()
        if found is None:
            raise IcebergProvisioningError(
                f"Iceberg catalog {self.name!r}: no Spark was found here to choose the Iceberg "
                f"runtime for (no $SPARK_HOME, no pyspark). Give the Spark your jobs run on, "
                f"e.g. IcebergCatalog(spark_version='3.5'), or packages=[...]; or install "
                f"'airflow-cdc[spark]' to run Spark on this machine"
            )
        return [], (iceberg_runtime_package(found.version, found.scala), *self._file_io_bundles())

    def _file_io_bundles(self) -> tuple[str, ...]:
        bundle = FILE_IO_BUNDLES.get(self.io_impl or "")
        return (f"org.apache.iceberg:{bundle}:{_iceberg_version()}",) if bundle else ()

    def jars(self, runtime_jars: list[str] | None = None) -> list[str]:
        """Local jars this catalog needs on the driver and executors (``runtime_jars``: the
        runtime's, when :meth:`runtime` was asked already)."""
        jars: list[str] = list(self.runtime()[0] if runtime_jars is None else runtime_jars)
        if self.kind == "jdbc":
            scheme = (self.jdbc_url or "").split(":")[1] if ":" in (self.jdbc_url or "") else ""
            driver = JDBC_DRIVER_JARS.get(scheme)
            if driver is None:
                raise ValueError(
                    f"JDBC catalog URL {self.jdbc_url!r} is for {scheme!r}: supported are "
                    f"{sorted(JDBC_DRIVER_JARS)} (or add the driver through extra_jars)"
                )
            if not driver.exists():
                raise IcebergProvisioningError(
                    f"{driver} is missing: install Debian's "
                    f"{JDBC_DRIVER_PACKAGES[scheme]}"
                    f" (make setup does)"
                )
            jars.append(str(driver))
        jars.extend(self.extra_jars)
        return jars

    def catalog_properties(self) -> dict[str, str]:
        """Every property of the catalog under ``spark.sql.catalog.<name>``, secrets included
        (what :meth:`spark_conf` and :meth:`secret_conf` split)."""
        prefix = f"spark.sql.catalog.{self.name}"
        conf = {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.type": str(self.kind)}
        if self.kind in ("hadoop", "jdbc"):
            conf[f"{prefix}.warehouse"] = self.warehouse_uri
        elif self.warehouse:
            # A REST warehouse may be a name (Polaris, Lakekeeper): passed as given.
            conf[f"{prefix}.warehouse"] = (
                self.warehouse if self.kind == "rest" else self.warehouse_uri
            )
        if self.kind == "jdbc":
            conf[f"{prefix}.uri"] = str(self.jdbc_url)
            if self.jdbc_user:
                conf[f"{prefix}.jdbc.user"] = self.jdbc_user
            if self.jdbc_password:
                conf[f"{prefix}.jdbc.password"] = self.jdbc_password
            # Creates the catalog tables on first use (iceberg_tables, namespace properties).
            conf[f"{prefix}.jdbc.schema-version"] = "V1"
        elif self.uri:
            conf[f"{prefix}.uri"] = self.uri
        auth_type = self.auth_type or ("oauth2" if self.credential or self.token else None)
        for key, value in (
            ("rest.auth.type", auth_type),
            ("credential", self.credential),
            ("token", self.token),
            ("oauth2-server-uri", self.oauth2_server_uri),
            ("scope", self.scope),
            ("io-impl", self.io_impl),
        ):
            if value:
                conf[f"{prefix}.{key}"] = value
        headers = dict(self.headers)
        if self.vended_credentials:
            headers.setdefault(VENDED_CREDENTIALS_HEADER, "vended-credentials")
        for header, value in headers.items():
            conf[f"{prefix}.header.{header}"] = value
        for key, value in self.properties.items():
            conf[f"{prefix}.{key}"] = value
        return conf

    def secret_conf(self) -> dict[str, str]:
        """The catalog's secret Spark properties (JDBC password, REST credential and token,
        headers and properties named like a secret): set them on the session at run time,
        never on a command line."""
        prefix = f"spark.sql.catalog.{self.name}."
        return {
            key: value
            for key, value in self.catalog_properties().items()
            if key.startswith(prefix) and is_secret_name(key[len(prefix):])
        }

    def spark_conf(self) -> dict[str, str]:
        """Spark configuration that makes ``<name>`` an Iceberg catalog in a session, without
        its secrets (:meth:`secret_conf`): what may go on a spark-submit command line."""
        secret = self.secret_conf()
        conf = {"spark.sql.extensions": ICEBERG_EXTENSIONS}
        conf.update((k, v) for k, v in self.catalog_properties().items() if k not in secret)
        runtime_jars, packages = self.runtime()
        jars = self.jars(runtime_jars)
        if jars:
            conf["spark.jars"] = ",".join(jars)
        if packages:
            conf["spark.jars.packages"] = ",".join(packages)
        return conf

    def table(self, namespace: str, name: str) -> str:
        """Fully qualified table name, each part validated before it goes into SQL."""
        validate_identifier("Iceberg namespace", namespace)
        validate_identifier("Iceberg table name", name)
        return f"{self.name}.{namespace}.{name}"


def _iceberg_version() -> str:
    from airflow_cdc.spark.environment import ICEBERG_VERSION

    return ICEBERG_VERSION


def default_warehouse() -> str:
    """``$AIRFLOW_CDC_WAREHOUSE``, else ``$AIRFLOW_HOME/cdc_warehouse`` (``~/airflow`` default).

    The setting is kept as its text: a URI (``gs://bucket/prefix``) read as a path would
    collapse to ``gs:/bucket/prefix``, a folder under the worker's working directory, so every
    worker would keep its own copy of the tables.
    """
    configured = os.environ.get("AIRFLOW_CDC_WAREHOUSE")
    if configured:
        return configured
    home = os.environ.get("AIRFLOW_HOME") or str(Path.home() / "airflow")
    return str(Path(home) / "cdc_warehouse")




# Compiled classes Spark keeps (its default is 100): a session that runs window after window
# plans about 200 distinct generated classes per window (three tables), which the default
# evicts, so every window compiled its code again. Local sessions and the warm driver.
CODEGEN_CACHE_CONF = {"spark.sql.codegen.cache.maxEntries": "1000"}


def local_session(
    catalog: IcebergCatalog,
    app_name: str = "airflow-cdc",
    master: str = "local[2]",
    extra_conf: dict[str, str] | None = None,
):
    """A SparkSession with ``catalog`` configured (pyspark imported here, not at module level).

    A local session usually runs many windows' jobs (the demo, tests, a notebook), each planning
    a few dozen distinct generated classes; Spark's default cache of 100 evicts them between
    windows, so every window compiled its code again. A larger cache keeps them.

    The catalog's secrets are set on the session once it exists: pyspark passes builder
    options to the JVM it starts on that JVM's command line.
    """
    from pyspark.sql import SparkSession

    from airflow_cdc.spark.environment import use_java_home

    use_java_home()  # the JVM pyspark starts finds Java through this process's environment
    builder = SparkSession.builder.appName(app_name).master(master)
    conf = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        **CODEGEN_CACHE_CONF,
        "spark.ui.enabled": "false",
        **catalog.spark_conf(),
        **(extra_conf or {}),
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    for key, value in catalog.secret_conf().items():
        session.conf.set(key, value)
    return session


if __name__ == "__main__":  # `python -m airflow_cdc.spark.iceberg`: provisioning for make setup
    for jar in provision_iceberg_jars():
        print(jar)
