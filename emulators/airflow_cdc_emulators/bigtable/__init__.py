"""A local Bigtable server with change streams, speaking the real ``google.bigtable.v2`` API.

The official Bigtable emulator answers ReadChangeStream with UNIMPLEMENTED; this one serves a
deterministic, seeded history (and whatever clients write) through ReadChangeStream,
GenerateInitialChangeStreamPartitions, MutateRow(s), CheckAndMutateRow, ReadModifyWriteRow,
ReadRows and the admin DropRowRange, so the real ``google-cloud-bigtable`` client talks to it
unchanged.

* :mod:`.history` generates the history (commits, partition timeline, replication and the lag
  episode, the truth); :mod:`.mutations` the commit types and :func:`true_state`;
  :mod:`.partitions` the row ranges, splits and merges.
* :mod:`.stream` holds the commits, positions, tokens and watermarks and runs one
  ReadChangeStream call; :mod:`.servicer` and :mod:`.server` put it on gRPC.
* :mod:`.reading` is a reader for tests and demos (never used by production code).
* ``emulator.faults`` (:mod:`airflow_cdc_emulators.injected_faults`) breaks change stream
  reads on demand, mid-stream: gRPC errors, rejected tokens, stopped heartbeats.
* ``python -m airflow_cdc_emulators.bigtable --port 8086`` runs it on its own.

Connecting (the GAPIC ``BigtableClient`` ignores ``BIGTABLE_EMULATOR_HOST`` and
``api_endpoint`` alone gives a TLS channel, so pass a plain-text channel in a transport)::

    import grpc
    from google.cloud.bigtable_v2 import BigtableClient
    from google.cloud.bigtable_v2.services.bigtable.transports import BigtableGrpcTransport

    client = BigtableClient(
        transport=BigtableGrpcTransport(channel=grpc.insecure_channel("127.0.0.1:8086"))
    )

``emulator.client()`` and ``emulator.admin_client()`` return exactly that. The handwritten
``google.cloud.bigtable.Client`` honours ``BIGTABLE_EMULATOR_HOST=<emulator.emulator_host>``.

No Airflow or pyspark import here: tests, the demo and Spark executors' machines use it alike.
"""

from __future__ import annotations

from .history import (
    CHUNK_SIZE,
    DEFAULT_APP_PROFILES,
    DEFAULT_INSTANCE,
    DEFAULT_PROJECT,
    DEFAULT_TABLE,
    MAX_CHUNKS_PER_MESSAGE,
    BigtableHistory,
    HistoryConfig,
    HistoryConfigError,
    LagEpisode,
    RowRangeDrop,
    UnknownAppProfileError,
    generate_history,
)
from .mutations import (
    GARBAGE_COLLECTION,
    USER,
    Commit,
    DeleteFromColumn,
    DeleteFromFamily,
    SetCell,
    true_state,
)
from .partitions import Partition, PartitionEvent, PartitionTimeline, RowRange
from .reading import ChangeRecord, PartitionRead, ReadResult, read_all, read_partition
from .server import BigtableEmulator, EmulatorStartError
from .stream import ServiceError

__all__ = [
    "CHUNK_SIZE",
    "DEFAULT_APP_PROFILES",
    "DEFAULT_INSTANCE",
    "DEFAULT_PROJECT",
    "DEFAULT_TABLE",
    "GARBAGE_COLLECTION",
    "MAX_CHUNKS_PER_MESSAGE",
    "USER",
    "BigtableEmulator",
    "BigtableHistory",
    "ChangeRecord",
    "Commit",
    "DeleteFromColumn",
    "DeleteFromFamily",
    "EmulatorStartError",
    "HistoryConfig",
    "HistoryConfigError",
    "LagEpisode",
    "Partition",
    "PartitionEvent",
    "PartitionRead",
    "PartitionTimeline",
    "ReadResult",
    "RowRange",
    "RowRangeDrop",
    "ServiceError",
    "SetCell",
    "UnknownAppProfileError",
    "generate_history",
    "read_all",
    "read_partition",
    "true_state",
]
