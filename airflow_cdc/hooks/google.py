"""The google provider's credentials, or a local emulator's none: what Google sources share.

Credentials come from ``gcp_conn_id`` (and ``impersonation_chain``) as for every Google
operator. An emulator host (``emulator_host``, else the source's environment variable such
as ``SPANNER_EMULATOR_HOST`` or ``BIGTABLE_EMULATOR_HOST``) points everything at a local
emulator with anonymous credentials instead, as Google's own clients do.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import ClassVar

from airflow.providers.common.compat.sdk import BaseHook
from airflow.providers.google.common.hooks.base_google import GoogleBaseHook


class EmulatorAwareGoogleHook(GoogleBaseHook):
    """A GoogleBaseHook that needs no connection when an emulator is named.

    :param gcp_conn_id: the Google Cloud connection.
    :param impersonation_chain: a service account to impersonate, or a chain of them.
    :param emulator_host: the emulator's ``host:port`` (None: the service's emulator
        environment variable, :attr:`emulator_env`, if set).
    :param pass_credentials: hand a short-lived access token of the connection to Spark jobs
        (False: executors use their own Application Default Credentials).
    """

    #: The environment variable Google's client reads for this service's emulator.
    emulator_env: ClassVar[str] = ""

    def __init__(
        self,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        emulator_host: str | None = None,
        pass_credentials: bool = True,
        **kwargs,
    ) -> None:
        self.pass_credentials = pass_credentials
        self.emulator_host = emulator_host or os.environ.get(self.emulator_env) or None
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

    def access_token_for_job(self, pass_credentials: bool | None = None) -> str | None:
        """A short-lived token for a Spark job (None on an emulator or without
        ``pass_credentials``: executors then use their own Application Default Credentials).
        It travels in the job's 0600 file, never on a command line or in a log."""
        if pass_credentials is None:
            pass_credentials = self.pass_credentials
        if self.emulator_host or not pass_credentials:
            return None
        return self._get_access_token()
