"""How a ``google.cloud.dataproc_v1`` client reaches the emulator: ``DATAPROC_EMULATOR_HOST``.

The Dataproc clients have no emulator switch of their own (unlike ``SPANNER_EMULATOR_HOST``),
and ``client_options={"api_endpoint": host}`` alone opens a TLS channel the emulator does not
speak. What works with google-cloud-dataproc 5.32 is a transport instance around a plain-text
channel, and no ``credentials`` argument (the client refuses credentials next to a transport
instance: "When providing a transport instance, provide its credentials directly")::

    channel = grpc.insecure_channel(host)                     # grpc.aio.insecure_channel: async
    JobControllerClient(
        transport=JobControllerGrpcTransport(channel=channel),
        client_options={"api_endpoint": host},                # optional: only recorded
    )

:func:`dataproc_client` does that for any client class (sync or async, job, batch, ...) and
``host`` (default ``$DATAPROC_EMULATOR_HOST``); the batch client's ``operations_client`` and
``create_batch(...).result()`` use the same channel.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from airflow_cdc_emulators.common import EmulatorError

DATAPROC_EMULATOR_HOST = "DATAPROC_EMULATOR_HOST"


class EmulatorHostMissingError(EmulatorError, LookupError):
    """No host given and ``DATAPROC_EMULATOR_HOST`` is not set."""


def emulator_host(environ: Mapping[str, str] | None = None) -> str | None:
    """``$DATAPROC_EMULATOR_HOST`` (``host:port``), None when unset or empty."""
    value = (os.environ if environ is None else environ).get(DATAPROC_EMULATOR_HOST, "")
    return value.strip() or None


def dataproc_client_kwargs(client_class: type, host: str | None = None) -> dict:
    """Keyword arguments that make ``client_class(**kwargs)`` talk plain gRPC to ``host``.

    ``client_class`` is any GAPIC client of ``google.cloud.dataproc_v1`` (``JobControllerClient``,
    ``BatchControllerAsyncClient``, ...); async clients get a ``grpc.aio`` channel, so build
    those inside the event loop that uses them.
    """
    import grpc

    host = host or emulator_host()
    if not host:
        raise EmulatorHostMissingError(
            f"no Dataproc emulator host: pass host='127.0.0.1:<port>' or set "
            f"{DATAPROC_EMULATOR_HOST} (python -m airflow_cdc_emulators.dataproc prints it)"
        )
    is_async = client_class.__name__.endswith("AsyncClient")
    transport_class = client_class.get_transport_class("grpc_asyncio" if is_async else "grpc")
    channel = grpc.aio.insecure_channel(host) if is_async else grpc.insecure_channel(host)
    return {
        "transport": transport_class(channel=channel),
        "client_options": {"api_endpoint": host},
    }


def dataproc_client(client_class: type, host: str | None = None):
    """``client_class`` connected to the emulator at ``host`` (default $DATAPROC_EMULATOR_HOST)."""
    return client_class(**dataproc_client_kwargs(client_class, host))
