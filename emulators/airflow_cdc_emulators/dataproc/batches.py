"""The BatchController's batches (Dataproc Serverless) and the operation each one runs under.

A PySpark batch goes, as Dataproc reports it (``state`` now, ``state_history`` before)::

    PENDING -> RUNNING -> SUCCEEDED | FAILED
    PENDING | RUNNING -> CANCELLING -> CANCELLED      (CancelOperation on batch.operation)

CreateBatch answers the operation ``projects/<p>/regions/<r>/operations/<uuid>`` with
``BatchOperationMetadata`` (``batch`` = the batch's name); it is done when the batch ends: with
the Batch as response when SUCCEEDED or CANCELLED (Airflow's provider notes that waiting on the
operation does not fail for a cancelled batch), with an error (UNKNOWN, the state message)
when FAILED. ``runtime_config.properties`` become ``--conf``; ``environment_config`` (subnetwork,
service account, ...) is recorded, not enforced. The driver output is
``<work_dir>/batches/<batch_id>/driveroutput``, ``runtime_info.output_uri`` its ``file://`` URI.
"""

from __future__ import annotations

import re
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import grpc
from google.cloud import dataproc_v1

from .driver import CANCELLED, SUCCEEDED, DriverRun, DriverSetup, Outcome
from .errors import ServiceError, invalid_argument, required
from .jobs import failure_details, now
from .listing import page, parse_filter
from .operations import OperationStore
from .workload import PySparkWorkload

State = dataproc_v1.Batch.State
FINAL_STATES = (State.SUCCEEDED, State.FAILED, State.CANCELLED)
CREATOR = "dataproc-emulator@localhost"
_PARENT = re.compile(r"^projects/([^/]+)/(?:locations|regions)/([^/]+)$")  # the google provider sends regions
_NAME = re.compile(r"^projects/([^/]+)/locations/([^/]+)/batches/([^/]+)$")
_BATCH_ID = re.compile(r"^[a-z0-9][a-z0-9-]{2,61}[a-z0-9]$")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


@dataclass
class _BatchEntry:
    batch: dataproc_v1.Batch
    run: DriverRun


