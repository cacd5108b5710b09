"""The one error the emulator's services raise: a gRPC status code and a message naming the fix."""

from __future__ import annotations

import grpc

from airflow_cdc_emulators.common import EmulatorError


class ServiceError(EmulatorError):
    """A request the real Dataproc service would refuse, with the status code it would use."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid_argument(field: str, value: object, fix: str) -> ServiceError:
    return ServiceError(
        grpc.StatusCode.INVALID_ARGUMENT, f"{field} {value!r} is not valid: {fix}"
    )


def required(field: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.INVALID_ARGUMENT, f"{field} is required but empty")
