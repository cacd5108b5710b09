"""Runners for Dataproc: jobs on an existing cluster, and Dataproc Serverless batches.

A Spark driver on Dataproc cannot see the Airflow worker's disk, so everything a job needs
is staged under the work root (``gs://bucket/prefix``, :mod:`airflow_cdc.work_root`) first:
the entry point (``spark_jobs/<name>.py``), the py-files archive and any local jar or file,
each under ``_staging/<content hash>/<name>`` (uploaded once, found by its hash afterwards).
The job's arguments name plan, outcome and result files under the same root.

Both runners take a hook with the google provider's ``DataprocHook`` API (``submit_job``,
``get_job``, ``cancel_job``, ``create_batch``, ``get_batch``; the operators give
:class:`airflow_cdc.hooks.dataproc.CdcDataprocHook`, which also reaches the local stand-in),
so no Airflow import happens here. A run is three steps, so operators can wait in the
triggerer between them: :meth:`submit` returns a :class:`DataprocRun` (a plain value),
:meth:`poll` says where it is, :meth:`finish` turns a final state into the result or a
:class:`~airflow_cdc.spark.job.SparkJobError` carrying the driver output's tail.
:meth:`run` does all three in the task. ``kill`` cancels the job, or the batch's operation.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from airflow_cdc.spark.environment import ICEBERG_RUNTIMES, ICEBERG_VERSION, iceberg_runtime_package
from airflow_cdc.spark.job import SECRET_CONF_FILE_KEY, SparkJobError, SparkJobResult, SparkJobSpec
from airflow_cdc.work_root import is_local, local_path, read_text, remove, work_path, write_text

log = logging.getLogger(__name__)

JOB_DONE, JOB_FAILED = ("DONE",), ("ERROR", "CANCELLED")
BATCH_DONE, BATCH_FAILED = ("SUCCEEDED",), ("FAILED", "CANCELLED")
DEFAULT_POLL_SECONDS = 5.0
DRIVER_TAIL_LINES = 60


@dataclass(frozen=True)
class DataprocRun:
    """One submitted job or batch: what a trigger needs to follow it (JSON-serializable)."""

    kind: str  # "job" or "batch"
    name: str  # the spec's name
    project_id: str
    region: str
    resource_id: str  # job id or batch id
    operation: str | None = None  # a batch's long-running operation
    driver_output_uri: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DataprocRun:
        return cls(**dict(data))


@dataclass(frozen=True)
class RunState:
    state: str
    final: bool
    succeeded: bool
    details: str = ""
    driver_output_uri: str | None = None


JOB_LABEL = "airflow-cdc-job"


def job_label(name: str) -> str:
    """The label value naming a spec's job (the same for every try of one window's step)."""
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]


def resource_id(name: str) -> str:
    """A job or batch id from a spec name: lower-case letters, digits and hyphens, a random
    suffix (a retry is a new job), 4 to 63 characters (the stricter batch rule fits both)."""
    stem = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:48].strip("-") or "cdc"
    if not stem[0].isalpha():
        stem = f"cdc-{stem}"[:48]
    return f"{stem}-{uuid.uuid4().hex[:8]}"


class Staging:
    """Local files of a spec copied under ``<work_root>/_staging/<sha256[:16]>/<name>``."""

    def __init__(self, work_root: str) -> None:
        if is_local(work_root):
            raise ValueError(
                f"work root {work_root!r} is a local folder, which a Dataproc driver cannot "
                f"read: set AIRFLOW_CDC_WORK_ROOT (or the pipeline's work_root) to a gs:// URI "
                f"both Airflow and Dataproc reach, e.g. gs://<bucket>/airflow-cdc"
            )
        self.root = work_path(work_root, "_staging")
        self._known: dict[tuple[str, float, int], str] = {}

    def uri(self, location: str) -> str:
        """``location`` as a URI the cluster reads: URIs as they are, local files staged."""
        if not is_local(location):
            return location
        path = local_path(location)
        stat = path.stat()
        key = (str(path.resolve()), stat.st_mtime, stat.st_size)
        if key not in self._known:
            content = path.read_bytes()
            target = self.root / hashlib.sha256(content).hexdigest()[:16] / path.name
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
            self._known[key] = str(target)
        return self._known[key]

    def uris(self, locations: Sequence[str]) -> list[str]:
        return [self.uri(location) for location in locations]


@dataclass
class _DataprocRunner:
    hook: Any  # the google provider's DataprocHook API
    region: str
    project_id: str
    work_root: str
    labels: Mapping[str, str] = field(default_factory=dict)
    poll_seconds: float = DEFAULT_POLL_SECONDS
    logger: logging.Logger = field(default=log, repr=False)
    # (Spark minor, Scala) of the image the jobs run on (:func:`image_spark`); None: as given.
    image_spark: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        self.staging = Staging(self.work_root)
        self._current: DataprocRun | None = None

    @property
    def driver_is_local(self) -> bool:
        """The driver runs on a Dataproc machine: secrets travel as files under the work root."""
        return False

    def secret_conf_uri(self, spec: SparkJobSpec, resource: str) -> str | None:
        """The spec's secret conf written under the work root (never into the job's
        properties, which the Dataproc API shows to whoever may list jobs); removed when the
        run ends (:meth:`finish`, :meth:`cancel`). Protected by the bucket's IAM."""
        if not spec.secret_conf:
            return None
        uri = str(work_path(self.work_root, "_secrets", f"{resource}.json"))
        write_text(uri, json.dumps(dict(spec.secret_conf)), private=True)
        return uri

    def properties(self, spec: SparkJobSpec, secret_uri: str | None = None) -> dict[str, str]:
        """Spark properties of the job: its conf, Maven packages, and its environment for
        the driver and the executors (Dataproc has no per-job environment of its own)."""
        props = dict(spec.conf)
        if secret_uri:
            props[SECRET_CONF_FILE_KEY] = secret_uri
        if spec.packages:
            props["spark.jars.packages"] = ",".join(spec.packages)
        for key, value in spec.env_vars.items():
            props[f"spark.executorEnv.{key}"] = value
            props[f"spark.yarn.appMasterEnv.{key}"] = value
        for option, value in (("spark.driver.memory", spec.driver_memory),
                              ("spark.executor.memory", spec.executor_memory),
                              ("spark.executor.cores", spec.executor_cores),
                              ("spark.executor.instances", spec.num_executors)):
            if value is not None:
                props[option] = str(value)
        return props

    def pyspark_fields(self, spec: SparkJobSpec) -> dict:
        return {
            "main_python_file_uri": self.staging.uri(spec.application),
            "args": list(spec.application_args),
            "python_file_uris": self.staging.uris(spec.py_files),
            "jar_file_uris": self.staging.uris(spec.jars),
            "file_uris": self.staging.uris(spec.files),
        }

    # --- the three steps, and all of them -----------------------------------------------------
    def submit(self, spec: SparkJobSpec) -> DataprocRun:
        raise NotImplementedError

    def poll(self, run: DataprocRun) -> RunState:
        raise NotImplementedError

    def finish(self, run: DataprocRun, state: RunState) -> SparkJobResult:
        """The result of a run in a final state; SparkJobError with the driver's tail otherwise."""
        remove(secret_uri_of(self.work_root, run))
        tail = driver_output_tail(state.driver_output_uri or run.driver_output_uri)
        if not state.succeeded:
            raise SparkJobError(run.name, 1, tail, detail=(
                f"Dataproc {run.kind} {run.resource_id} ({run.region}) ended {state.state}: "
                f"{state.details}; driver output: {state.driver_output_uri or run.driver_output_uri}"))
        self.logger.info("Dataproc %s %s of %r: %s", run.kind, run.resource_id, run.name,
                         state.state)
        return SparkJobResult(run.name, 0, tuple(tail), 0.0)

    def run(self, spec: SparkJobSpec) -> SparkJobResult:
        """Submit ``spec`` and wait in the task (deferrable operators wait in the triggerer)."""
        started = time.monotonic()
        run = self.submit(spec)
        self._current = run
        try:
            state = self.poll(run)
            while not state.final:
                time.sleep(self.poll_seconds)
                state = self.poll(run)
        except BaseException:
            self.kill()
            raise
        finally:
            self._current = None
        return replace(self.finish(run, state), duration_seconds=time.monotonic() - started)

    def kill(self) -> None:
        if self._current is not None:
            self.cancel(self._current)
            remove(secret_uri_of(self.work_root, self._current))

    def cancel(self, run: DataprocRun) -> None:
        raise NotImplementedError


