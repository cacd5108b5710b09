"""Iceberg catalog configuration for Spark, and the jar folder of the Iceberg jars.

A catalog is described once (:class:`IcebergCatalog`) and turned into Spark configuration,
so every job (changelog writer, apply, snapshot) sees the same tables whatever runner
launches it.

Where the Iceberg runtime comes from (:meth:`IcebergCatalog.runtime`), first that applies:

* ``packages`` given (for example ``org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.11.0``):
  Spark resolves them (``spark.jars.packages``).
* ``spark_version`` given (the cluster's Spark, e.g. ``"3.5"`` on Dataproc 2.2): the runtime
  coordinate for that Spark (:func:`~airflow_cdc.spark.environment.iceberg_runtime_package`),
  resolved by the cluster from Maven.
* otherwise the coordinate for the Spark found on this machine (``$SPARK_HOME`` or pyspark),
  plus the bundle its FileIO needs (``iceberg-gcp-bundle`` for ``GCSFileIO`` ...): each taken
  from the jar folder (:func:`jars_cache_dir`) when it holds it, which is how air-gapped
  workers run and what ``make setup`` fills with the machine's Maven client; the rest
  resolved by Spark's own resolver from Maven Central (``spark.jars.packages``, cached in
  ``spark.jars.ivy`` when ``$AIRFLOW_CDC_IVY_DIR`` places it). With no Spark found, building
  a job's conf fails naming ``spark_version`` and ``packages``.

These are Apache Iceberg's own jars as Maven Central serves them: the runtime shades what it
needs (Jackson, HttpClient 5 for REST catalogs), so no jar is rebuilt here.

No pyspark import at module level: Airflow-side code imports this to build job specs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from airflow_cdc.model import CdcError, validate_identifier
from airflow_cdc.work_root import refuse_half_uri

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
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
JARS_DIR_ENV = "AIRFLOW_CDC_JARS_DIR"
IVY_DIR_ENV = "AIRFLOW_CDC_IVY_DIR"
# Google's Cloud Storage connector, Hadoop's file system for gs:// (the jar with its
# dependencies shaded): a Hadoop catalog on gs:// and Spark's own readers and writers of gs://
# paths (Datastream's event files; a work root's files where the job's driver has no gcsfs)
# need it on a Spark that lacks it (Dataproc's images have their own). One per Spark major
# version, for the Hadoop that Spark ships: the 3.x connectors open files with Hadoop 3.3.5's
# open-file options, which Spark 3.5's Hadoop 3.3.4 lacks, so Spark 3 takes the 2.2 line;
# Spark 4's Hadoop 3.4 changed the vectored-read helpers the 3.x connectors call, so Spark 4
# takes the 4.0 line (built on Hadoop 3.4.2). Spark's resolver takes no classifier, so it
# comes from the jar folder (:func:`fetch_with_maven`, ``gcs-connector``).
GCS_CONNECTORS = {
    "3": "com.google.cloud.bigdataoss:gcs-connector:hadoop3-2.2.33:shaded",
    "4": "com.google.cloud.bigdataoss:gcs-connector:4.0.4:shaded",
}


def gcs_connector_package(spark_version: str) -> str:
    """The GCS connector's coordinate for a Spark of ``spark_version`` (``"3.5.9"``, ``"4.0"``)."""
    major = spark_version.split(".")[0]
    if major not in GCS_CONNECTORS:
        raise IcebergProvisioningError(
            f"no GCS connector is known for Spark {spark_version}: supported Spark lines are "
            f"{sorted(GCS_CONNECTORS)}.x; give the connector's jar in extra_jars"
        )
    return GCS_CONNECTORS[major]


class IcebergProvisioningError(CdcError):
    """The Iceberg jars cannot be found or fetched."""


