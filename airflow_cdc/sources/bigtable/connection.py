"""Where a Bigtable table lives and how Spark tasks reach it, in a form they can carry."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BigtableConnection:
    """``emulator_host`` talks plain-text gRPC (our emulator, ``BIGTABLE_EMULATOR_HOST``);
    ``access_token`` is a short-lived OAuth token minted on the Airflow side (never logged);
    with neither, the executor's Application Default Credentials are used."""

    project: str
    instance: str
    table: str
    app_profile: str = ""
    emulator_host: str | None = None
    access_token: str | None = None

    def __repr__(self) -> str:  # keeps the token out of logs and tracebacks
        return (
            f"BigtableConnection(project={self.project!r}, instance={self.instance!r}, "
            f"table={self.table!r}, app_profile={self.app_profile!r}, "
            f"emulator_host={self.emulator_host!r})"
        )

    @property
    def table_name(self) -> str:
        return f"projects/{self.project}/instances/{self.instance}/tables/{self.table}"

    def data_client(self):
        """The GAPIC ``BigtableClient`` (the data API that serves change streams)."""
        from google.cloud.bigtable_v2 import BigtableClient

        if self.emulator_host:
            import grpc
            from google.cloud.bigtable_v2.services.bigtable.transports import (
                BigtableGrpcTransport,
            )

            # The GAPIC client ignores BIGTABLE_EMULATOR_HOST; api_endpoint alone opens TLS.
            channel = grpc.insecure_channel(self.emulator_host)
            return BigtableClient(transport=BigtableGrpcTransport(channel=channel))
        if self.access_token:
            from google.oauth2.credentials import Credentials

            return BigtableClient(credentials=Credentials(token=self.access_token))
        return BigtableClient()
