"""Hook for Bigtable change streams on the google provider's credentials (or an emulator,
``BIGTABLE_EMULATOR_HOST``): what the plan, the readiness probe and Spark tasks connect with."""

from __future__ import annotations

from airflow_cdc.hooks.google import EmulatorAwareGoogleHook
from airflow_cdc.sources.bigtable.connection import BigtableConnection


class BigtableChangeStreamHook(EmulatorAwareGoogleHook):
    """Builds the connection Spark tasks and the readiness probe use to read a change stream.

    Its parameters are :class:`~airflow_cdc.hooks.google.EmulatorAwareGoogleHook`'s.
    """

    emulator_env = "BIGTABLE_EMULATOR_HOST"

    def connection_for(
        self, instance_id: str, table_id: str, app_profile_id: str = "",
        project_id: str | None = None, pass_credentials: bool | None = None,
    ) -> BigtableConnection:
        if self.emulator_host:
            return BigtableConnection(
                project=project_id or "emulator-project", instance=instance_id, table=table_id,
                app_profile=app_profile_id, emulator_host=self.emulator_host,
            )
        return BigtableConnection(
            project=project_id or self.project_id, instance=instance_id, table=table_id,
            app_profile=app_profile_id, access_token=self.access_token_for_job(pass_credentials),
        )
