"""The JobController's jobs: submission, the state machine, listing, cancel and delete.

A PySpark job goes, as Dataproc reports it (``status`` now, ``status_history`` before)::

    PENDING -> SETUP_DONE -> RUNNING -> DONE | ERROR
                      any active state -> CANCEL_PENDING -> CANCEL_STARTED -> CANCELLED

PENDING when accepted, SETUP_DONE once its files are found and its folder is ready, RUNNING
(substate SUBMITTED) when ``spark-submit`` started, DONE on exit code 0, ERROR otherwise with
``details`` naming the driver's exception. CancelJob answers CANCEL_PENDING; CANCEL_STARTED
when SIGTERM reached the driver's process group; CANCELLED once it is gone (a job cancelled
before its driver started goes CANCEL_PENDING -> CANCELLED).

Each job has a folder ``<work_dir>/jobs/<job_id>/``: ``driveroutput`` (stdout and stderr of
the driver; ``driver_output_resource_uri`` points at it, and ``driveroutput.000000000`` links
to it as the first chunk Dataproc writes), ``command.json`` and ``driver.pid``
(``driver_control_files_uri`` is the folder).
"""

from __future__ import annotations

import re
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import grpc
from google.cloud import dataproc_v1

from .driver import CANCELLED, SUCCEEDED, DriverRun, DriverSetup, Outcome
from .errors import ServiceError, invalid_argument, required
from .listing import page, parse_filter
from .operations import OperationStore
from .workload import PySparkWorkload

State = dataproc_v1.JobStatus.State
ACTIVE_STATES = (
    State.PENDING,
    State.SETUP_DONE,
    State.RUNNING,
    State.CANCEL_PENDING,
    State.CANCEL_STARTED,
)
CANCELLABLE_STATES = (State.PENDING, State.SETUP_DONE, State.RUNNING)
_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


def now() -> datetime:
    return datetime.now(timezone.utc)


def failure_details(message: str, output_uri: str) -> str:
    return f"Job failed with message [{message}]. Additional details can be found at: {output_uri}"


@dataclass
class _JobEntry:
    project: str
    region: str
    job: dataproc_v1.Job
    run: DriverRun
    operation: str | None = None  # SubmitJobAsOperation's operation name


