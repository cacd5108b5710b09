"""The gRPC services: ``google.cloud.dataproc.v1.JobController``, ``.BatchController`` and
``google.longrunning.Operations``, each method delegating to :mod:`.jobs`, :mod:`.batches` or
:mod:`.operations`.

google-cloud-dataproc ships no ``*_pb2_grpc`` servicers, so the handlers are registered with
``grpc.method_handlers_generic_handler`` under the real service and method names and
(de)serialize with the client's proto-plus types (``SubmitJobRequest.deserialize``,
``Job.serialize``); the Operations messages are ``google.longrunning.operations_pb2``.
A :class:`~.errors.ServiceError` becomes its status code and message; anything else is
INTERNAL naming the error (an emulator bug, never a silent hang).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc
from google.cloud import dataproc_v1
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from .batches import BatchStore
from .errors import ServiceError
from .jobs import JobStore
from .operations import OperationStore

JOB_SERVICE = "google.cloud.dataproc.v1.JobController"
BATCH_SERVICE = "google.cloud.dataproc.v1.BatchController"
OPERATIONS_SERVICE = "google.longrunning.Operations"

log = logging.getLogger(__name__)


def _serialize(message) -> bytes:
    if hasattr(message, "SerializeToString"):
        return message.SerializeToString()
    return type(message).serialize(message)


def _unary(
    method: Callable, request_deserializer: Callable[[bytes], object]
) -> grpc.RpcMethodHandler:
    def handle(request, context: grpc.ServicerContext):
        try:
            return method(request)
        except ServiceError as error:
            context.abort(error.code, error.message)
        except Exception as error:  # an emulator bug: say so rather than hang the client
            log.exception("Dataproc emulator failed on %s", type(request).__name__)
            context.abort(
                grpc.StatusCode.INTERNAL,
                f"the Dataproc emulator failed: {type(error).__name__}: {error}",
            )

    return grpc.unary_unary_rpc_method_handler(
        handle, request_deserializer=request_deserializer, response_serializer=_serialize
    )


class DataprocServicer:
    """Answers the three services from one job store, one batch store and their operations."""

    def __init__(self, jobs: JobStore, batches: BatchStore, operations: OperationStore) -> None:
        self.jobs = jobs
        self.batches = batches
        self.operations = operations

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        d = dataproc_v1
        jobs = grpc.method_handlers_generic_handler(
            JOB_SERVICE,
            {
                "SubmitJob": _unary(self.submit_job, d.SubmitJobRequest.deserialize),
                "SubmitJobAsOperation": _unary(
                    self.submit_job_as_operation, d.SubmitJobRequest.deserialize
                ),
                "GetJob": _unary(self.get_job, d.GetJobRequest.deserialize),
                "ListJobs": _unary(self.jobs.list, d.ListJobsRequest.deserialize),
                "CancelJob": _unary(self.cancel_job, d.CancelJobRequest.deserialize),
                "DeleteJob": _unary(self.delete_job, d.DeleteJobRequest.deserialize),
            },
        )
        batches = grpc.method_handlers_generic_handler(
            BATCH_SERVICE,
            {
                "CreateBatch": _unary(self.create_batch, d.CreateBatchRequest.deserialize),
                "GetBatch": _unary(self.get_batch, d.GetBatchRequest.deserialize),
                "ListBatches": _unary(self.batches.list, d.ListBatchesRequest.deserialize),
                "DeleteBatch": _unary(self.delete_batch, d.DeleteBatchRequest.deserialize),
            },
        )
        ops = operations_pb2
        operations = grpc.method_handlers_generic_handler(
            OPERATIONS_SERVICE,
            {
                "GetOperation": _unary(self.get_operation, ops.GetOperationRequest.FromString),
                "ListOperations": _unary(
                    self.operations.list, ops.ListOperationsRequest.FromString
                ),
                "CancelOperation": _unary(
                    self.cancel_operation, ops.CancelOperationRequest.FromString
                ),
                "DeleteOperation": _unary(
                    self.delete_operation, ops.DeleteOperationRequest.FromString
                ),
            },
        )
        return [jobs, batches, operations]

    # -- JobController --------------------------------------------------------------------------
    def submit_job(self, request: dataproc_v1.SubmitJobRequest) -> dataproc_v1.Job:
        return self.jobs.submit(request)

    def submit_job_as_operation(self, request) -> operations_pb2.Operation:
        return self.operations.get(self.jobs.submit(request, as_operation=True))

    def get_job(self, request: dataproc_v1.GetJobRequest) -> dataproc_v1.Job:
        return self.jobs.get(request.project_id, request.region, request.job_id)

    def cancel_job(self, request: dataproc_v1.CancelJobRequest) -> dataproc_v1.Job:
        return self.jobs.cancel(request.project_id, request.region, request.job_id)

    def delete_job(self, request: dataproc_v1.DeleteJobRequest) -> empty_pb2.Empty:
        self.jobs.delete(request.project_id, request.region, request.job_id)
        return empty_pb2.Empty()

    # -- BatchController ------------------------------------------------------------------------
    def create_batch(self, request: dataproc_v1.CreateBatchRequest) -> operations_pb2.Operation:
        return self.operations.get(self.batches.create(request))

    def get_batch(self, request: dataproc_v1.GetBatchRequest) -> dataproc_v1.Batch:
        return self.batches.get(request.name)

    def delete_batch(self, request: dataproc_v1.DeleteBatchRequest) -> empty_pb2.Empty:
        self.batches.delete(request.name)
        return empty_pb2.Empty()

    # -- Operations -----------------------------------------------------------------------------
    def get_operation(self, request: operations_pb2.GetOperationRequest):
        return self.operations.get(request.name)

    def cancel_operation(self, request: operations_pb2.CancelOperationRequest):
        self.operations.cancel(request.name)
        return empty_pb2.Empty()

    def delete_operation(self, request: operations_pb2.DeleteOperationRequest):
        self.operations.delete(request.name)
        return empty_pb2.Empty()