def jars_cache_dir() -> Path:
    """The folder of jars a Spark here takes instead of resolving Maven coordinates (air-gapped
    workers; what ``make setup`` fills): ``$AIRFLOW_CDC_JARS_DIR``, else
    ``~/.cache/airflow-cdc/jars``."""
    configured = os.environ.get(JARS_DIR_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "airflow-cdc" / "jars"


def ivy_dir() -> str | None:
    """Where Spark's own resolver keeps what it fetches (``spark.jars.ivy``):
    ``$AIRFLOW_CDC_IVY_DIR`` when set (a folder workers share or an image bakes), else Spark's
    default (``~/.ivy2``)."""
    return os.environ.get(IVY_DIR_ENV) or None


def jar_file_name(coordinate: str) -> str:
    """The file Maven names an artifact by: ``group:artifact:version[:classifier]`` ->
    ``artifact-version[-classifier].jar``."""
    parts = coordinate.split(":")
    if len(parts) not in (3, 4) or not all(parts):
        raise ValueError(
            f"Maven coordinate {coordinate!r} is not group:artifact:version[:classifier], "
            f"e.g. 'org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.11.0'"
        )
    _, artifact, version, *classifier = parts
    return f"{artifact}-{version}{''.join('-' + c for c in classifier)}.jar"


def offline_jar(coordinate: str, folder: Path | None = None) -> Path | None:
    """The jar of ``coordinate`` in the jar folder, or None when the folder lacks it."""
    path = (folder or jars_cache_dir()) / jar_file_name(coordinate)
    return path if path.is_file() else None


def local_runtime_package() -> str:
    """The Iceberg runtime coordinate for this interpreter's pyspark (what ``make setup``
    fetches)."""
    from airflow_cdc.spark.environment import find_spark, iceberg_runtime_package

    found = find_spark({})  # this interpreter's pyspark, whatever SPARK_HOME says
    if found is None:
        raise IcebergProvisioningError(
            "this interpreter has no pyspark with a Spark in it: install 'airflow-cdc[spark]', "
            "or give the catalog spark_version=... or packages=[...] for a cluster's Spark"
        )
    return iceberg_runtime_package(found.version, found.scala)


def fetch_jars(coordinates: list[str] | tuple[str, ...], folder: Path | None = None) -> list[Path]:
    """Put the jars of ``coordinates`` into ``folder`` (the jar folder by default), skipping
    those already there; their paths, in order. Idempotent.

    They are fetched the way a Spark user gets them: a local Spark started once with
    ``spark.jars.packages`` (Spark's own resolver, from Maven Central) and a throwaway Ivy
    cache, whose retrieved jars are then copied in. Iceberg's runtimes and bundles are shaded
    jars without dependencies, so each coordinate is one file. Each jar lands under a
    temporary name and is renamed, so a concurrent reader never sees a partial jar.
    """
    from airflow_cdc.spark.environment import with_java

    folder = folder or jars_cache_dir()
    paths = [folder / jar_file_name(c) for c in coordinates]
    missing = [c for c, p in zip(coordinates, paths) if not p.is_file()]
    if not missing:
        return paths
    if find_spec("pyspark") is None:
        raise IcebergProvisioningError(
            f"the jar folder {folder} lacks {[jar_file_name(c) for c in missing]} and this "
            f"interpreter has no pyspark to fetch them with: install 'airflow-cdc[spark]', copy "
            f"the jars there, or leave the folder out so Spark resolves them itself"
        )
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cdc-ivy-") as ivy:
        script = (
            "import sys\n"
            "from pyspark.sql import SparkSession\n"
            "SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false')"
            ".config('spark.jars.packages', sys.argv[1]).config('spark.jars.ivy', sys.argv[2])"
            ".getOrCreate().stop()\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", script, ",".join(missing), ivy],
            capture_output=True, text=True, env=with_java(dict(os.environ)),
        )
        for coordinate in missing:
            group, artifact, version, *classifier = coordinate.split(":")
            suffix = "".join("-" + c for c in classifier)
            retrieved = Path(ivy, "jars", f"{group}_{artifact}-{version}{suffix}.jar")
            if not retrieved.is_file():
                raise IcebergProvisioningError(
                    f"Spark could not fetch {coordinate} from Maven Central into {folder} "
                    f"(exit {proc.returncode}): {(proc.stdout + proc.stderr)[-2000:]}"
                )
            staging = folder / f".{jar_file_name(coordinate)}.{os.getpid()}.partial"
            shutil.copyfile(retrieved, staging)
            os.replace(staging, folder / jar_file_name(coordinate))
    return paths