@dataclass
class DataprocJobRunner(_DataprocRunner):
    """PySpark jobs on an existing Dataproc cluster (``JobController.SubmitJob``)."""

    cluster_name: str = ""

    def __post_init__(self) -> None:
        if not self.cluster_name:
            raise ValueError("DataprocJobRunner needs cluster_name: the cluster jobs run on")
        super().__post_init__()

    def submit(self, spec: SparkJobSpec) -> DataprocRun:
        running = self.running(spec)
        if running is not None:
            return running
        spec = with_image_runtime(spec, self.image_spark)
        job_id = resource_id(spec.name)
        job = {
            "reference": {"project_id": self.project_id, "job_id": job_id},
            "placement": {"cluster_name": self.cluster_name},
            "labels": {**self.labels, JOB_LABEL: job_label(spec.name)},
            "pyspark_job": {**self.pyspark_fields(spec), "properties": self.properties(
                spec, self.secret_conf_uri(spec, job_id))},
        }
        submitted = self.hook.submit_job(job=job, project_id=self.project_id,
                                         region=self.region, request_id=uuid.uuid4().hex)
        run = DataprocRun("job", spec.name, self.project_id, self.region, job_id,
                          driver_output_uri=submitted.driver_output_resource_uri or None)
        self.logger.info("Dataproc job %s of %r submitted to cluster %s (%s); driver output: %s",
                         job_id, spec.name, self.cluster_name, self.region,
                         run.driver_output_uri or "(when it starts)")
        return run

    def poll(self, run: DataprocRun) -> RunState:
        return poll_run(self.hook, run)

    def running(self, spec: SparkJobSpec) -> DataprocRun | None:
        """A job of this spec an earlier try left running (its task was killed while it
        waited in the triggerer): followed instead of submitting a second one."""
        client = self.hook.get_job_client(region=self.region)
        for job in client.list_jobs(request={
                "project_id": self.project_id, "region": self.region,
                "filter": f"status.state = ACTIVE AND labels.{JOB_LABEL} = {job_label(spec.name)}"}):
            self.logger.info("Dataproc job %s of %r is still running from an earlier try: "
                             "following it instead of submitting another", job.reference.job_id,
                             spec.name)
            return DataprocRun("job", spec.name, self.project_id, self.region,
                               job.reference.job_id,
                               driver_output_uri=job.driver_output_resource_uri or None)
        return None

    def cancel(self, run: DataprocRun) -> None:
        self.logger.info("cancelling Dataproc job %s", run.resource_id)
        self.hook.cancel_job(job_id=run.resource_id, project_id=run.project_id,
                             region=run.region)


