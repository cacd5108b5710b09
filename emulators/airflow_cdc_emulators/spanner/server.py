"""Run the Spanner emulator in-process: a gRPC server on 127.0.0.1 (port 0 = any free).

    with SpannerEmulator(generate_history(seed=3)) as emulator:           # a change stream
    with SpannerEmulator(tables=generate_commit_timestamp_tables()) as emulator:  # tables
        os.environ["SPANNER_EMULATOR_HOST"] = emulator.emulator_host
        ...  # google-cloud-spanner's Client(project=..., credentials=AnonymousCredentials())

It serves a change stream history, tables with commit timestamp columns, or both, under one
clock. "now" defaults to the end of the tables' history (else of the change stream history);
move it with :attr:`SpannerEmulator.now` to replay window by window, or pass
``wall_clock=True`` for real time. ``SpannerChangeStreamEmulator`` is the same class.
"""

from __future__ import annotations

from concurrent import futures
from datetime import datetime

import grpc
from spannermockserver.generated import (
    spanner_database_admin_pb2_grpc,
    spanner_pb2_grpc,
)

from airflow_cdc_emulators.listening import EmulatorStartError, listen

from .clock import EmulatorClock
from .history import History
from .servicer import ChangeStreamServicer, SchemaAdminServicer
from .tables.store import VersionedDatabase
from .timeline import to_datetime, to_micros


class SpannerEmulator:
    """A Spanner gRPC endpoint serving a change stream history and/or versioned tables.

    ``tables``' clock becomes the emulator's clock (shared: setting ``emulator.now`` moves
    ``tables.now``); ``now`` sets it, ``wall_clock=True`` makes it follow real time.
    """

    def __init__(
        self,
        history: History | None = None,
        *,
        tables: VersionedDatabase | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        now: datetime | None = None,
        wall_clock: bool = False,
        postgresql_databases=(),
        max_workers: int = 16,
    ) -> None:
        if history is None and tables is None:
            raise ValueError(
                "the Spanner emulator needs something to serve: a change stream history "
                "(generate_history()), tables (generate_commit_timestamp_tables()) or both"
            )
        self.history = history
        self.tables = tables
        self.host = host
        self._requested_port = port
        self._max_workers = max_workers
        self.clock = tables.clock if tables is not None else EmulatorClock(history.end_us)
        if wall_clock:
            self.clock.follow_wall_time()
        if now is not None:
            self.clock.set(to_micros(now))
        self.spanner = ChangeStreamServicer(
            history, None, postgresql_databases, tables=tables, clock=self.clock
        )
        self.admin = SchemaAdminServicer(history, postgresql_databases, tables=tables)
        # Mid-stream faults on demand (README "Faults on demand"): partitions by token.
        self.faults = self.spanner.faults
        self._server: grpc.Server | None = None
        self.port: int | None = None

    @property
    def now(self) -> datetime:
        """The emulator's clock: queries see the history up to this instant."""
        return to_datetime(self.clock.now_us)

    @now.setter
    def now(self, value: datetime) -> None:
        self.clock.set(to_micros(value))

    @property
    def emulator_host(self) -> str:
        """``host:port``, the value for ``SPANNER_EMULATOR_HOST``."""
        if self.port is None:
            raise EmulatorStartError(
                "the emulator is not started: call start() or use it as a context manager"
            )
        return f"{self.host}:{self.port}"

    def start(self) -> SpannerEmulator:
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

    def __enter__(self) -> SpannerEmulator:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


# The name from when the emulator served change streams only.
SpannerChangeStreamEmulator = SpannerEmulator