def fetch_with_maven(coordinate: str, folder: Path | None = None) -> Path:
    """Put the jar of ``coordinate`` (``group:artifact:version[:classifier]``) into ``folder``
    (the jar folder by default) with the machine's Maven client, unless it is there: for
    jars Spark's resolver cannot name (a classifier, as the GCS connector's shaded jar has).
    Lands under a temporary name and is renamed, as :func:`fetch_jars` does."""
    folder = folder or jars_cache_dir()
    target = folder / jar_file_name(coordinate)
    if target.is_file():
        return target
    group, artifact, version, *classifier = coordinate.split(":")
    maven = shutil.which("mvn")
    if maven is None:
        raise IcebergProvisioningError(
            f"the jar folder {folder} lacks {target.name} and this machine has no Maven client "
            f"(mvn) to fetch {coordinate} with: install Maven, or download that jar from Maven "
            f"Central into {folder}"
        )
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cdc-maven-", dir=folder) as staging:
        artifact_spec = ":".join([group, artifact, version, "jar", *classifier])
        proc = subprocess.run(
            [maven, "-q", "-B", "dependency:copy", f"-Dartifact={artifact_spec}",
             f"-DoutputDirectory={staging}"],
            capture_output=True, text=True,
        )
        fetched = Path(staging, target.name)
        if not fetched.is_file():
            raise IcebergProvisioningError(
                f"Maven could not fetch {coordinate} into {folder} (exit {proc.returncode}): "
                f"{(proc.stdout + proc.stderr)[-2000:]}"
            )
        os.replace(fetched, target)
    return target


def local_gcs_connector_package() -> str:
    """The GCS connector's coordinate for this interpreter's pyspark."""
    from airflow_cdc.spark.environment import find_spark

    found = find_spark({})
    if found is None:
        raise IcebergProvisioningError(
            "this interpreter has no pyspark with a Spark in it to choose the GCS connector for: "
            "install 'airflow-cdc[spark]'"
        )
    return gcs_connector_package(found.version)


