"""Hook for Spanner change streams on the google provider's credentials.

Credentials come from ``gcp_conn_id`` (and ``impersonation_chain``) as for every Google
operator. ``SPANNER_EMULATOR_HOST`` (or ``emulator_host``) points everything at a local
emulator with anonymous credentials instead, like Google's own client does.
"""

from __future__ import annotations

from airflow_cdc.hooks.google import EmulatorAwareGoogleHook
from airflow_cdc.sources.spanner.reader import SpannerConnection


class SpannerChangeStreamHook(EmulatorAwareGoogleHook):
    """Builds the connection Spark tasks use to read a change stream.

    Its parameters are :class:`~airflow_cdc.hooks.google.EmulatorAwareGoogleHook`'s.
    """

    emulator_env = "SPANNER_EMULATOR_HOST"

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
        if self.emulator_host:
            return SpannerConnection(
                project=project_id or "emulator-project",
                instance=instance_id,
                database=database_id,
                emulator_host=self.emulator_host,
            )
        return SpannerConnection(
            project=project_id or self.project_id, instance=instance_id, database=database_id,
            access_token=self.access_token_for_job(pass_credentials),
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


# A re-seed request of a commit-timestamp stream: an Airflow Variable holding the JSON list of
# the instants to re-seed at (SpannerCommitTimestampReseedOperator appends; the plan reads).
RESEED_VARIABLE = "airflow_cdc_reseed__{stream_id}"


class SpannerDatabaseHook(SpannerChangeStreamHook):
    """A Spanner database for the commit-timestamp source: the schema, the retention, and the
    re-seed requests of its streams (kept as Airflow Variables, visible in the UI).

    Its parameters are :class:`~airflow_cdc.hooks.google.EmulatorAwareGoogleHook`'s.
    """

    def reseed_requests(self, stream_id: str) -> list:
        """The instants re-seeds were requested at for ``stream_id`` (oldest first)."""
        import json

        from airflow.sdk import Variable

        from airflow_cdc.model import parse_ts

        text = Variable.get(RESEED_VARIABLE.format(stream_id=stream_id), default=None)
        return sorted(parse_ts(at) for at in json.loads(text)) if text else []

    def request_reseed(self, stream_id: str, at) -> list:
        """Add a re-seed at ``at`` for ``stream_id``; returns every requested instant."""
        import json

        from airflow.sdk import Variable

        from airflow_cdc.model import format_ts

        instants = sorted({format_ts(a) for a in (*self.reseed_requests(stream_id), at)})
        Variable.set(RESEED_VARIABLE.format(stream_id=stream_id), json.dumps(instants),
                     description=f"airflow-cdc: re-seed requests of stream {stream_id}")
        return instants
