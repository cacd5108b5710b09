"""The one error type of the tables: a request Spanner would refuse, with its status code."""

from __future__ import annotations

from airflow_cdc_emulators.common import EmulatorError


class SpannerStatusError(EmulatorError):
    """A refused request or commit: ``code`` is the gRPC status code name Spanner uses.

    The servicer turns it into that status; Python callers of the store (tests, the seeded
    history) get it as an exception carrying the same message.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> SpannerStatusError:
    return SpannerStatusError("INVALID_ARGUMENT", message)


def failed_precondition(message: str) -> SpannerStatusError:
    return SpannerStatusError("FAILED_PRECONDITION", message)
