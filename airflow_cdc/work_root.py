"""Where the hand-over files live: a local folder (the default) or a URI both sides can reach.

Airflow tasks write plan, job and secret files and read outcome and result files; Spark jobs
read the former and write the latter. On one machine a folder does (``AIRFLOW_CDC_WORK_ROOT``
or ``$AIRFLOW_HOME/cdc_work``). When the Spark driver runs elsewhere (Dataproc, a cluster the
Airflow workers cannot see), the work root is a URI both reach: ``gs://bucket/prefix``,
``s3://...``, ``abfs://...``, any protocol fsspec knows (gcsfs, s3fs, adlfs installed), or
``memory://`` in tests.

:func:`work_path` gives a path object for both: :class:`pathlib.Path` for a folder, a
``universal_pathlib`` ``UPath`` for a URI, with the same ``/``, ``read_text``,
``write_text``, ``exists``, ``unlink`` and ``mkdir``. Against a local GCS emulator
(``STORAGE_EMULATOR_HOST``) ``gs://`` needs no credentials; gcsfs's hierarchical-namespace
probe, a gRPC call an emulator does not answer (60 s of retries per bucket), is turned off.

No Airflow or pyspark import: Spark drivers use it too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

LOCAL_PROTOCOLS = ("", "file", "local")
STORAGE_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"


def protocol_of(location: str | os.PathLike) -> str:
    """``gs`` for ``gs://b/p``; ``""`` for a plain path (``file://`` counts as local)."""
    text = str(location)
    head, sep, _ = text.partition("://")
    if not sep or "/" in head:
        return ""
    return "" if head == "file" else head.lower()


def is_local(location: str | os.PathLike) -> bool:
    path_protocol = getattr(location, "protocol", None)  # a UPath knows its own
    if path_protocol is not None:
        return path_protocol in LOCAL_PROTOCOLS
    return protocol_of(location) in LOCAL_PROTOCOLS


def storage_options(protocol: str) -> dict[str, Any]:
    """What fsspec needs beyond the URI: anonymous access to a local GCS emulator."""
    if protocol in ("gs", "gcs") and os.environ.get(STORAGE_EMULATOR_ENV):
        # gcsfs's default (extended) filesystem first probes a bucket's layout over gRPC
        # (Storage Control), which an emulator never answers: 60 s of retries per bucket.
        # Its plain JSON-API filesystem is what an emulator speaks, whatever imported gcsfs
        # first (the environment switch is read only at gcsfs's import).
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        import fsspec

        for name in ("gs", "gcs"):
            fsspec.register_implementation(name, "gcsfs.core.GCSFileSystem", clobber=True)
        return {"token": "anon"}
    return {}


def work_path(root: str | os.PathLike, *parts: str):
    """``root`` joined with ``parts``: a Path for a folder, a UPath for a URI."""
    if is_local(root):
        text = str(root)
        return Path(text[len("file://"):] if text.startswith("file://") else text, *parts)
    if not isinstance(root, (str, os.PathLike)) or hasattr(root, "protocol"):
        return root.joinpath(*parts)  # already a UPath
    from upath import UPath

    return UPath(str(root), **storage_options(protocol_of(root))).joinpath(*parts)


def _object(location):
    """(fsspec filesystem, path) of a URI (plain fsspec: Spark drivers need no universal_pathlib)."""
    import fsspec

    return fsspec.core.url_to_fs(str(location), **storage_options(protocol_of(location)))


def read_text(location: str | os.PathLike) -> str:
    if is_local(location):
        return work_path(location).read_text()
    fs, path = _object(location)
    return fs.cat_file(path).decode("utf-8")


def write_text(location: str | os.PathLike, text: str, *, private: bool = False) -> None:
    """Write ``text`` whole: a local file atomically (``private``: readable by its owner
    only, 0600), an object in one upload (whole or not at all; its access is the bucket's)."""
    target = work_path(location)
    if isinstance(target, Path):
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(staging, target)
        return
    fs, path = _object(location)
    fs.pipe_file(path, text.encode("utf-8"))


def remove(location: str | os.PathLike) -> None:
    """Delete the file if it exists."""
    if is_local(location):
        work_path(location).unlink(missing_ok=True)
        return
    fs, path = _object(location)
    if fs.exists(path):
        fs.rm_file(path)


def fsspec_can_open(location: str | os.PathLike) -> bool:
    """Whether fsspec has an implementation for ``location``'s protocol importable here (a
    Spark driver without one reads the URI through Hadoop's filesystems instead)."""
    protocol = protocol_of(location)
    if protocol in LOCAL_PROTOCOLS:
        return True
    storage_options(protocol)
    try:
        import fsspec

        fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError):
        return False
    return True
