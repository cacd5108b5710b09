"""Lists Datastream's event files: GCS through the google provider's GCSHook, or a local folder.

``gs://bucket/prefix`` is listed with ``GCSHook(gcp_conn_id=...)`` (any connection the google
provider accepts: key file, workload identity, impersonation, or ``is_anonymous`` against a
local GCS-compatible server via ``STORAGE_EMULATOR_HOST``). Anything else is a local folder,
for development. Listing is complete every time: there is no time-based look-back.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_cdc.sources.datastream.discovery import (
    EventFile,
    event_file_format,
    list_local_files,
)


def split_gcs_uri(uri: str) -> tuple[str, str]:
    """``gs://bucket/some/prefix`` -> (``bucket``, ``some/prefix``)."""
    rest = uri[len("gs://"):]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(
            f"Datastream prefix {uri!r} names no bucket: write it as gs://<bucket>/<prefix>"
        )
    return bucket, prefix


class DatastreamFilesHook:
    """Finds the event files under a Datastream destination prefix.

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

    def list_event_files(self, prefix: str) -> list[EventFile]:
        if not prefix.startswith("gs://"):
            return list_local_files(prefix)
        from airflow.providers.google.cloud.hooks.gcs import GCSHook

        bucket_name, object_prefix = split_gcs_uri(prefix)
        client = GCSHook(
            gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain
        ).get_conn()
        found = [
            EventFile(f"gs://{bucket_name}/{blob.name}", int(blob.size or 0), blob.updated)
            for blob in client.list_blobs(bucket_name, prefix=object_prefix or None)
            if event_file_format(blob.name) is not None
        ]
        return sorted(found, key=lambda f: f.path)

    def read_event_file(self, path: str) -> bytes:
        """The bytes of one listed event file (``gs://`` through GCSHook, else a local path)."""
        if not path.startswith("gs://"):
            from pathlib import Path

            return Path(path.removeprefix("file://")).read_bytes()
        from airflow.providers.google.cloud.hooks.gcs import GCSHook

        bucket_name, object_name = split_gcs_uri(path)
        return GCSHook(
            gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain
        ).download(bucket_name=bucket_name, object_name=object_name)


class DatastreamSourceHook(DatastreamFilesHook):
    """What Datastream's plan step needs of Airflow: the files (GCS or a local folder) and,
    with ``key_columns_conn_id``, the primary keys of source tables in the source database.

    :param gcp_conn_id: the Google Cloud connection.
    :param impersonation_chain: a service account to impersonate, or a chain of them.
    :param key_columns_conn_id: a connection to the source database whose primary keys are
        looked up (:class:`~airflow_cdc.hooks.source_keys.SourcePrimaryKeyHook`; None: none).
    """

    def __init__(
        self,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        key_columns_conn_id: str | None = None,
    ) -> None:
        super().__init__(gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain)
        self.key_columns_conn_id = key_columns_conn_id

    def primary_keys(self, tables: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
        """{table identifier: primary-key columns} of the ``(schema, table)`` that have one."""
        import logging

        from airflow_cdc.hooks.source_keys import SourcePrimaryKeyHook
        from airflow_cdc.sources.datastream.events import object_identifier

        if not self.key_columns_conn_id:
            raise ValueError(
                f"the primary keys of {[f'{s}.{t}' for s, t in tables]} are to be looked up, "
                f"but no key_columns_conn_id was given: name the connection to the source database"
            )
        found = SourcePrimaryKeyHook(self.key_columns_conn_id).primary_keys(list(tables))
        keyless = sorted(f"{schema}.{table}" for (schema, table), columns in found.items() if not columns)
        if keyless:
            logging.getLogger(__name__).warning(
                "source tables without a primary key in %s: %s; their events are keyed by "
                "Oracle ROWID (other sources refuse them): declare key_columns for them if "
                "they have a unique key", self.key_columns_conn_id, keyless,
            )
        return {
            object_identifier(f"{schema}.{table}"): columns
            for (schema, table), columns in found.items()
            if columns
        }