@dataclass
class DataprocBatchRunner(_DataprocRunner):
    """Dataproc Serverless batches (``BatchController.CreateBatch``)."""

    runtime_version: str | None = None
    subnetwork_uri: str | None = None
    service_account: str | None = None
    network_tags: Sequence[str] = ()
    kms_key: str | None = None
    extra_properties: Mapping[str, str] = field(default_factory=dict)

    def properties(self, spec: SparkJobSpec, secret_uri: str | None = None) -> dict[str, str]:
        return {**super().properties(spec, secret_uri), **self.extra_properties}

    def submit(self, spec: SparkJobSpec) -> DataprocRun:
        running = self.running(spec)
        if running is not None:
            return running
        spec = with_image_runtime(spec, self.image_spark)
        batch_id = resource_id(spec.name)
        execution = {k: v for k, v in (("subnetwork_uri", self.subnetwork_uri),
                                       ("service_account", self.service_account),
                                       ("network_tags", list(self.network_tags)),
                                       ("kms_key", self.kms_key)) if v}
        batch = {
            "labels": {**self.labels, JOB_LABEL: job_label(spec.name)},
            "pyspark_batch": self.pyspark_fields(spec),
            "runtime_config": {"properties": self.properties(
                spec, self.secret_conf_uri(spec, batch_id)),
                               **({"version": self.runtime_version} if self.runtime_version else {})},
            **({"environment_config": {"execution_config": execution}} if execution else {}),
        }
        operation = self.hook.create_batch(region=self.region, project_id=self.project_id,
                                           batch=batch, batch_id=batch_id,
                                           request_id=uuid.uuid4().hex)
        run = DataprocRun("batch", spec.name, self.project_id, self.region, batch_id,
                          operation=operation.operation.name)
        self.logger.info("Dataproc batch %s of %r created in %s (operation %s)", batch_id,
                         spec.name, self.region, run.operation)
        return run

    def poll(self, run: DataprocRun) -> RunState:
        return poll_run(self.hook, run)

    def running(self, spec: SparkJobSpec) -> DataprocRun | None:
        """A batch of this spec an earlier try left pending or running (see the job runner)."""
        client = self.hook.get_batch_client(region=self.region)
        for state in ("PENDING", "RUNNING"):
            for batch in client.list_batches(request={
                    "parent": f"projects/{self.project_id}/locations/{self.region}",
                    "filter": f"state = {state} AND labels.{JOB_LABEL} = {job_label(spec.name)}"}):
                batch_id = batch.name.rsplit("/", 1)[-1]
                self.logger.info("Dataproc batch %s of %r is still %s from an earlier try: "
                                 "following it instead of creating another", batch_id,
                                 spec.name, state)
                return DataprocRun("batch", spec.name, self.project_id, self.region, batch_id,
                                   operation=batch.operation or None)
        return None

    def cancel(self, run: DataprocRun) -> None:
        self.logger.info("cancelling Dataproc batch %s (operation %s)", run.resource_id,
                         run.operation)
        self.hook.get_batch_client(region=run.region).transport.operations_client \
            .cancel_operation(name=run.operation)


