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
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

from airflow_cdc.model import CdcError, validate_identifier

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


@dataclass(frozen=True)
class IcebergCatalog:
    """One Iceberg catalog as Spark sees it.

    ``kind="hadoop"`` keeps tables under ``warehouse`` (a local folder by default);
    ``kind="jdbc"`` keeps the table pointers in a database at ``jdbc_url`` (PostgreSQL or
    SQLite, drivers from Debian's jars) with data under ``warehouse``.
    """

    name: str = "lake"
    kind: str = "hadoop"
    warehouse: str = ""
    jdbc_url: str | None = None
    jdbc_user: str | None = None
    jdbc_password: str | None = field(default=None, repr=False)
    packages: tuple[str, ...] | None = None
    extra_jars: tuple[str, ...] = ()
    spark_version: str | None = None

    def __post_init__(self) -> None:
        validate_identifier("Iceberg catalog name", self.name)
        if self.kind not in ("hadoop", "jdbc"):
            raise ValueError(
                f"Iceberg catalog kind {self.kind!r} is not supported: use 'hadoop' or 'jdbc' "
                f"(REST needs HttpClient5, which the offline runtime lacks; pass the catalog "
                f"conf yourself through extra Spark conf on clusters with Maven access)"
            )
        if not self.warehouse:
            object.__setattr__(self, "warehouse", str(default_warehouse()))
        if self.kind == "jdbc" and not self.jdbc_url:
            raise ValueError(
                f"Iceberg catalog {self.name!r} is kind 'jdbc' but has no jdbc_url: pass e.g. "
                f"jdbc_url='jdbc:postgresql://127.0.0.1:5432/iceberg'"
            )
        if self.packages is not None:
            object.__setattr__(self, "packages", tuple(self.packages))
        object.__setattr__(self, "extra_jars", tuple(self.extra_jars))

    @property
    def warehouse_uri(self) -> str:
        if "://" in self.warehouse or self.warehouse.startswith("file:"):
            return self.warehouse
        return Path(self.warehouse).absolute().as_uri()

    def runtime(self) -> tuple[list[str], tuple[str, ...]]:
        """(local jars, Maven packages) that give Spark the Iceberg runtime (see the module)."""
        from airflow_cdc.spark.environment import find_spark, iceberg_runtime_package

        if self.packages:
            return [], tuple(self.packages)
        if self.spark_version:
            return [], (iceberg_runtime_package(self.spark_version),)
        if offline_runtime_available():
            return provision_iceberg_jars(), ()
        found = find_spark()
        if found is None:
            raise IcebergProvisioningError(
                f"Iceberg catalog {self.name!r}: no Spark was found here to choose the Iceberg "
                f"runtime for (no $SPARK_HOME, no pyspark). Give the Spark your jobs run on, "
                f"e.g. IcebergCatalog(spark_version='3.5'), or packages=[...]; or install "
                f"'airflow-cdc[spark]' to run Spark on this machine"
            )
        return [], (iceberg_runtime_package(found.version, found.scala),)

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

    def spark_conf(self) -> dict[str, str]:
        """Spark configuration that makes ``<name>`` an Iceberg catalog in a session."""
        prefix = f"spark.sql.catalog.{self.name}"
        conf = {
            "spark.sql.extensions": ICEBERG_EXTENSIONS,
            prefix: "org.apache.iceberg.spark.SparkCatalog",
            f"{prefix}.warehouse": self.warehouse_uri,
        }
        if self.kind == "hadoop":
            conf[f"{prefix}.type"] = "hadoop"
        else:
            conf[f"{prefix}.type"] = "jdbc"
            conf[f"{prefix}.uri"] = str(self.jdbc_url)
            if self.jdbc_user:
                conf[f"{prefix}.jdbc.user"] = self.jdbc_user
            if self.jdbc_password:
                conf[f"{prefix}.jdbc.password"] = self.jdbc_password
            # Creates the catalog tables on first use (iceberg_tables, namespace properties).
            conf[f"{prefix}.jdbc.schema-version"] = "V1"
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


def default_warehouse() -> Path:
    """``$AIRFLOW_CDC_WAREHOUSE``, else ``$AIRFLOW_HOME/cdc_warehouse`` (``~/airflow`` default)."""
    configured = os.environ.get("AIRFLOW_CDC_WAREHOUSE")
    if configured:
        return Path(configured)
    home = os.environ.get("AIRFLOW_HOME") or str(Path.home() / "airflow")
    return Path(home) / "cdc_warehouse"


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
    """
    from pyspark.sql import SparkSession

    from airflow_cdc.spark.environment import use_java_home

    use_java_home()  # the JVM pyspark starts finds Java through this process's environment
    builder = SparkSession.builder.appName(app_name).master(master)
    conf = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.codegen.cache.maxEntries": "1000",
        "spark.ui.enabled": "false",
        **catalog.spark_conf(),
        **(extra_conf or {}),
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


if __name__ == "__main__":  # `python -m airflow_cdc.spark.iceberg`: provisioning for make setup
    for jar in provision_iceberg_jars():
        print(jar)