def provision_iceberg_jars(bundles: tuple[str, ...] = ()) -> list[str]:
    """Fill the jar folder with the Iceberg runtime for this interpreter's pyspark (and the
    named Iceberg bundles, e.g. ``iceberg-gcp-bundle``, and ``gcs-connector``: the GCS
    connector for that Spark, through Maven); their paths. What ``make setup`` runs."""
    iceberg = [b for b in bundles if b != "gcs-connector"]
    coordinates = [local_runtime_package(), *(f"org.apache.iceberg:{b}:{_iceberg_version()}" for b in iceberg)]
    fetched = [str(p) for p in fetch_jars(coordinates)]
    if "gcs-connector" in bundles:
        fetched.append(str(fetch_with_maven(local_gcs_connector_package())))
    return fetched


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
GCS_FILE_IO = "org.apache.iceberg.gcp.gcs.GCSFileIO"
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
    storage_emulator_host: str | None = None

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
        self._apply_gcs(kind)
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

    @property
    def on_gcs(self) -> bool:
        """Whether the warehouse is a ``gs://`` URI."""
        return self.warehouse.startswith("gs://")

    def _apply_gcs(self, kind: str) -> None:
        """A JDBC catalog's ``gs://`` warehouse is read and written through Iceberg's own
        GCSFileIO unless ``io_impl`` says otherwise (Iceberg's JDBC catalog would take
        Hadoop's file systems). A Hadoop catalog's commits are renames in its file system, so
        it stays on Hadoop's (the GCS connector); a REST catalog's server or a Hive
        metastore's cluster chooses its own. ``storage_emulator_host`` is a GCS-compatible
        server reached without credentials (an emulator), as ``STORAGE_EMULATOR_HOST`` names
        one to Google's Python clients."""
        if self.io_impl is None and kind == "jdbc" and self.on_gcs:
            object.__setattr__(self, "io_impl", GCS_FILE_IO)
        host = self.storage_emulator_host
        if host is None:
            return
        if "://" not in host:
            host = f"http://{host}"
        if not re.fullmatch(r"https?://[^/\s]+/?", host):
            raise ValueError(
                f"Iceberg catalog {self.name!r} has storage_emulator_host "
                f"{self.storage_emulator_host!r}: give the emulator's address as "
                f"http://<host>:<port> (e.g. http://127.0.0.1:4443), without a path"
            )
        if kind in ("hadoop", "jdbc") and not self.on_gcs:
            raise ValueError(
                f"Iceberg catalog {self.name!r} sets storage_emulator_host but its warehouse "
                f"{self.warehouse!r} is not on GCS: give a gs://<bucket>/<prefix> warehouse, "
                f"or leave storage_emulator_host out"
            )
        object.__setattr__(self, "storage_emulator_host", host.rstrip("/"))

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
        found = find_spark()
        if found is None:
            raise IcebergProvisioningError(
                f"Iceberg catalog {self.name!r}: no Spark was found here to choose the Iceberg "
                f"runtime for (no $SPARK_HOME, no pyspark). Give the Spark your jobs run on, "
                f"e.g. IcebergCatalog(spark_version='3.5'), or packages=[...]; or install "
                f"'airflow-cdc[spark]' to run Spark on this machine"
            )
        coordinates = (iceberg_runtime_package(found.version, found.scala), *self._file_io_bundles())
        local = {c: offline_jar(c) for c in coordinates}
        return (
            [str(path) for path in local.values() if path is not None]
            + self._gcs_connector(found.version),
            tuple(c for c, path in local.items() if path is None),
        )

    def _gcs_connector(self, spark_version: str) -> list[str]:
        """The GCS connector's jar for a local Spark and a gs:// warehouse, when the jar
        folder holds it (see :data:`GCS_CONNECTORS`; :meth:`missing_gcs_connector` says when
        it does not); a cluster's Spark brings its own."""
        jar = offline_jar(gcs_connector_package(spark_version)) if self.on_gcs else None
        return [str(jar)] if jar is not None else []

    def missing_gcs_connector(self) -> str | None:
        """Why a local Spark cannot open this catalog's gs:// paths, or None: the warehouse
        is on GCS and the jar folder lacks the connector (what ``airflow-cdc doctor`` reports;
        a Hadoop catalog then cannot open its tables, and Spark cannot read or write a gs://
        work root's files)."""
        from airflow_cdc.spark.environment import find_spark

        found = find_spark()
        if not self.on_gcs or self.packages or self.spark_version or found is None:
            return None
        coordinate = gcs_connector_package(found.version)
        if offline_jar(coordinate):
            return None
        return (
            f"Iceberg catalog {self.name!r} has warehouse {self.warehouse!r}, and the jar folder "
            f"{jars_cache_dir()} lacks the GCS connector ({jar_file_name(coordinate)}) a "
            f"local Spark opens gs:// paths with: run 'python -m airflow_cdc.spark.iceberg "
            f"iceberg-gcp-bundle gcs-connector' (Maven fetches {coordinate}), or put that "
            f"jar there"
        )

    def hadoop_conf(self, connector: bool) -> dict[str, str]:
        """Spark's Hadoop configuration for gs:// paths: the connector's file system classes
        when ``connector`` (its jar is on this job's classpath) and, with
        ``storage_emulator_host``, the emulator's address without credentials (what the
        connector, here or a cluster's own, reads)."""
        conf: dict[str, str] = {}
        if connector:
            conf["spark.hadoop.fs.gs.impl"] = "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem"
            conf["spark.hadoop.fs.AbstractFileSystem.gs.impl"] = "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS"
        if self.storage_emulator_host:
            conf["spark.hadoop.fs.gs.storage.root.url"] = f"{self.storage_emulator_host}/"
            conf["spark.hadoop.fs.gs.project.id"] = self._emulator_project()
            conf["spark.hadoop.fs.gs.auth.type"] = "UNAUTHENTICATED"  # the 3.x connectors
            conf["spark.hadoop.fs.gs.auth.service.account.enable"] = "false"  # the 2.2 line
            conf["spark.hadoop.fs.gs.auth.null.enable"] = "true"
            # The newer connectors rename a file with the JSON API's objects.move, which
            # emulators do not serve; copy and delete is what they do without.
            conf["spark.hadoop.fs.gs.operation.move.enable"] = "false"
        return conf

    def _emulator_project(self) -> str:
        # Google's Java clients look for a project before their first call (environment,
        # credentials, then the metadata server); an emulator takes any name.
        return self.properties.get("gcs.project-id") or "local-emulator"

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
        if self.storage_emulator_host:  # GCSFileIO's endpoint and anonymous access
            conf[f"{prefix}.gcs.service.host"] = self.storage_emulator_host
            conf[f"{prefix}.gcs.no-auth.enabled"] = "true"
            conf[f"{prefix}.gcs.project-id"] = self._emulator_project()
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
        conf.update(self.hadoop_conf(any(Path(jar).name.startswith("gcs-connector-") for jar in runtime_jars)))
        jars = self.jars(runtime_jars)
        if jars:
            conf["spark.jars"] = ",".join(jars)
        if packages:
            conf["spark.jars.packages"] = ",".join(packages)
            if ivy_dir():
                conf["spark.jars.ivy"] = str(ivy_dir())
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


# Compiled classes Spark keeps (its default is 100): saves compiling a window's generated code
# again in a session that runs window after window (bench/window.py; docs/performance.md).
# Local sessions and the warm driver.
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


if __name__ == "__main__":  # `python -m airflow_cdc.spark.iceberg [bundle ...]`: make setup's jars
    for jar in provision_iceberg_jars(tuple(sys.argv[1:])):
        print(jar)
