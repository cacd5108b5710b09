"""Where a Kafka Connect sink's files are read on Spark: a local folder, or ``gs://`` through
``google-cloud-storage`` with the connection the Airflow side hands over (no Airflow here).

The connection is a plain dict (:func:`sink_access`): the Airflow side
(:class:`airflow_cdc.hooks.debezium.DebeziumSinkHook`) fills it in for the extract job with
a short-lived access token, or with a local GCS server's address; without either, Spark's
own Application Default Credentials are used. The token travels in the extract job's spec
only (:meth:`~airflow_cdc.sources.base.ChangeSource.extract_overrides`): never in a plan file,
never in a log.

The Airflow side reaches the same bucket through the google provider's GCSHook and hands its
client to :func:`client_access`, so both sides list and read, and fail, alike.

google-cloud-storage and google-auth are imported inside the functions that use them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from airflow_cdc.model import CdcError
from airflow_cdc.sources.debezium.layout import Lister, Reader, local_lister, local_reader

GS_SCHEME = "gs://"


class SinkStorageError(CdcError, LookupError):
    """The sink's bucket or file cannot be reached (missing, or no permission to read it)."""


class SinkFileMissingError(SinkStorageError, FileNotFoundError):
    """A sink file is not in the bucket (a local one raises FileNotFoundError itself)."""


def is_gs_uri(path: str) -> bool:
    return str(path).startswith(GS_SCHEME)


def split_gs_uri(uri: str) -> tuple[str, str]:
    """``gs://bucket/some/path`` -> (``bucket``, ``some/path``)."""
    bucket, _, object_path = str(uri)[len(GS_SCHEME):].partition("/")
    if not is_gs_uri(uri) or not bucket:
        raise SinkStorageError(
            f"sink path {uri!r} names no bucket: write it as gs://<bucket>/<path>"
        )
    return bucket, object_path


def sink_access(prefix: str, connection: Mapping[str, Any] | None = None) -> tuple[Lister, Reader]:
    """The :data:`~.layout.Lister` and :data:`~.layout.Reader` of the sink at ``prefix``.

    A local prefix gets :func:`~.layout.local_lister` and :func:`~.layout.local_reader`. A
    ``gs://`` prefix gets functions over one ``google.cloud.storage.Client`` built from
    ``connection`` (``{"project", "access_token", "emulator_host"}``, each may be None):

    * ``emulator_host``: anonymous credentials against that endpoint (a local GCS server);
    * else ``access_token``: that token (the Airflow side minted it for this job);
    * else Application Default Credentials of the machine.
    """
    if not is_gs_uri(prefix):
        return local_lister, local_reader
    split_gs_uri(prefix)  # refuse a prefix without bucket before any client is built
    return client_access(_storage_client(connection or {}))


def client_access(client: Any) -> tuple[Lister, Reader]:
    """The :data:`~.layout.Lister` and :data:`~.layout.Reader` of ``gs://`` paths through a
    ``google.cloud.storage.Client`` (the Airflow side passes GCSHook's)."""

    def list_objects(prefix: str) -> list[str]:
        bucket, object_prefix = split_gs_uri(prefix)
        with _reaching(prefix, "list"):
            names = [blob.name for blob in client.list_blobs(bucket, prefix=object_prefix or None)]
        # Consoles and gsutil leave zero-byte "folder/" markers: they are no files.
        return sorted(f"{GS_SCHEME}{bucket}/{name}" for name in names if not name.endswith("/"))

    def read_object(path: str) -> bytes:
        bucket, object_name = split_gs_uri(path)
        with _reaching(path, "read"):
            return client.bucket(bucket).blob(object_name).download_as_bytes()

    return list_objects, read_object


def _storage_client(connection: Mapping[str, Any]):
    from google.cloud import storage

    project = connection.get("project") or None
    emulator_host = connection.get("emulator_host")
    if emulator_host:
        from google.auth.credentials import AnonymousCredentials

        endpoint = emulator_host if "://" in emulator_host else f"http://{emulator_host}"
        return storage.Client(project=project, credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": endpoint})
    token = connection.get("access_token")
    if token:
        from google.oauth2.credentials import Credentials

        return storage.Client(project=project, credentials=Credentials(token))
    return storage.Client(project=project)


@contextmanager
def _reaching(path: str, action: str) -> Iterator[None]:
    """Turns the client's NotFound / Forbidden while reaching ``path`` into
    :class:`SinkStorageError` naming the path and the fix."""
    from google.api_core import exceptions

    bucket, _ = split_gs_uri(path)
    try:
        yield
    except exceptions.NotFound as error:
        if action == "list":
            raise SinkStorageError(
                f"cannot list the Debezium sink at {path}: bucket {bucket!r} does not exist "
                f"({error.message}); check the stream's prefix against the sink connector's "
                f"gcs.bucket.name"
            ) from None
        raise SinkFileMissingError(
            f"cannot read the Debezium sink file {path}: it does not exist ({error.message}); "
            f"sink files must stay until the windows reading them have committed (check the "
            f"bucket's lifecycle and retention rules)"
        ) from None
    except exceptions.Forbidden as error:
        raise SinkStorageError(
            f"cannot {action} the Debezium sink at {path}: permission denied ({error.message}); "
            f"grant the connection's account roles/storage.objectViewer on bucket {bucket!r}"
        ) from None
