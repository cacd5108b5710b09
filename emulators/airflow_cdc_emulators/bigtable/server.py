"""Run the Bigtable emulator in-process: a gRPC server on 127.0.0.1 (port 0 = any free port).

    with BigtableEmulator(generate_history(seed=7)) as emulator:
        client = emulator.client()            # a ready google.cloud.bigtable_v2.BigtableClient
        admin = emulator.admin_client()       # BigtableTableAdminClient (DropRowRange)
        emulator.emulator_host                # "127.0.0.1:<port>"

The emulator's clock runs with wall time (offset 0) until :meth:`BigtableEmulator.set_now`
moves it; nothing visible after "now" is ever served.
"""

from __future__ import annotations

from concurrent import futures
from datetime import datetime

import grpc

from airflow_cdc_emulators.listening import EmulatorStartError, listen

from .history import MAX_CHUNKS_PER_MESSAGE, BigtableHistory
from .mutations import Commit, TableState
from .servicer import BigtableServicer
from .stream import ChangeStore
from .timeline import Clock, to_datetime, to_micros

_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]


class BigtableEmulator:
    """A ``google.bigtable.v2.Bigtable`` endpoint serving one table's history and writes."""

    def __init__(
        self,
        history: BigtableHistory,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        chunk_size: int | None = None,
        max_chunks_per_message: int = MAX_CHUNKS_PER_MESSAGE,
        now: datetime | None = None,
        max_workers: int = 32,
    ) -> None:
        self.history = history
        self.host = host
        self._requested_port = port
        self._max_workers = max_workers
        self.clock = Clock()
        if now is not None:
            self.clock.set_now(now)
        self.store = ChangeStore(history, self.clock)
        self.servicer = BigtableServicer(
            self.store,
            chunk_size=history.config.chunk_size if chunk_size is None else chunk_size,
            max_chunks_per_message=max_chunks_per_message,
        )
        # Mid-stream faults on demand (README "Faults on demand"): partitions by row range.
        self.faults = self.servicer.faults
        self._server: grpc.Server | None = None
        self._channels: list[grpc.Channel] = []
        self.port: int | None = None

    # -- clock ----------------------------------------------------------------------------------
    @property
    def now(self) -> datetime:
        """The emulator's clock: wall time minus the offset :meth:`set_now` chose."""
        return to_datetime(self.clock.now_us())

    @now.setter
    def now(self, value: datetime) -> None:
        self.set_now(value)

    def set_now(self, value: datetime) -> None:
        """Make "now" equal ``value`` at this moment; it then advances with wall time."""
        self.clock.set_now(value)
        self.store.notify()

    # -- data -------------------------------------------------------------------------------------
    @property
    def table_name(self) -> str:
        return self.history.table_name

    @property
    def commits(self) -> list[Commit]:
        """Every commit held: the seeded history and writes through the client."""
        with self.store.cond:
            return list(self.store.commits)

    def true_state(self, at: datetime) -> TableState:
        """The table after every commit (seeded or written) with commit timestamp ``< at``."""
        return self.store.true_state(to_micros(at))

    def drop_row_range(self, prefix: bytes = b"", *, delete_all: bool = False) -> list[Commit]:
        """DropRowRange without the admin client: the same commits the admin RPC records."""
        if not prefix and not delete_all:
            raise ValueError(
                "drop_row_range needs a non-empty prefix, or delete_all=True to drop every row"
            )
        return self.store.drop_row_range(prefix)

    # -- endpoint -------------------------------------------------------------------------------
    @property
    def emulator_host(self) -> str:
        """``host:port``, the value for ``BIGTABLE_EMULATOR_HOST``."""
        if self.port is None:
            raise EmulatorStartError(
                "the emulator is not started: call start() or use it as a context manager"
            )
        return f"{self.host}:{self.port}"

    def channel(self) -> grpc.Channel:
        """A plain-text channel to the emulator (closed when the emulator stops)."""
        channel = grpc.insecure_channel(self.emulator_host, options=_CHANNEL_OPTIONS)
        self._channels.append(channel)
        return channel

    def client(self):
        """A ``google.cloud.bigtable_v2.BigtableClient`` talking plain-text gRPC to the emulator."""
        from google.cloud.bigtable_v2 import BigtableClient
        from google.cloud.bigtable_v2.services.bigtable.transports import BigtableGrpcTransport

        return BigtableClient(transport=BigtableGrpcTransport(channel=self.channel()))

    def admin_client(self):
        """A ``google.cloud.bigtable_admin_v2.BigtableTableAdminClient`` (DropRowRange only)."""
        from google.cloud.bigtable_admin_v2 import BigtableTableAdminClient
        from google.cloud.bigtable_admin_v2.services.bigtable_table_admin.transports import (
            BigtableTableAdminGrpcTransport,
        )

        return BigtableTableAdminClient(
            transport=BigtableTableAdminGrpcTransport(channel=self.channel())
        )

    def start(self) -> BigtableEmulator:
        if self._server is not None:
            return self
        # No SO_REUSEPORT: a second server on a busy port must fail, not share the port.
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._max_workers),
            handlers=self.servicer.handlers(),
            options=[("grpc.so_reuseport", 0), *_CHANNEL_OPTIONS],
        )
        port = listen(server, self.host, self._requested_port)
        server.start()
        self._server, self.port = server, port
        return self

    def stop(self, grace: float | None = None) -> None:
        for channel in self._channels:
            channel.close()
        self._channels.clear()
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
            self.store.notify()

    def wait(self) -> None:
        """Block until the server stops (used by the command line)."""
        if self._server is not None:
            self._server.wait_for_termination()

    def __enter__(self) -> BigtableEmulator:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
