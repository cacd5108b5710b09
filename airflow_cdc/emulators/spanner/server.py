"""Run the change stream emulator in-process: a gRPC server on 127.0.0.1 (port 0 = any free).

    with SpannerChangeStreamEmulator(generate_history(seed=3)) as emulator:
        os.environ["SPANNER_EMULATOR_HOST"] = emulator.emulator_host
        ...  # google-cloud-spanner's Client(project=..., credentials=AnonymousCredentials())

"now" (the emulator's clock) defaults to the end of the history; move it with
:attr:`SpannerChangeStreamEmulator.now` to replay a history window by window.
"""

from __future__ import annotations

from concurrent import futures
from datetime import datetime

import grpc
from spannermockserver.generated import spanner_database_admin_pb2_grpc, spanner_pb2_grpc

from airflow_cdc.emulators.listening import EmulatorStartError, listen

from .history import History
from .servicer import ChangeStreamServicer, SchemaAdminServicer
from .timeline import to_datetime, to_micros


class SpannerChangeStreamEmulator:
    """A Spanner gRPC endpoint serving one history's change stream."""

    def __init__(
        self,
        history: History,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        now: datetime | None = None,
        postgresql_databases=(),
        max_workers: int = 16,
    ) -> None:
        self.history = history
        self.host = host
        self._requested_port = port
        self._max_workers = max_workers
        self.spanner = ChangeStreamServicer(
            history, None if now is None else to_micros(now), postgresql_databases
        )
        self.admin = SchemaAdminServicer(history, postgresql_databases)
        self._server: grpc.Server | None = None
        self.port: int | None = None

    @property
    def now(self) -> datetime:
        """The emulator's clock: queries see the history up to this instant."""
        return to_datetime(self.spanner.now_us)

    @now.setter
    def now(self, value: datetime) -> None:
        self.spanner.now_us = to_micros(value)

    @property
    def emulator_host(self) -> str:
        """``host:port``, the value for ``SPANNER_EMULATOR_HOST``."""
        if self.port is None:
            raise EmulatorStartError(
                "the emulator is not started: call start() or use it as a context manager"
            )
        return f"{self.host}:{self.port}"

    def start(self) -> SpannerChangeStreamEmulator:
        if self._server is not None:
            return self
        # No SO_REUSEPORT: a second server on a busy port must fail, not share the port.
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._max_workers),
            options=[("grpc.so_reuseport", 0)],
        )
        spanner_pb2_grpc.add_SpannerServicer_to_server(self.spanner, server)
        spanner_database_admin_pb2_grpc.add_DatabaseAdminServicer_to_server(self.admin, server)
        port = listen(server, self.host, self._requested_port)
        server.start()
        self._server, self.port = server, port
        return self

    def stop(self, grace: float | None = None) -> None:
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None

    def wait(self) -> None:
        """Block until the server stops (used by the command line)."""
        if self._server is not None:
            self._server.wait_for_termination()

    def __enter__(self) -> SpannerChangeStreamEmulator:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
