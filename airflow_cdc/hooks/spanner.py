"""Hook for Spanner change streams on the google provider's credentials.

Credentials come from ``gcp_conn_id`` (and ``impersonation_chain``) as for every Google
operator. ``SPANNER_EMULATOR_HOST`` (or ``emulator_host``) points everything at a local
emulator with anonymous credentials instead, like Google's own client does.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from airflow.providers.common.compat.sdk import BaseHook
from airflow.providers.google.common.hooks.base_google import GoogleBaseHook

from airflow_cdc.sources.spanner.reader import SpannerConnection


class SpannerChangeStreamHook(GoogleBaseHook):
    """Builds the connection Spark tasks use to read a change stream."""

    def __init__(
        self,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        emulator_host: str | None = None,
        pass_credentials: bool = True,
        **kwargs,
    ) -> None:
        self.pass_credentials = pass_credentials
        self.emulator_host = emulator_host or os.environ.get("SPANNER_EMULATOR_HOST")
        if self.emulator_host:
            # GoogleBaseHook reads the gcp connection when built; an emulator needs none, and
            # laptops running the emulator usually have no google_cloud_default defined.
            BaseHook.__init__(self, **kwargs)
            self.gcp_conn_id = gcp_conn_id
            self.impersonation_chain = impersonation_chain
            self.quota_project_id = None
            self.extras = {}
            self._cached_credentials = None
            self._cached_project_id = None
        else:
            super().__init__(
                gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain, **kwargs
            )

    def connection_for(
        self, instance_id: str, database_id: str, project_id: str | None = None,
        pass_credentials: bool | None = None,
    ) -> SpannerConnection:
        """Where and how Spark tasks reach the database.

        On an emulator no credential is involved. Otherwise, with ``pass_credentials``, a
        short-lived access token of the connection (after impersonation) travels to the Spark
        job in its 0600 job file, never on a command line or in a log; without it, executors
        use their own Application Default Credentials (Dataproc's service account, say).
        ``pass_credentials`` None takes the hook's (``pass_credentials`` of the pipeline's
        ``source_conn``).
        """
        if pass_credentials is None:
            pass_credentials = self.pass_credentials
        if self.emulator_host:
            return SpannerConnection(
                project=project_id or "emulator-project",
                instance=instance_id,
                database=database_id,
                emulator_host=self.emulator_host,
            )
        project = project_id or self.project_id
        token = self._get_access_token() if pass_credentials else None
        return SpannerConnection(
            project=project, instance=instance_id, database=database_id, access_token=token
        )

    def get_database(self, instance_id: str, database_id: str, project_id: str | None = None):
        """A google.cloud.spanner Database on this hook's credentials (or the emulator)."""
        if self.emulator_host:
            return self.connection_for(instance_id, database_id, project_id).open_database()
        from google.cloud import spanner

        client = spanner.Client(
            project=project_id or self.project_id, credentials=self.get_credentials()
        )
        return client.instance(instance_id).database(database_id)
