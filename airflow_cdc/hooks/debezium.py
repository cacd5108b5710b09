"""The Airflow side of a Debezium sink: its files through the google provider's GCSHook (or a
local folder), and the connection the extract job's Spark executors read them with.

``gs://bucket/path`` is reached with ``GCSHook(gcp_conn_id=..., impersonation_chain=...)``:
any connection the google provider accepts (key file, workload identity, impersonation), or an
``is_anonymous`` one against a local GCS-compatible server named by ``STORAGE_EMULATOR_HOST``.
Executors do not import Airflow: :meth:`DebeziumSinkHook.extract_connection` hands them the
project and a freshly minted access token (or the local server's address), which
:func:`airflow_cdc.sources.debezium.storage.sink_access` turns into a client.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from airflow_cdc.sources.debezium.layout import Lister, Reader, local_lister, local_reader
from airflow_cdc.sources.debezium.storage import (
    SinkStorageError,
    client_access,
    is_gs_uri,
    split_gs_uri,
)

#: The variable google-cloud-storage (and so GCSHook) reads for a local GCS server.
STORAGE_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"


class DebeziumSinkHook:
    """Lists and reads the sink's files for the plan, and connects the extract job to them.

    :param gcp_conn_id: the Google Cloud connection.
    :param impersonation_chain: a service account to impersonate, or a chain of them.
    """

    def __init__(
        self,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
    ) -> None:
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self._gcs_hook = None

    def access(self, prefix: str) -> tuple[Lister, Reader]:
        """The :data:`~airflow_cdc.sources.debezium.layout.Lister` and
        :data:`~airflow_cdc.sources.debezium.layout.Reader` of the sink at ``prefix``."""
        if not is_gs_uri(prefix):
            return local_lister, local_reader
        split_gs_uri(prefix)
        return client_access(self._gcs().get_conn())

    def extract_connection(self, prefix: str) -> dict:
        """What Spark executors reach the sink at ``prefix`` with (``connection`` of
        :func:`~airflow_cdc.sources.debezium.storage.sink_access`): ``{}`` for a local folder;
        for ``gs://``, the connection's project and either the local GCS server's address or
        an access token minted now (it lives about an hour; it is never logged)."""
        if not is_gs_uri(prefix):
            return {}
        split_gs_uri(prefix)
        from google.auth.credentials import AnonymousCredentials

        credentials, project = self._gcs().get_credentials_and_project_id()
        emulator_host = os.environ.get(STORAGE_EMULATOR_ENV) or None
        if emulator_host:
            return {"project": project or None, "access_token": None,
                    "emulator_host": emulator_host}
        if isinstance(credentials, AnonymousCredentials):
            raise SinkStorageError(
                f"connection {self.gcp_conn_id!r} is anonymous but {STORAGE_EMULATOR_ENV} is not "
                f"set, so Spark could not read {prefix} with it: give the connection credentials "
                f"(a key, workload identity or impersonation_chain), or set "
                f"{STORAGE_EMULATOR_ENV} to the local GCS server"
            )
        from google.auth.transport.requests import Request

        credentials.refresh(Request())
        return {"project": project or None, "access_token": credentials.token,
                "emulator_host": None}

    def _gcs(self):
        if self._gcs_hook is None:
            from airflow.providers.google.cloud.hooks.gcs import GCSHook

            self._gcs_hook = GCSHook(
                gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain
            )
        return self._gcs_hook
