"""A Spark job as data: what to submit (:class:`SparkJobSpec`), how it ended, and specs for our jobs.

A spec says nothing about where it runs: the local runner, ``SparkSubmitHook`` and Dataproc
take the same spec, so a job behaves the same on a laptop and on a cluster. Catalog
configuration, jars and the ``--py-files`` zip are merged in here, once.

No Airflow and no pyspark import: Spark jobs import this module (for the result types) on
machines without Airflow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from airflow_cdc.model import CdcError, InvalidIdentifierError, validate_identifier
from airflow_cdc.spark.iceberg import REDACTION_REGEX, IcebergCatalog, is_secret_name
from airflow_cdc.spark.packaging import build_py_files, package_dir

# Conf keys that spark-submit's own options override silently (``--jars`` replaces
# ``spark.jars``): a spec keeps them in its lists instead, so nothing is lost.
_LIST_CONF_KEYS = {
    "spark.jars": "jars",
    "spark.jars.packages": "packages",
    "spark.submit.pyFiles": "py_files",
    "spark.files": "files",
}
# The public conf key naming the file that holds a job's secret conf (written by the runner,
# read by airflow_cdc.spark_jobs.secret_conf right after the session starts).
SECRET_CONF_FILE_KEY = "spark.airflow_cdc.secretConfFile"
_CATALOG_PREFIX = "spark.sql.catalog."
# The lines of a Spark log that say why a job failed: the last line of a Python traceback,
# a JVM exception or its "Caused by", an entry point's "<prog>: error: ..." (not stack frames).
_REASON = re.compile(r"^(?:Caused by: |: )?[\w.$]*(?:Error|Exception)\b.*|.*\berror: .*")


def _split(values: str | Sequence[str] | None) -> tuple[str, ...]:
    if values is None:
        return ()
    if isinstance(values, str):
        values = values.split(",")
    return tuple(v.strip() for v in values if v and v.strip())


def _merge(*lists: Sequence[str]) -> tuple[str, ...]:
    """The values of ``lists`` in order, each once."""
    merged: list[str] = []
    for values in lists:
        for value in values:
            if value not in merged:
                merged.append(value)
    return tuple(merged)


@dataclass(frozen=True)
class SparkJobSpec:
    """Everything a runner needs to submit one Spark application.

    ``application`` is the path of a Python entry point (one of ``spark_jobs/*.py``);
    ``conf`` holds Spark properties. ``spark.jars``, ``spark.jars.packages``,
    ``spark.submit.pyFiles`` and ``spark.files`` found in ``conf`` move into ``jars``,
    ``packages``, ``py_files`` and ``files`` (spark-submit's options would otherwise silently
    replace them). ``env_vars`` go to the spark-submit process (YARN/Kubernetes: the driver).

    ``secret_conf`` holds properties that must not appear on a command line, in a log or in
    ``repr`` (catalog passwords, credentials, tokens); a catalog property in ``conf`` named
    like a secret moves there. Runners hand it to the job in a private file
    (:data:`SECRET_CONF_FILE_KEY`), and the job sets it on its session before first use.
    """

    application: str
    application_args: tuple[str, ...] = ()
    name: str = "airflow-cdc"
    conf: Mapping[str, str] = field(default_factory=dict)
    jars: tuple[str, ...] = ()
    py_files: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    env_vars: Mapping[str, str] = field(default_factory=dict)
    driver_memory: str | None = None
    executor_memory: str | None = None
    executor_cores: int | None = None
    num_executors: int | None = None
    total_executor_cores: int | None = None
    secret_conf: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.application:
            raise ValueError("Spark job spec has no application: pass the path of a spark_jobs entry point")
        conf = {str(k): str(v) for k, v in dict(self.conf).items()}
        secret = {
            key: conf.pop(key)
            for key in list(conf)
            if key.startswith(_CATALOG_PREFIX) and is_secret_name(key[len(_CATALOG_PREFIX):])
        }
        secret.update((str(k), str(v)) for k, v in dict(self.secret_conf).items())
        object.__setattr__(self, "secret_conf", secret)
        lists = {
            "jars": _split(self.jars),
            "packages": _split(self.packages),
            "py_files": _split(self.py_files),
            "files": _split(self.files),
        }
        for key, attribute in _LIST_CONF_KEYS.items():
            if key in conf:
                lists[attribute] = _merge(lists[attribute], _split(conf.pop(key)))
        object.__setattr__(self, "application", str(self.application))
        object.__setattr__(self, "application_args", tuple(str(a) for a in self.application_args))
        object.__setattr__(self, "conf", conf)
        object.__setattr__(self, "env_vars", {str(k): str(v) for k, v in dict(self.env_vars).items()})
        for attribute, values in lists.items():
            object.__setattr__(self, attribute, values)


@dataclass(frozen=True)
class SparkJobResult:
    """How a submitted job ended: spark-submit's exit code, the end of its log, its duration."""

    name: str
    return_code: int
    log_tail: tuple[str, ...]
    duration_seconds: float


class SparkJobError(CdcError):
    """A Spark job ended badly; carries the job's name, exit code and the end of its log."""

    def __init__(
        self, name: str, return_code: int | None, log_tail: Sequence[str], detail: str = ""
    ) -> None:
        self.name = name
        self.return_code = return_code
        self.log_tail = tuple(log_tail)
        reasons = [line for line in self.log_tail if _REASON.match(line.strip())]
        self.reason = reasons[-1].strip() if reasons else (detail or "no error line in the log")
        shown = "\n".join(self.log_tail[-40:])
        super().__init__(
            f"Spark job {name!r} failed (exit code {return_code}): {self.reason}"
            + (f"\n{detail}" if detail and detail != self.reason else "")
            + f"\n--- last {min(40, len(self.log_tail))} log lines ---\n{shown}"
        )


# --- the changelog writer ------------------------------------------------------------------
@dataclass(frozen=True)
class ChangelogWriteResult:
    """What the changelog writer did for one window (its ``--result`` file).

    ``skipped`` means the window had been committed before (I1): ``rows_written`` is then 0 and
    ``snapshot_id`` names the earlier commit (None when that snapshot has since expired).
    """

    table: str
    window_id: str
    snapshot_id: int | None
    rows_written: int
    skipped: bool

    def to_json(self) -> str:
        return json.dumps(
            {
                "table": self.table,
                "window_id": self.window_id,
                "snapshot_id": self.snapshot_id,
                "rows_written": self.rows_written,
                "skipped": self.skipped,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> ChangelogWriteResult:
        data = json.loads(text)
        return cls(
            table=data["table"],
            window_id=data["window_id"],
            snapshot_id=data["snapshot_id"],
            rows_written=int(data["rows_written"]),
            skipped=bool(data["skipped"]),
        )

    @classmethod
    def read(cls, path: str | Path) -> ChangelogWriteResult:
        from airflow_cdc.work_root import read_text

        return cls.from_json(read_text(path))


def split_table_name(table: str) -> tuple[str, str]:
    """``"<namespace>.<name>"`` -> (namespace, name), each part checked before it reaches SQL."""
    parts = table.split(".") if isinstance(table, str) else []
    if len(parts) != 2:
        raise InvalidIdentifierError(
            f"changelog table {table!r} is not <namespace>.<name>: give exactly two identifiers "
            f"joined by a dot, e.g. 'cdc.orders_changelog' (the catalog comes from the "
            f"IcebergCatalog)"
        )
    namespace, name = parts
    validate_identifier("changelog table namespace", namespace)
    validate_identifier("changelog table name", name)
    return namespace, name


def spark_job_application(entry_point: str) -> str:
    """The path of ``airflow_cdc/spark_jobs/<entry_point>.py`` as installed (what spark-submit
    runs; the repository's ``spark_jobs/`` folder in a source checkout)."""
    validate_identifier("Spark job entry point", entry_point)
    path = package_dir("airflow_cdc.spark_jobs") / f"{entry_point}.py"
    if not path.is_file():
        raise FileNotFoundError(f"Spark job entry point {path} does not exist")
    return str(path)


def iceberg_job_spec(
    entry_point: str,
    catalog: IcebergCatalog,
    application_args: Sequence[str],
    *,
    name: str,
    conf: Mapping[str, str] | None = None,
    **spec_fields: object,
) -> SparkJobSpec:
    """A spec for one of our jobs: catalog conf, UTC session time zone and the py-files zip merged in.

    ``conf`` is applied last, so callers may override any property (shuffle partitions,
    memory, ``spark.pyspark.python`` ...). The catalog's secrets go to ``secret_conf``; a job
    that has some also redacts ``credential`` and ``authorization`` in Spark's UI and event log.
    """
    given_secrets = dict(spec_fields.pop("secret_conf", None) or {})  # type: ignore[call-overload]
    secret_conf = {**catalog.secret_conf(), **given_secrets}
    redaction = {"spark.redaction.regex": REDACTION_REGEX} if secret_conf else {}
    merged = {
        "spark.sql.session.timeZone": "UTC", **redaction, **catalog.spark_conf(), **dict(conf or {})
    }
    py_files = _merge((str(build_py_files()),), _split(spec_fields.pop("py_files", None)))  # type: ignore[arg-type]
    return SparkJobSpec(
        application=spark_job_application(entry_point),
        application_args=tuple(application_args),
        name=name,
        conf=merged,
        py_files=py_files,
        secret_conf=secret_conf,
        **spec_fields,  # type: ignore[arg-type]
    )


def changelog_writer_spec(
    catalog: IcebergCatalog,
    table: str,
    window_id: str,
    input_path: str | Path,
    result_path: str | Path,
    *,
    conf: Mapping[str, str] | None = None,
    **spec_fields: object,
) -> SparkJobSpec:
    """The spec that appends one window's change rows (JSON lines) to ``catalog.<table>``.

    ``table`` is ``<namespace>.<name>``; both parts are validated here, before anything runs.
    ``input_path`` and ``result_path`` must be reachable by the driver (local paths in client
    mode, a shared URI such as ``gs://...`` in cluster deploy mode).
    """
    namespace, name = split_table_name(table)
    if not window_id:
        raise ValueError("changelog writer needs a window id (Window.window_id)")
    return iceberg_job_spec(
        "changelog_writer",
        catalog,
        [
            "--catalog", catalog.name,
            "--table", f"{namespace}.{name}",
            "--window-id", window_id,
            "--input", str(input_path),
            "--result", str(result_path),
        ],
        name=f"cdc-changelog-{namespace}.{name}",
        conf=conf,
        **spec_fields,
    )
