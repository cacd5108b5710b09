"""A class-data archive for the local Spark driver's JVM (Java's AppCDS), built once per machine.

A performance strategy. Saves: parsing and verifying Spark's, Scala's and Iceberg's classes at
the start of every local spark-submit (``bench/window.py``'s floor; docs/performance.md). Java
17 writes the classes a JVM loaded to an archive at its exit (``-XX:ArchiveClassesAtExit``)
and maps that archive into later JVMs (``-XX:SharedArchiveFile``), which then take those
classes from it as they are.

The archive is built by ``python -m airflow_cdc.spark.class_archive`` (``make setup`` runs it;
a deployment image runs it once at build time), from a small job that opens the Iceberg
catalog and writes, merges and reads one table, so the write path's classes are in it too.
:class:`~airflow_cdc.spark.runners.LocalSparkRunner` then adds it to each driver's Java
options when it exists. The JVM checks the archive against its own build and class path and
maps nothing (with a warning) when they differ, so a stale archive costs the saving, never a
job; its file name carries the Java and Spark it was built for (down to the jars' sizes and
times), so a new Java or Spark, or a venv made again, gets its own. The switch:
``AIRFLOW_CDC_CLASS_ARCHIVE`` names another file, or ``off`` runs every driver without one
(the plain path; ``LocalSparkRunner(class_archive=False)`` does the same for one runner). A
build removes the folder's archives no driver mapped for a week (each is large, and every new
venv or Spark makes one).
Executors on a cluster start their own JVMs and are left alone.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from airflow_cdc.spark.packaging import STALE_AFTER_SECONDS, mark_used, prune_unused

ARCHIVE_ENV = "AIRFLOW_CDC_CLASS_ARCHIVE"
ARCHIVE_PREFIX = "spark-driver-"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"

# Loads what a window's jobs load before and around their first Spark job: the session, the
# Iceberg catalog, a table created, appended to, merged into and read.
TRAINING_APPLICATION = """\
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
catalog = spark.conf.get("spark.airflow-cdc.class-archive.catalog")
table = f"{catalog}.archive.training"
spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.archive")
spark.sql(f"CREATE TABLE {table} (id bigint, v string) USING iceberg TBLPROPERTIES ('format-version' = '2')")
spark.createDataFrame([(1, "a"), (2, "b")], "id bigint, v string").writeTo(table).append()
spark.createDataFrame([(2, "c"), (3, "d")], "id bigint, v string").createOrReplaceTempView("changes")
spark.sql(f"MERGE INTO {table} t USING changes s ON t.id = s.id "
          "WHEN MATCHED THEN UPDATE SET t.v = s.v WHEN NOT MATCHED THEN INSERT *")
assert sorted(r.v for r in spark.table(table).collect()) == ["a", "c", "d"]
spark.stop()
"""


def archive_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where the driver's class archive is (or would be built); None when turned off."""
    environ = os.environ if environ is None else environ
    configured = environ.get(ARCHIVE_ENV, "")
    if configured.lower() == "off":
        return None
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "airflow-cdc" / "class-archives" / f"{ARCHIVE_PREFIX}{_build_key(environ)}.jsa"