class BatchStore:
    """The batches of every project and location, run on the emulator's Spark master."""

    def __init__(
        self,
        *,
        work_dir: Path,
        setup: DriverSetup,
        operations: OperationStore,
        gcs_dir: Path | None,
    ) -> None:
        self.work_dir = work_dir
        self.setup = setup
        self.operations = operations
        self.gcs_dir = gcs_dir
        self._lock = threading.RLock()
        self._batches: dict[str, _BatchEntry] = {}  # name -> batch
        self._requests: dict[str, str] = {}  # request_id -> operation name

    # -- CreateBatch ----------------------------------------------------------------------------
    def create(self, request: dataproc_v1.CreateBatchRequest) -> str:
        """Accept the batch (PENDING), start it; the name of its operation."""
        match = _PARENT.match(request.parent)
        if match is None:
            raise invalid_argument(
                "parent", request.parent, "use projects/<project>/locations/<region>"
            )
        project, region = match.groups()
        if request.request_id and not _REQUEST_ID.match(request.request_id):
            raise invalid_argument(
                "request_id", request.request_id, "use 1-40 letters, digits, _ or -"
            )
        with self._lock:
            if request.request_id in self._requests:
                # Dataproc returns the first operation for a repeated request_id.
                return self._requests[request.request_id]
            entry = self._accept(project, region, request)
            self._batches[entry.batch.name] = entry
            if request.request_id:
                self._requests[request.request_id] = entry.batch.operation
            entry.run.start()
            return entry.batch.operation

    def _accept(
        self, project: str, region: str, request: dataproc_v1.CreateBatchRequest
    ) -> _BatchEntry:
        batch = dataproc_v1.Batch(request.batch)
        kind = dataproc_v1.Batch.pb(batch).WhichOneof("batch_config")
        if kind is None:
            raise required("batch.pyspark_batch")
        if kind != "pyspark_batch":
            raise ServiceError(
                grpc.StatusCode.UNIMPLEMENTED,
                f"batch.{kind} is not supported by the Dataproc emulator: create a pyspark_batch",
            )
        batch_id = request.batch_id or f"emulated-{uuid.uuid4().hex}"
        if not _BATCH_ID.match(batch_id):
            raise invalid_argument(
                "batch_id",
                batch_id,
                "use 4-63 characters of lowercase letters, digits and -, starting and ending "
                "with a letter or digit",
            )
        name = f"projects/{project}/locations/{region}/batches/{batch_id}"  # never regions/
        if name in self._batches:
            raise ServiceError(
                grpc.StatusCode.ALREADY_EXISTS,
                f"Already exists: Batch {name}: choose another batch_id, or delete the old "
                f"batch first (DeleteBatch)",
            )
        workload = PySparkWorkload.from_message(
            batch.pyspark_batch,
            batch.runtime_config.properties,
            "batch.pyspark_batch",
            self.gcs_dir,
        )
        folder = self.work_dir / "batches" / batch_id
        output = folder / "driveroutput"
        created = now()
        batch.name = name
        batch.uuid = str(uuid.uuid4())
        batch.create_time = created
        batch.creator = CREATOR
        batch.state = State.PENDING
        batch.state_time = created
        batch.runtime_info = dataproc_v1.RuntimeInfo(output_uri=output.as_uri())
        batch.operation = self.operations.create(
            project,
            region,
            self._metadata(batch),
            cancel=lambda: self.cancel(name),
        )
        run = DriverRun(
            name=batch_id,
            command=lambda: workload.command(
                self.setup.spark_submit, self.setup.master, batch_id, self.gcs_dir
            ),
            missing_files=lambda: workload.missing_files(self.gcs_dir),
            folder=folder,
            output=output,
            setup=self.setup,
            on_stage=lambda stage, outcome: self._on_stage(entry, stage, outcome),
        )
        entry = _BatchEntry(batch, run)
        return entry

    # -- the state machine ----------------------------------------------------------------------
    def _on_stage(self, entry: _BatchEntry, stage: str, outcome: Outcome | None) -> None:
        with self._lock:
            if stage == "running" and entry.batch.state == State.PENDING:
                self._move(entry, State.RUNNING)
            elif stage == "finished":
                assert outcome is not None
                if outcome.kind == SUCCEEDED:
                    self._move(entry, State.SUCCEEDED)
                elif outcome.kind == CANCELLED:
                    self._move(entry, State.CANCELLED)
                else:
                    uri = entry.batch.runtime_info.output_uri
                    self._move(entry, State.FAILED, failure_details(outcome.message, uri))
                batch = entry.batch
                error = None
                if batch.state == State.FAILED:
                    error = (
                        grpc.StatusCode.UNKNOWN,
                        f"Batch {batch.name} failed: {batch.state_message}",
                    )
                self.operations.finish(
                    batch.operation,
                    response=self._copy(entry),
                    error=error,
                    metadata=self._metadata(batch, done=True),
                )

    def _move(self, entry: _BatchEntry, state, message: str = "") -> None:
        batch = entry.batch
        batch.state_history.append(
            dataproc_v1.Batch.StateHistory(
                state=batch.state,
                state_message=batch.state_message,
                state_start_time=batch.state_time,
            )
        )
        batch.state = state
        batch.state_message = message
        batch.state_time = now()

    @staticmethod
    def _metadata(batch: dataproc_v1.Batch, done: bool = False):
        return dataproc_v1.BatchOperationMetadata(
            batch=batch.name,
            batch_uuid=batch.uuid,
            create_time=batch.create_time,
            done_time=now() if done else None,
            operation_type=dataproc_v1.BatchOperationMetadata.BatchOperationType.BATCH,
            description="Batch",
            labels=dict(batch.labels),
        )

    # -- GetBatch, ListBatches, DeleteBatch, cancel ----------------------------------------------
    def get(self, name: str) -> dataproc_v1.Batch:
        with self._lock:
            return self._copy(self._find(name))

    def list(self, request: dataproc_v1.ListBatchesRequest) -> dataproc_v1.ListBatchesResponse:
        if _PARENT.match(request.parent) is None:
            raise invalid_argument(
                "parent", request.parent, "use projects/<project>/locations/<region>"
            )
        if request.order_by not in ("", "create_time desc"):
            raise invalid_argument(
                "order_by", request.order_by, "use '' (creation order) or 'create_time desc'"
            )
        clauses = parse_filter(request.filter) if request.filter else []
        for key, value in clauses:
            if key not in ("state", "batch_id", "batch_uuid") and not key.startswith("labels."):
                raise invalid_argument(
                    "filter",
                    request.filter,
                    f"the emulator filters on state, batch_id, batch_uuid and labels.KEY "
                    f"with '=', not on {key!r} = {value!r}",
                )
        project, region = _PARENT.match(request.parent).groups()
        prefix = f"projects/{project}/locations/{region}/batches/"
        with self._lock:
            found = [
                self._copy(entry)
                for name, entry in self._batches.items()
                if name.startswith(prefix)
                and all(_matches(entry.batch, key, value) for key, value in clauses)
            ]
        if request.order_by:
            found.reverse()
        batches, token = page(found, request.page_size, request.page_token, default_size=20)
        return dataproc_v1.ListBatchesResponse(batches=batches, next_page_token=token)

    def delete(self, name: str) -> None:
        with self._lock:
            entry = self._find(name)
            if entry.batch.state not in FINAL_STATES:
                raise ServiceError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"Batch {name} is in state {entry.batch.state.name} and cannot be deleted: "
                    f"cancel its operation {entry.batch.operation} and wait until it is "
                    f"CANCELLED first",
                )
            del self._batches[name]

    def cancel(self, name: str) -> None:
        """CancelOperation of the batch's operation: CANCELLING, then CANCELLED."""
        with self._lock:
            entry = self._find(name)
            state = entry.batch.state
            if state in (State.CANCELLING, State.CANCELLED):
                return
            if state in FINAL_STATES:
                raise ServiceError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"Batch {name} is in state {state.name} and cannot be cancelled",
                )
            self._move(entry, State.CANCELLING)
            entry.run.cancel()

    def cancel_all(self) -> list[DriverRun]:
        """Cancel every batch still running (the emulator stops); the runs to wait for."""
        with self._lock:
            active = [e for e in self._batches.values() if e.batch.state not in FINAL_STATES]
            for entry in active:
                if entry.batch.state != State.CANCELLING:
                    self._move(entry, State.CANCELLING)
                entry.run.cancel()
            return [entry.run for entry in active]

    def driver_pid(self, name: str) -> int | None:
        with self._lock:
            return self._find(name).run.pid

    # -- helpers --------------------------------------------------------------------------------
    def _find(self, name: str) -> _BatchEntry:
        if not name:
            raise required("name")
        if _NAME.match(name) is None:
            raise invalid_argument(
                "name", name, "use projects/<project>/locations/<region>/batches/<batch_id>"
            )
        entry = self._batches.get(name)
        if entry is None:
            raise ServiceError(grpc.StatusCode.NOT_FOUND, f"Not found: Batch {name}")
        return entry

    @staticmethod
    def _copy(entry: _BatchEntry) -> dataproc_v1.Batch:
        return dataproc_v1.Batch.deserialize(dataproc_v1.Batch.serialize(entry.batch))


def _matches(batch: dataproc_v1.Batch, key: str, value: str) -> bool:
    if key == "state":
        return batch.state.name == value
    if key == "batch_id":
        return batch.name.rsplit("/", 1)[-1] == value
    if key == "batch_uuid":
        return batch.uuid == value
    label = key[len("labels.") :]
    return label in batch.labels and (value == "*" or batch.labels[label] == value)
