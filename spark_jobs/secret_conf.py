"""Set a job's secret Spark conf (catalog passwords, credentials, tokens) on its session.

Runners never put secrets on the spark-submit command line (visible to every user in ``ps``):
they write them to a file only the task's user can read and name it in the public conf
``spark.airflow_cdc.secretConfFile`` (:func:`airflow_cdc.spark.runners.secret_conf_file`).
Every entry point calls :func:`load_secret_conf` right after its session exists and before it
first uses a catalog: Spark's CatalogManager reads ``spark.sql.catalog.<name>.*`` from the
session conf when a catalog is first loaded, so a property set here is the catalog's as if
it had been submitted. Values are never printed.
"""

from __future__ import annotations

import json
import os

from airflow_cdc.model import CdcError
from airflow_cdc.spark.job import SECRET_CONF_FILE_KEY


class SecretConfError(CdcError):
    """The secret conf file the job was submitted with cannot be read."""


class CatalogLoadError(CdcError):
    """A catalog the job is configured with cannot be loaded."""


def load_secret_conf(spark) -> list[str]:
    """Set every property of the job's secret conf file on ``spark``; return their keys.

    The file is looked for at its path (client mode: the driver runs where the runner wrote
    it), then by its name in the driver's working folder and among the files Spark shipped
    (cluster deploy mode, where the runner sends it with ``--files``). No file named: nothing
    to do.
    """
    path = spark.conf.get(SECRET_CONF_FILE_KEY, None)
    if not path:
        return []
    values = json.loads(_read(spark, path))
    for key, value in values.items():
        spark.conf.set(str(key), str(value))
    _load_catalogs_and_forget(spark, values)
    return sorted(values)


def _load_catalogs_and_forget(spark, values: dict) -> None:
    """Load every catalog the secrets configure, then take their secrets out of the session
    conf: Spark copies the session's SQL conf into every job's properties, which the event log
    and the UI show unredacted. A loaded catalog keeps its own copy (CatalogManager caches it)."""
    prefix = "spark.sql.catalog."
    names = {key[len(prefix):].split(".", 1)[0] for key in values if key.startswith(prefix)}
    for name in sorted(names):
        load_catalog(spark, name)
    for key in values:
        if key.startswith(prefix):  # a job's own secret settings stay: it reads them itself
            spark.conf.unset(str(key))


def load_catalog(spark, name: str) -> None:
    """Load the session's catalog ``name`` now; one that cannot be loaded (a REST catalog's
    server unreachable or refusing the credentials) fails naming its type and URI, which
    Iceberg's own error leaves out ("Error occurred while processing GET request")."""
    try:
        spark._jsparkSession.sessionState().catalogManager().catalog(name)
    except Exception as error:  # noqa: BLE001 - py4j's error carries Java's cause chain
        prefix = f"spark.sql.catalog.{name}"
        kind = spark.conf.get(f"{prefix}.type", None) or spark.conf.get(prefix, None)
        uri = spark.conf.get(f"{prefix}.uri", None)
        raise CatalogLoadError(
            f"Iceberg catalog {name!r} (type {kind}, uri {uri}) could not be loaded: "
            f"{_java_causes(error)}. Check that the uri is the catalog's endpoint as the Spark "
            f"driver reaches it, and the catalog's credential or token"
        ) from error


def _java_causes(error: Exception) -> str:
    """The messages of a Java exception and its causes, outermost first (the Python error's
    first line when it carries no Java exception)."""
    java = getattr(error, "java_exception", None)
    if java is None:
        return str(error).splitlines()[0] if str(error) else type(error).__name__
    messages = []
    while java is not None and len(messages) < 8:
        messages.append(str(java.toString()))
        java = java.getCause()
    return " <- caused by: ".join(messages)


def _read(spark, path: str) -> str:
    if "://" in path:  # a staged object (gs://, hdfs://), read through Spark's file systems
        from airflow_cdc.spark_jobs.changelog import read_text

        return read_text(spark, path)
    name = os.path.basename(path)
    candidates = [path, name]
    try:
        from pyspark import SparkFiles

        candidates.append(SparkFiles.get(name))
    except Exception:  # noqa: BLE001 - no SparkContext files root: the other places remain
        pass
    for candidate in candidates:
        if os.path.isfile(candidate):
            with open(candidate, encoding="utf-8") as handle:
                return handle.read()
    raise SecretConfError(
        f"the secret conf file {path} ({SECRET_CONF_FILE_KEY}) is not on this Spark driver: "
        f"it is written where the job is submitted and deleted when the job ends. Submit in "
        f"client deploy mode, or in cluster mode through SparkSubmitHookRunner, which ships it "
        f"with --files; do not re-run a job's spark-submit command by hand"
    )