def _build_key(environ: Mapping[str, str]) -> str:
    """The Java and Spark an archive is built for: the java executable (path, size, time) and
    the Spark installation (``$SPARK_HOME``, else pyspark's folder, and its jars' names, sizes
    and times)."""
    from airflow_cdc.spark.environment import find_spark, with_java

    env = with_java(dict(environ))
    home = env.get("JAVA_HOME")
    java = Path(home) / "bin" / "java" if home else shutil.which("java", path=env.get("PATH", ""))
    parts = []
    if java and Path(java).exists():
        real = Path(java).resolve()
        stat = real.stat()
        parts.append(f"{real}:{stat.st_size}:{int(stat.st_mtime)}")
    # The driver's class path is Spark's jars folder: the JVM maps an archive only into a JVM
    # whose class path begins with the one it was built with, and whose jars are the files it
    # was built with (a venv made again in the same folder has new ones): each jar's size and
    # time are in the key.
    spark = find_spark(env)
    jars = spark.home / "jars" if spark else None
    parts.append(str(spark.home) if spark else "no Spark")
    if jars is not None and jars.is_dir():
        for jar in sorted(jars.glob("*.jar")):
            stat = jar.stat()
            parts.append(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def with_class_archive(conf: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``conf`` with the class archive in the driver's Java options, when it exists and the
    options do not already choose class sharing (``SharedArchiveFile``, ``-Xshare``)."""
    conf = dict(conf)
    path = archive_path(environ)
    if path is None or not path.is_file():
        return conf
    existing = conf.get(DRIVER_JAVA_OPTIONS, "")
    if "SharedArchiveFile" in existing or "-Xshare" in existing or "ArchiveClassesAtExit" in existing:
        return conf
    mark_used(path)
    option = f"-XX:SharedArchiveFile={shlex.quote(str(path))}"
    conf[DRIVER_JAVA_OPTIONS] = f"{existing} {option}".strip()
    return conf


def prune_archives(folder: Path, keep: Path, max_age_seconds: float = STALE_AFTER_SECONDS) -> list[Path]:
    """Remove the archives in ``folder`` (``spark-driver-*.jsa``) other than ``keep`` that no
    job named for ``max_age_seconds`` (:func:`~airflow_cdc.spark.packaging.prune_unused`);
    returns those removed. A JVM that has one mapped keeps its mapping (the file goes when the
    last one exits)."""
    return prune_unused(folder, f"{ARCHIVE_PREFIX}*.jsa", keep, max_age_seconds)


class ClassArchiveError(RuntimeError):
    """The training job did not leave an archive."""


def build_archive(path: Path | None = None, *, environ: Mapping[str, str] | None = None, timeout: float = 600) -> Path:
    """Run the training job with ``-XX:ArchiveClassesAtExit`` and move its archive to ``path``
    (default :func:`archive_path`). Raises ClassArchiveError with the job's last lines when it
    leaves none."""
    from dataclasses import replace

    from airflow_cdc.spark.iceberg import IcebergCatalog
    from airflow_cdc.spark.job import iceberg_job_spec
    from airflow_cdc.spark.runners import LocalSparkRunner

    environ = dict(os.environ if environ is None else environ)
    target = path or archive_path(environ)
    if target is None:
        raise ClassArchiveError(f"{ARCHIVE_ENV}=off: no class archive to build")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cdc-class-archive-") as work:
        application = Path(work) / "training.py"
        application.write_text(TRAINING_APPLICATION)
        catalog = IcebergCatalog(name="archive_lake", warehouse=str(Path(work) / "warehouse"))
        spec = iceberg_job_spec("extract", catalog, [], name="airflow-cdc-class-archive",
                                conf={"spark.airflow-cdc.class-archive.catalog": catalog.name})
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        spec = replace(spec, application=str(application), conf={
            **spec.conf, DRIVER_JAVA_OPTIONS: f"-XX:ArchiveClassesAtExit={shlex.quote(str(partial))}"})
        runner = LocalSparkRunner(master="local[1]", class_archive=False)
        done = subprocess.run(runner.command(spec), env=runner.environment(spec), capture_output=True,
                              text=True, errors="replace", timeout=timeout)
        if done.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise ClassArchiveError(
                f"the class archive's training job (exit {done.returncode}) left no archive at "
                f"{partial}; its last lines:\n{tail}")
        partial.replace(target)  # atomic: a job starting now maps a whole archive or none
    prune_archives(target.parent, keep=target)
    return target


def main(argv: list[str] | None = None) -> int:
    """Build the archive unless it exists (``--force``: anyway). An archive that cannot be
    built is reported and exit status 0 kept: jobs run without it, only slower to start."""
    argv = sys.argv[1:] if argv is None else argv
    path = archive_path()
    if path is None:
        print(f"class archive: off ({ARCHIVE_ENV}=off)")
        return 0
    if path.is_file() and "--force" not in argv:
        print(f"class archive: {path} ({path.stat().st_size / 2**20:.0f} MB, already built)")
        return 0
    started = time.monotonic()
    try:
        build_archive(path)
    except (ClassArchiveError, OSError, subprocess.SubprocessError) as error:
        print(f"class archive: not built, Spark jobs start without it ({error})", file=sys.stderr)
        return 0
    print(f"class archive: {path} ({path.stat().st_size / 2**20:.0f} MB, built in "
          f"{time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
