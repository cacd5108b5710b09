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
    """Finds the event files under a Datastream destination prefix."""

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
