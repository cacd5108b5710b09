"""What every emulator does to listen: bind a gRPC server's port or say why it cannot."""

from __future__ import annotations

from airflow_cdc_emulators.common import EmulatorError


class EmulatorStartError(EmulatorError, OSError):
    """The gRPC server could not bind its address, or the emulator is not started."""


def listen(server, host: str, port: int) -> int:
    """Bind ``server`` to ``host:port`` (0: any free port) and return the port bound."""
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as error:  # grpc raises RuntimeError when it cannot bind
        bound, cause = 0, error
    else:
        cause = None
    if not bound:
        raise EmulatorStartError(
            f"cannot listen on {host}:{port} (in use or not a local address): choose another "
            f"--port, or 0 for any free port"
        ) from cause
    return bound
