"""Dataproc through the google provider's ``DataprocHook``, or through the local stand-in.

Credentials come from ``gcp_conn_id`` (and ``impersonation_chain``) as for every Google
operator. ``DATAPROC_EMULATOR_HOST`` (or ``emulator_host``) points the job and batch clients at
the Dataproc emulator (``python -m airflow_cdc_emulators.dataproc``) over plain gRPC, with no
credentials, the way ``SPANNER_EMULATOR_HOST`` does for Spanner: every other method of the
provider's hook (submit_job, get_job, cancel_job, create_batch, get_batch) works unchanged.
"""

from __future__ import annotations

from airflow.providers.google.cloud.hooks.dataproc import DataprocHook

from airflow_cdc.hooks.google import EmulatorAwareGoogleHook

DATAPROC_EMULATOR_ENV = "DATAPROC_EMULATOR_HOST"


class CdcDataprocHook(EmulatorAwareGoogleHook, DataprocHook):
    """``DataprocHook`` whose clients reach the Dataproc emulator when one is named.

    Its parameters are :class:`~airflow_cdc.hooks.google.EmulatorAwareGoogleHook`'s.
    """

    emulator_env = DATAPROC_EMULATOR_ENV

    def _emulator_client(self, client_class):
        """Plain gRPC to the emulator: a transport around an insecure channel and no
        credentials (the clients have no emulator switch; an ``api_endpoint`` alone is TLS)."""
        import grpc

        transport = client_class.get_transport_class("grpc")(
            channel=grpc.insecure_channel(self.emulator_host))
        return client_class(transport=transport, client_options={"api_endpoint": self.emulator_host})

    def get_job_client(self, region: str | None = None):
        if self.emulator_host:
            from google.cloud.dataproc_v1 import JobControllerClient

            return self._emulator_client(JobControllerClient)
        return super().get_job_client(region=region)

    def get_batch_client(self, region: str | None = None):
        if self.emulator_host:
            from google.cloud.dataproc_v1 import BatchControllerClient

            return self._emulator_client(BatchControllerClient)
        return super().get_batch_client(region=region)
