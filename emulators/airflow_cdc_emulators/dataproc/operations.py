"""``google.longrunning.Operations`` for the emulator: the operations of batches and of jobs
submitted with SubmitJobAsOperation.

An operation is named ``projects/<p>/regions/<r>/operations/<uuid>`` (the form Dataproc uses,
for batches too) and carries its resource's metadata message; its owner updates the metadata
and finishes it with a response or an error. CancelOperation calls the owner's cancel (a
batch cancels through its operation); cancelling a finished operation is FAILED_PRECONDITION.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from google.longrunning import operations_pb2
from google.protobuf import any_pb2
from google.rpc import status_pb2

from .errors import ServiceError, invalid_argument
from .listing import page

_COLLECTION = re.compile(r"^projects/([^/]+)/regions/([^/]+)/operations$")


def pack(message) -> any_pb2.Any:
    """A proto-plus or protobuf message as ``google.protobuf.Any``."""
    packed = any_pb2.Any()
    packed.Pack(message._pb if hasattr(message, "_pb") else message)
    return packed


@dataclass
class _Entry:
    operation: operations_pb2.Operation
    cancel: Callable[[], None] | None


class OperationStore:
    """Every operation the emulator started, by name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def create(
        self, project: str, region: str, metadata, cancel: Callable[[], None] | None = None
    ) -> str:
        """A new running operation with ``metadata``; ``cancel`` runs on CancelOperation."""
        name = f"projects/{project}/regions/{region}/operations/{uuid.uuid4()}"
        with self._lock:
            self._entries[name] = _Entry(
                operations_pb2.Operation(name=name, metadata=pack(metadata)), cancel
            )
        return name

    def update_metadata(self, name: str, metadata) -> None:
        with self._lock:
            self._entries[name].operation.metadata.CopyFrom(pack(metadata))

    def finish(
        self,
        name: str,
        *,
        response=None,
        error: tuple[grpc.StatusCode, str] | None = None,
        metadata=None,
    ) -> None:
        """Mark the operation done with ``response`` or ``error`` (code, message)."""
        with self._lock:
            operation = self._entries[name].operation
            if metadata is not None:
                operation.metadata.CopyFrom(pack(metadata))
            if error is not None:
                code, message = error
                operation.error.CopyFrom(status_pb2.Status(code=code.value[0], message=message))
            else:
                operation.response.CopyFrom(pack(response))
            operation.done = True

    def get(self, name: str) -> operations_pb2.Operation:
        with self._lock:
            entry = self._entries.get(name)
            if entry is None:
                raise ServiceError(
                    grpc.StatusCode.NOT_FOUND,
                    f"Operation {name!r} not found: names look like "
                    f"projects/<project>/regions/<region>/operations/<id> and come from "
                    f"create_batch or submit_job_as_operation",
                )
            return self._copy(entry.operation)

    def list(self, request: operations_pb2.ListOperationsRequest):
        match = _COLLECTION.match(request.name)
        if match is None:
            raise invalid_argument(
                "name", request.name, "use projects/<project>/regions/<region>/operations"
            )
        if request.filter:
            raise invalid_argument(
                "filter", request.filter, "the emulator lists operations without a filter"
            )
        prefix = request.name + "/"
        with self._lock:
            found = [
                self._copy(entry.operation)
                for name, entry in self._entries.items()
                if name.startswith(prefix)
            ]
        items, token = page(found, request.page_size, request.page_token, default_size=100)
        return operations_pb2.ListOperationsResponse(operations=items, next_page_token=token)

    def cancel(self, name: str) -> None:
        operation = self.get(name)
        if operation.done:
            raise ServiceError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"Operation {name!r} is already done and cannot be cancelled",
            )
        with self._lock:
            cancel = self._entries[name].cancel
        if cancel is None:
            raise ServiceError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"Operation {name!r} cannot be cancelled: cancel its job with CancelJob",
            )
        cancel()

    def delete(self, name: str) -> None:
        operation = self.get(name)
        if not operation.done:
            raise ServiceError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"Operation {name!r} is still running: cancel it (CancelOperation) and wait "
                f"until it is done before deleting it",
            )
        with self._lock:
            self._entries.pop(name, None)

    @staticmethod
    def _copy(operation: operations_pb2.Operation) -> operations_pb2.Operation:
        copy = operations_pb2.Operation()
        copy.CopyFrom(operation)
        return copy