def secret_uri_of(work_root: str, run: DataprocRun) -> str:
    return str(work_path(work_root, "_secrets", f"{run.resource_id}.json"))


def poll_run(hook, run: DataprocRun) -> RunState:
    """Where a job or batch is, through the provider's hook API (runners and the trigger)."""
    if run.kind == "job":
        job = hook.get_job(job_id=run.resource_id, project_id=run.project_id, region=run.region)
        state = job.status.state.name
        return RunState(state, state in JOB_DONE + JOB_FAILED, state in JOB_DONE,
                        job.status.details, job.driver_output_resource_uri or None)
    batch = hook.get_batch(batch_id=run.resource_id, region=run.region,
                           project_id=run.project_id)
    state = batch.state.name
    return RunState(state, state in BATCH_DONE + BATCH_FAILED, state in BATCH_DONE,
                    batch.state_message, batch.runtime_info.output_uri or None)


def driver_output_tail(uri: str | None, lines: int = DRIVER_TAIL_LINES) -> list[str]:
    """The last lines of a driver's output (Dataproc writes ``<uri>.000000000``, ...)."""
    if not uri:
        return []
    for candidate in (uri, f"{uri}.000000000"):
        try:
            return read_text(candidate).splitlines()[-lines:]
        except (OSError, FileNotFoundError, ValueError):
            continue
    return [f"(driver output at {uri} could not be read here)"]


# --- the image's Spark and its Iceberg runtime ---------------------------------------------------
# The Spark (minor version, Scala) each Dataproc image or Serverless runtime runs, from Google's
# version pages: the Iceberg runtime is built per Spark minor and Scala, so a job names the one
# for the image it runs on (Serverless 2.x runs Scala 2.13 where the 1.x line runs 2.12).
DATAPROC_IMAGE_SPARK: dict[str, tuple[str, str]] = {
    "2.1": ("3.3", "2.12"), "2.2": ("3.5", "2.12"), "2.3": ("3.5", "2.12"), "3.0": ("4.0", "2.13"),
}
SERVERLESS_RUNTIME_SPARK: dict[str, tuple[str, str]] = {
    "1.1": ("3.3", "2.12"), "1.2": ("3.5", "2.12"), "2.1": ("3.4", "2.13"),
    "2.2": ("3.5", "2.13"), "2.3": ("3.5", "2.13"), "3.0": ("4.0", "2.13"),
}
_ICEBERG_RUNTIME = re.compile(r"^org\.apache\.iceberg:iceberg-spark-runtime-[^:]+:(?P<version>[^:]+)$")
_ICEBERG_RUNTIME_JAR = re.compile(r"(^|/)iceberg-spark-runtime-[^/]*\.jar$")


def image_spark(version: str | None, serverless: bool = False) -> tuple[str, str] | None:
    """The (Spark minor, Scala) of a Dataproc image (``"2.2"``, ``"2.2-debian12"``,
    ``"2.2.45-ubuntu22"``) or, with ``serverless``, a Serverless runtime (``"2.2"``); None when
    no version is given (the cluster's default image: the catalog's runtime stays as it is)."""
    if not version:
        return None
    table, what = ((SERVERLESS_RUNTIME_SPARK, "Serverless runtime") if serverless
                   else (DATAPROC_IMAGE_SPARK, "Dataproc image"))
    match = re.match(r"^(\d+\.\d+)", str(version))
    if match is None or match.group(1) not in table:
        raise ValueError(
            f"{what} {version!r} is not one whose Spark is known here ({sorted(table)}): give "
            f"its major.minor version, or leave it out and give the catalog "
            f"packages=['org.apache.iceberg:iceberg-spark-runtime-<spark>_<scala>:<iceberg>']")
    spark = table[match.group(1)]
    if spark[0] not in ICEBERG_RUNTIMES:
        raise ValueError(
            f"{what} {version!r} runs Spark {spark[0]}, for which Iceberg {ICEBERG_VERSION} has "
            f"no runtime (it has one for Spark {sorted(ICEBERG_RUNTIMES)}): use a newer image, or "
            f"leave the version out and give the catalog packages=[...] of a runtime that works")
    return spark


