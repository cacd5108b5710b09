"""A local Iceberg REST catalog server on 127.0.0.1, for the tests and ``make demo CATALOG=rest``.

The server (``demo/rest_catalog_server/RestCatalogServer.java``) is Apache Iceberg's own REST
catalog servlet and adapter over a JDBC catalog on SQLite, with the tables' files under a local
warehouse folder, behind a gate that checks the caller's OAuth2 client credentials or bearer
token and the warehouse name as production catalogs do (the Java file's comment says what it
checks). Its jars come from Maven Central, resolved once by Maven
(``demo/rest_catalog_server/pom.xml``) into ``~/.cache/airflow-cdc/iceberg-rest-catalog/
<iceberg version>`` (``$AIRFLOW_CDC_REST_CATALOG_DIR`` places it), and the server class is
compiled there once.

Its settings, secrets included, reach it on its standard input, never on a command line; it
stops when that input closes, so it never outlives the process that started it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

from airflow_cdc.spark.environment import ICEBERG_VERSION, with_java

SERVER_DIR = Path(__file__).resolve().parent / "rest_catalog_server"
SOURCE = SERVER_DIR / "RestCatalogServer.java"
POM = SERVER_DIR / "pom.xml"
CACHE_ENV = "AIRFLOW_CDC_REST_CATALOG_DIR"
START_TIMEOUT_SECONDS = 180  # a JVM start on two busy cores; a healthy start takes seconds


class RestCatalogServerError(RuntimeError):
    """The REST catalog server could not be fetched, built or started."""


def cache_dir() -> Path:
    configured = os.environ.get(CACHE_ENV)
    base = Path(configured) if configured else Path.home() / ".cache" / "airflow-cdc" / "iceberg-rest-catalog"
    return base / ICEBERG_VERSION


def _run(command: list[str], what: str, env: dict) -> None:
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RestCatalogServerError(
            f"{what} failed (exit {proc.returncode}): {' '.join(command)}\n"
            f"{(proc.stdout + proc.stderr)[-3000:]}"
        )


def server_classpath() -> str:
    """The server's classpath: its jars (fetched by Maven once) and its compiled class (built
    once per version of the Java file)."""
    folder = cache_dir()
    env = with_java(dict(os.environ))
    jars = folder / "jars"
    if not (jars / ".complete").is_file():
        if shutil.which("mvn") is None:
            raise RestCatalogServerError(
                "Maven (mvn) is needed once to fetch the REST catalog server's jars from Maven "
                "Central: install it (Debian: apt-get install maven)"
            )
        staging = folder / f"jars.{os.getpid()}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        _run(["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
              f"-Diceberg.version={ICEBERG_VERSION}", "-DincludeScope=runtime",
              f"-DoutputDirectory={staging}"], "fetching the REST catalog server's jars", env)
        (staging / ".complete").write_text("")
        shutil.rmtree(jars, ignore_errors=True)
        os.replace(staging, jars)
    jar_path = f"{jars}/*"
    classes = folder / "classes" / hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    if not (classes / "RestCatalogServer.class").is_file():
        staging = classes.with_name(f"{classes.name}.{os.getpid()}.partial")
        staging.mkdir(parents=True, exist_ok=True)
        _run(["javac", "-nowarn", "-cp", jar_path, "-d", str(staging), str(SOURCE)],
             "compiling the REST catalog server", env)
        shutil.rmtree(classes, ignore_errors=True)
        os.replace(staging, classes)
    return f"{classes}{os.pathsep}{jar_path}"


class RestCatalogServer:
    """The REST catalog at :attr:`uri` while the ``with`` block runs, its SQLite catalog and
    warehouse under ``folder`` (kept after it stops).

    :param client_id: with ``client_secret``: the OAuth2 client the catalog accepts, issuing
        tokens at ``token_path`` only.
    :param token: a bearer token the catalog accepts.
    :param warehouse_name: the warehouse clients must name (else any).
    Without a client or token the catalog accepts every caller.
    """

    def __init__(self, folder: Path, *, client_id: str | None = None,
                 client_secret: str | None = None, token: str | None = None,
                 token_path: str = "/v1/oauth/tokens", warehouse_name: str | None = None) -> None:
        self.folder = Path(folder)
        self.warehouse = self.folder / "warehouse"
        self.log = self.folder / "server.log"
        self.token_path = token_path
        self._settings = {
            "catalog_db": str(self.folder / "catalog.db"), "warehouse": self.warehouse.as_uri(),
            "host": "127.0.0.1", "port": "0", "token_path": token_path,
            **{k: v for k, v in (("client_id", client_id), ("client_secret", client_secret),
                                 ("token", token), ("warehouse_name", warehouse_name)) if v},
        }
        self.port: int | None = None
        self._process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token_uri(self) -> str:
        return f"{self.uri}{self.token_path}"

    def __enter__(self) -> RestCatalogServer:
        classpath = server_classpath()
        self.warehouse.mkdir(parents=True, exist_ok=True)
        env = with_java(dict(os.environ))
        java = str(Path(env["JAVA_HOME"], "bin", "java")) if env.get("JAVA_HOME") else "java"
        with self.log.open("w") as log:
            self._process = subprocess.Popen(
                [java, "-Xmx512m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                 "-cp", classpath, "RestCatalogServer"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env,
            )
        self._process.stdin.write(json.dumps(self._settings) + "\n")
        self._process.stdin.flush()
        self.port = self._wait_until_listening()
        return self

    def _wait_until_listening(self) -> int:
        """The port the server printed once it serves (Jetty started), or an error with its log."""
        found: list[str] = []
        reader = threading.Thread(target=lambda: found.append(self._process.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_SECONDS)
        line = found[0].strip() if found else ""
        if not line.startswith("listening "):
            self.stop()
            raise RestCatalogServerError(
                f"the REST catalog server did not start within {START_TIMEOUT_SECONDS} s "
                f"(printed {line!r}); its log {self.log}:\n{self.log.read_text()[-3000:]}"
            )
        return int(line.split()[1])

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.stdin.close()  # the server stops when its input closes
            process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait(timeout=30)

    def __exit__(self, *exc) -> None:
        self.stop()