class JobStore:
    """The jobs of every project and region, run on the emulator's clusters."""

    def __init__(
        self,
        *,
        clusters: tuple[str, ...],
        work_dir: Path,
        setup: DriverSetup,
        operations: OperationStore,
        gcs_dir: Path | None,
    ) -> None:
        self.clusters = clusters
        self.work_dir = work_dir
        self.setup = setup
        self.operations = operations
        self.gcs_dir = gcs_dir
        self._lock = threading.RLock()
        self._jobs: dict[tuple[str, str], _JobEntry] = {}  # (project, job_id) -> job
        self._requests: dict[str, tuple[str, str]] = {}  # request_id -> (project, job_id)
        self._cluster_uuids = {name: str(uuid.uuid4()) for name in clusters}

    # -- SubmitJob ------------------------------------------------------------------------------
    def submit(self, request: dataproc_v1.SubmitJobRequest, *, as_operation: bool = False):
        """Accept the job (PENDING) and start its run; the Job, or its operation's name."""
        project, region = _scope(request.project_id, request.region)
        if request.request_id and not _REQUEST_ID.match(request.request_id):
            raise invalid_argument(
                "request_id", request.request_id, "use 1-40 letters, digits, _ or -"
            )
        with self._lock:
            if request.request_id in self._requests:
                # Dataproc ignores a repeated request_id and returns the first job.
                entry = self._jobs[self._requests[request.request_id]]
            else:
                entry = self._accept(project, region, request.job)
                key = (project, entry.job.reference.job_id)
                self._jobs[key] = entry
                if request.request_id:
                    self._requests[request.request_id] = key
                entry.run.start()
            if not as_operation:
                return self._copy(entry)
            if entry.operation is None:
                job_id = entry.job.reference.job_id
                entry.operation = self.operations.create(
                    project,
                    region,
                    self._metadata(entry),
                    cancel=lambda: self.cancel(project, region, job_id),
                )
                if entry.job.done:
                    self._finish_operation(entry)
            return entry.operation

    def _accept(self, project: str, region: str, requested: dataproc_v1.Job) -> _JobEntry:
        job = dataproc_v1.Job(requested)
        cluster = job.placement.cluster_name
        if not cluster:
            raise required("job.placement.cluster_name")
        if cluster not in self.clusters:
            raise ServiceError(
                grpc.StatusCode.NOT_FOUND,
                f"Not found: Cluster projects/{project}/regions/{region}/clusters/{cluster}: the "
                f"emulator's clusters are {list(self.clusters)} (add one with clusters=[...] "
                f"in Python, --cluster NAME on the command line)",
            )
        kind = dataproc_v1.Job.pb(job).WhichOneof("type_job")
        if kind is None:
            raise required("job.pyspark_job")
        if kind != "pyspark_job":
            raise ServiceError(
                grpc.StatusCode.UNIMPLEMENTED,
                f"job.{kind} is not supported by the Dataproc emulator: submit a pyspark_job",
            )
        if job.reference.project_id and job.reference.project_id != project:
            raise invalid_argument(
                "job.reference.project_id",
                job.reference.project_id,
                f"leave it empty or equal to the request's project_id {project!r}",
            )
        job_id = job.reference.job_id or uuid.uuid4().hex
        if not _JOB_ID.match(job_id):
            raise invalid_argument(
                "job.reference.job_id", job_id, "use 1-100 letters, digits, _ or -"
            )
        if (project, job_id) in self._jobs:
            raise ServiceError(
                grpc.StatusCode.ALREADY_EXISTS,
                f"Already exists: Job projects/{project}/regions/{region}/jobs/{job_id}: "
                f"choose another job.reference.job_id, or leave it empty to get a generated one",
            )
        workload = PySparkWorkload.from_message(
            job.pyspark_job, job.pyspark_job.properties, "job.pyspark_job", self.gcs_dir
        )
        folder = self.work_dir / "jobs" / job_id
        output = folder / "driveroutput"
        job.reference = dataproc_v1.JobReference(project_id=project, job_id=job_id)
        job.placement.cluster_uuid = self._cluster_uuids[cluster]
        job.job_uuid = str(uuid.uuid4())
        job.driver_output_resource_uri = output.as_uri()
        job.driver_control_files_uri = folder.as_uri() + "/"
        job.status = dataproc_v1.JobStatus(state=State.PENDING, state_start_time=now())
        job.done = False

        def command() -> list[str]:
            return workload.command(
                self.setup.spark_submit, self.setup.master, job_id, self.gcs_dir
            )

        run = DriverRun(
            name=job_id,
            command=command,
            missing_files=lambda: workload.missing_files(self.gcs_dir),
            folder=folder,
            output=output,
            output_links=("driveroutput.000000000",),
            setup=self.setup,
            on_stage=lambda stage, outcome: self._on_stage(entry, stage, outcome),
        )
        entry = _JobEntry(project, region, job, run)
        return entry

    # -- the state machine ----------------------------------------------------------------------
    def _on_stage(self, entry: _JobEntry, stage: str, outcome: Outcome | None) -> None:
        with self._lock:
            state = entry.job.status.state
            if stage == "setup_done" and state == State.PENDING:
                self._move(entry, State.SETUP_DONE)
            elif stage == "running" and state == State.SETUP_DONE:
                self._move(entry, State.RUNNING, substate=dataproc_v1.JobStatus.Substate.SUBMITTED)
            elif stage == "cancel_started" and state == State.CANCEL_PENDING:
                self._move(entry, State.CANCEL_STARTED)
            elif stage == "finished":
                assert outcome is not None
                if outcome.kind == SUCCEEDED:
                    self._move(entry, State.DONE)
                elif outcome.kind == CANCELLED:
                    self._move(entry, State.CANCELLED)
                else:
                    uri = entry.job.driver_output_resource_uri
                    self._move(entry, State.ERROR, details=failure_details(outcome.message, uri))
                self._finish_operation(entry)

    def _move(self, entry: _JobEntry, state, *, details: str = "", substate=None) -> None:
        job = entry.job
        job.status_history.append(job.status)
        job.status = dataproc_v1.JobStatus(
            state=state, details=details, state_start_time=now(), substate=substate or 0
        )
        job.done = state in (State.DONE, State.ERROR, State.CANCELLED)
        if entry.operation is not None and not job.done:
            self.operations.update_metadata(entry.operation, self._metadata(entry))

    def _metadata(self, entry: _JobEntry) -> dataproc_v1.JobMetadata:
        first = entry.job.status_history[0] if entry.job.status_history else entry.job.status
        return dataproc_v1.JobMetadata(
            job_id=entry.job.reference.job_id,
            status=entry.job.status,
            operation_type="SUBMIT_JOB",
            start_time=first.state_start_time,
        )

    def _finish_operation(self, entry: _JobEntry) -> None:
        if entry.operation is None:
            return
        job, status = entry.job, entry.job.status
        error = None
        if status.state == State.ERROR:
            error = (grpc.StatusCode.UNKNOWN, status.details)
        elif status.state == State.CANCELLED:
            error = (grpc.StatusCode.CANCELLED, f"Job {job.reference.job_id} was cancelled")
        self.operations.finish(
            entry.operation, response=job, error=error, metadata=self._metadata(entry)
        )

    # -- GetJob, ListJobs, CancelJob, DeleteJob ---------------------------------------------
    def get(self, project_id: str, region: str, job_id: str) -> dataproc_v1.Job:
        with self._lock:
            return self._copy(self._find(project_id, region, job_id))

    def list(self, request: dataproc_v1.ListJobsRequest) -> dataproc_v1.ListJobsResponse:
        project, region = _scope(request.project_id, request.region)
        matcher = request.job_state_matcher
        wanted_state, labels = None, []
        if request.filter:
            matcher = dataproc_v1.ListJobsRequest.JobStateMatcher.ALL
            for name, value in parse_filter(request.filter):
                if name == "status.state" and value in ("ACTIVE", "NON_ACTIVE"):
                    wanted_state = value
                elif name.startswith("labels.") and len(name) > len("labels."):
                    labels.append((name[len("labels.") :], value))
                else:
                    raise invalid_argument(
                        "filter",
                        request.filter,
                        f"the emulator filters on 'status.state = ACTIVE|NON_ACTIVE' and "
                        f"'labels.KEY = VALUE|*', not on {name!r} = {value!r}",
                    )
        if matcher == dataproc_v1.ListJobsRequest.JobStateMatcher.ACTIVE:
            wanted_state = "ACTIVE"
        elif matcher == dataproc_v1.ListJobsRequest.JobStateMatcher.NON_ACTIVE:
            wanted_state = "NON_ACTIVE"
        with self._lock:
            found = [
                self._copy(entry)
                for (entry_project, _), entry in self._jobs.items()
                if entry_project == project
                and entry.region == region
                and request.cluster_name in ("", entry.job.placement.cluster_name)
                and _state_matches(entry.job, wanted_state)
                and all(_label_matches(entry.job, key, value) for key, value in labels)
            ]
        jobs, token = page(found, request.page_size, request.page_token, default_size=100)
        return dataproc_v1.ListJobsResponse(jobs=jobs, next_page_token=token)

    def cancel(self, project_id: str, region: str, job_id: str) -> dataproc_v1.Job:
        with self._lock:
            entry = self._find(project_id, region, job_id)
            state = entry.job.status.state
            if state in (State.CANCEL_PENDING, State.CANCEL_STARTED, State.CANCELLED):
                return self._copy(entry)  # cancelling twice changes nothing
            if state not in CANCELLABLE_STATES:
                raise ServiceError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"Cannot cancel jobId '{job_id}' in projectId '{project_id}' in state "
                    f"'{state.name}': only PENDING, SETUP_DONE and RUNNING jobs can be cancelled",
                )
            self._move(entry, State.CANCEL_PENDING)
            answer = self._copy(entry)
            entry.run.cancel()
            return answer

    def delete(self, project_id: str, region: str, job_id: str) -> None:
        with self._lock:
            entry = self._find(project_id, region, job_id)
            if not entry.job.done:
                raise ServiceError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"Job {job_id} is in state {entry.job.status.state.name} and cannot be "
                    f"deleted: cancel it (CancelJob) and wait until it is CANCELLED first",
                )
            del self._jobs[(entry.project, job_id)]

    # -- shutdown -------------------------------------------------------------------------------
    def cancel_all(self) -> list[DriverRun]:
        """Cancel every active job (the emulator stops); the runs to wait for."""
        with self._lock:
            active = [entry for entry in self._jobs.values() if not entry.job.done]
            for entry in active:
                if entry.job.status.state in CANCELLABLE_STATES:
                    self._move(entry, State.CANCEL_PENDING)
                entry.run.cancel()
            return [entry.run for entry in active]

    def driver_pid(self, project_id: str, region: str, job_id: str) -> int | None:
        with self._lock:
            return self._find(project_id, region, job_id).run.pid

    # -- helpers --------------------------------------------------------------------------------
    def _find(self, project_id: str, region: str, job_id: str) -> _JobEntry:
        project, region = _scope(project_id, region)
        if not job_id:
            raise required("job_id")
        entry = self._jobs.get((project, job_id))
        if entry is None or entry.region != region:
            raise ServiceError(
                grpc.StatusCode.NOT_FOUND,
                f"Not found: Job projects/{project}/regions/{region}/jobs/{job_id}",
            )
        return entry

    @staticmethod
    def _copy(entry: _JobEntry) -> dataproc_v1.Job:
        return dataproc_v1.Job.deserialize(dataproc_v1.Job.serialize(entry.job))


def _scope(project_id: str, region: str) -> tuple[str, str]:
    if not project_id:
        raise required("project_id")
    if not region:
        raise required("region")
    return project_id, region


def _state_matches(job: dataproc_v1.Job, wanted: str | None) -> bool:
    if wanted is None:
        return True
    return (job.status.state in ACTIVE_STATES) == (wanted == "ACTIVE")


def _label_matches(job: dataproc_v1.Job, key: str, value: str) -> bool:
    return key in job.labels and (value == "*" or job.labels[key] == value)