def with_image_runtime(spec: SparkJobSpec, spark: tuple[str, str] | None) -> SparkJobSpec:
    """``spec`` naming the Iceberg runtime of the image's Spark: an Iceberg Spark runtime among
    its packages becomes the one for ``spark`` (same Iceberg version), and a runtime jar of
    the Airflow worker's own Spark among its jars (built for another Spark, or Scala) becomes
    that coordinate, resolved by the cluster. Unchanged when ``spark`` is None or the spec
    names no Iceberg runtime."""
    if spark is None:
        return spec
    runtimes = [p for p in spec.packages if _ICEBERG_RUNTIME.match(p)]
    local_runtimes = [j for j in spec.jars if _ICEBERG_RUNTIME_JAR.search(j)]
    if not runtimes and not local_runtimes:
        return spec
    version = _ICEBERG_RUNTIME.match(runtimes[0]).group("version") if runtimes else ICEBERG_VERSION
    runtime = iceberg_runtime_package(spark[0], spark[1], iceberg_version=version)
    return replace(spec,
                   packages=(runtime, *(p for p in spec.packages if p not in runtimes)),
                   jars=tuple(j for j in spec.jars if j not in local_runtimes))


# --- what a DAG says ---------------------------------------------------------------------------
@dataclass(frozen=True)
class DataprocCluster:
    """Run a pipeline's Spark jobs as jobs on an existing Dataproc cluster."""

    cluster_name: str
    region: str
    project_id: str | None = None
    gcp_conn_id: str = "google_cloud_default"
    impersonation_chain: str | Sequence[str] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    poll_seconds: float = DEFAULT_POLL_SECONDS
    # The cluster's image version ("2.2", "3.0-debian12"): the jobs then name the Iceberg
    # runtime of its Spark (:data:`DATAPROC_IMAGE_SPARK`) whatever the catalog was built for.
    image_version: str | None = None

    def __post_init__(self) -> None:
        image_spark(self.image_version)  # an unknown image is refused when the DAG is parsed

    def runner(self, hook, project_id: str, work_root: str, logger=None) -> DataprocJobRunner:
        return DataprocJobRunner(hook=hook, region=self.region, project_id=project_id,
                                 work_root=work_root, labels=self.labels,
                                 poll_seconds=self.poll_seconds, logger=logger or log,
                                 image_spark=image_spark(self.image_version),
                                 cluster_name=self.cluster_name)


@dataclass(frozen=True)
class DataprocServerless:
    """Run a pipeline's Spark jobs as Dataproc Serverless batches. ``properties`` are added
    to each batch's runtime properties (``spark_conf`` goes there too)."""

    region: str
    project_id: str | None = None
    runtime_version: str | None = None
    subnetwork_uri: str | None = None
    service_account: str | None = None
    network_tags: Sequence[str] = ()
    kms_key: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    gcp_conn_id: str = "google_cloud_default"
    impersonation_chain: str | Sequence[str] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    poll_seconds: float = DEFAULT_POLL_SECONDS

    def __post_init__(self) -> None:
        image_spark(self.runtime_version, serverless=True)  # refused when the DAG is parsed

    def runner(self, hook, project_id: str, work_root: str, logger=None) -> DataprocBatchRunner:
        return DataprocBatchRunner(hook=hook, region=self.region, project_id=project_id,
                                   work_root=work_root, labels=self.labels,
                                   poll_seconds=self.poll_seconds, logger=logger or log,
                                   image_spark=image_spark(self.runtime_version, serverless=True),
                                   runtime_version=self.runtime_version,
                                   subnetwork_uri=self.subnetwork_uri,
                                   service_account=self.service_account,
                                   network_tags=tuple(self.network_tags), kms_key=self.kms_key,
                                   extra_properties=dict(self.properties))
