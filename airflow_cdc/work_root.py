"""Where the hand-over files live: a local folder (the default) or a URI both sides can reach.

Airflow tasks write plan, job and secret files and read outcome and result files; Spark jobs
read the former and write the latter. On one machine a folder does (``AIRFLOW_CDC_WORK_ROOT``
or ``$AIRFLOW_HOME/cdc_work``). When the Spark driver runs elsewhere (Dataproc, a cluster the
Airflow workers cannot see), the work root is a URI both reach: ``gs://bucket/prefix``,
``s3://...``, ``abfs://...``, any protocol fsspec knows (gcsfs, s3fs, adlfs installed), or
``memory://`` in tests.

A work root is kept whole: ``gs://b/p``, ``s3://b/p``, ``abfss://c@account.dfs.core.windows.net/p``
and ``hdfs://namenode:8020/p`` name their bucket, account or name node in the URI, and the
Spark job is handed the very text the Airflow side wrote to (a path object that re-spells the
URI from parsed parts drops ``@account`` or ``namenode:8020``, and the job then reads another
place). ``file:`` URIs (``file:///x``, ``file:/x``, ``file://localhost/x``) are local folders.

:func:`work_path` gives a path object for both: :class:`pathlib.Path` for a folder, an
:class:`ObjectPath` for a URI, with the same ``/``, ``name``, ``parent``, ``read_text``,
``write_text``, ``exists``, ``unlink`` and ``mkdir``. Against a local GCS emulator
(``STORAGE_EMULATOR_HOST``) ``gs://`` needs no credentials; gcsfs's hierarchical-namespace
probe, a gRPC call an emulator does not answer (60 s of retries per bucket), is turned off.

No Airflow or pyspark import: Spark drivers use it too.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

LOCAL_PROTOCOLS = ("", "file", "local")
OBJECT_STORE_PROTOCOLS = frozenset(
    {"gs", "gcs", "s3", "s3a", "abfs", "abfss", "az", "adl", "wasb", "wasbs", "memory"}
)
STORAGE_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"


def protocol_of(location: str | os.PathLike) -> str:
    """``gs`` for ``gs://b/p``; ``""`` for a plain path (``file://`` counts as local)."""
    text = str(location)
    head, sep, _ = text.partition("://")
    if not sep or "/" in head:
        return ""
    return "" if head == "file" else head.lower()


# A scheme followed by ":" but not "//" (``gs:/bucket``): a URI that lost a slash, which a
# path would take for a folder named ``gs:`` under the working directory. One letter is a
# Windows drive (``C:``); ``file:/x`` is a local file URI.
_HALF_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):(?!//)")


def refuse_half_uri(what: str, location: str | os.PathLike) -> None:
    """Raise if ``location`` names a scheme without ``//`` (``gs:/bucket``); ``what`` says
    whose location it is (``"Iceberg catalog 'lake' has warehouse"``)."""
    text = str(location)
    half = _HALF_URI.match(text)
    if half and half.group(1).lower() != "file":
        scheme = half.group(1)
        raise ValueError(
            f"{what} {text!r}, which names scheme {scheme!r} without '//': write the whole "
            f"URI, e.g. '{scheme}://{text[len(scheme) + 1:].lstrip('/')}' (as a path it would "
            f"be a local folder named '{scheme}:')"
        )


def is_local(location: str | os.PathLike) -> bool:
    path_protocol = getattr(location, "protocol", None)  # an ObjectPath knows its own
    if path_protocol is not None:
        return path_protocol in LOCAL_PROTOCOLS
    return protocol_of(location) in LOCAL_PROTOCOLS


def local_path(location: str | os.PathLike) -> Path:
    """A local location as a Path: a plain path as it is; ``file:///x``, ``file:/x`` and
    ``file://localhost/x`` (RFC 8089: an empty or ``localhost`` authority is this machine)
    as ``/x``. Any other ``file://host/`` names another machine, which a Path cannot reach."""
    text = os.fspath(location)
    if not text.startswith("file:"):
        return Path(text)
    rest = text[len("file:"):]
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        if host not in ("", "localhost"):
            raise ValueError(
                f"location {text!r} names host {host!r}: a file: URI here must be on this "
                f"machine (file:///path or file://localhost/path); use a shared file system's "
                f"own URI (hdfs://, gs://, s3://) for another machine"
            )
        rest = slash + path
    return Path(unquote(rest))


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
    """``root`` joined with ``parts``: a Path for a folder, an :class:`ObjectPath` for a URI."""
    if isinstance(root, ObjectPath):
        return root.joinpath(*parts)
    if is_local(root):
        if not isinstance(root, Path):
            refuse_half_uri("work root", root)
        return local_path(root).joinpath(*parts)
    return ObjectPath(os.fspath(root)).joinpath(*parts)


@dataclass(frozen=True)
class _ObjectStat:
    st_size: int


class ObjectPath:
    """A file under a URI work root, spelled exactly as given: ``str()`` is the root's text
    with ``/part`` appended per part, so the job reads the object the task wrote. Reads and
    writes go through fsspec, which parses the whole URI (account, name node and port)."""

    def __init__(self, uri: str) -> None:
        protocol = protocol_of(uri)
        if protocol in LOCAL_PROTOCOLS:
            raise ValueError(f"ObjectPath {uri!r} is a local path: use work_path() for it")
        self.protocol = protocol
        self._uri = uri

    def __str__(self) -> str:
        return self._uri

    def __repr__(self) -> str:
        return f"ObjectPath({self._uri!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and other._uri == self._uri

    def __hash__(self) -> int:
        return hash(self._uri)

    def __truediv__(self, part: str) -> ObjectPath:
        return self.joinpath(part)

    def joinpath(self, *parts: str) -> ObjectPath:
        uri = self._uri
        for part in parts:
            part = str(part).strip("/")
            if part:
                uri = f"{uri.rstrip('/')}/{part}"
        return ObjectPath(uri)

    @property
    def name(self) -> str:
        return self._uri.rstrip("/").rpartition("/")[2]

    @property
    def parent(self) -> ObjectPath:
        """The folder above; the root of the bucket (``gs://b``) is its own parent."""
        head, _, tail = self._uri.rstrip("/").rpartition("/")
        if not tail or head.endswith(":/"):  # "gs://b": no folder above the bucket
            return self
        return ObjectPath(head)

    def with_name(self, name: str) -> ObjectPath:
        return self.parent / name

    def _fs(self):
        return _object(self._uri)

    def read_bytes(self) -> bytes:
        fs, path = self._fs()
        return fs.cat_file(path)

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def write_bytes(self, data: bytes) -> None:
        fs, path = self._fs()
        fs.pipe_file(path, data)

    def write_text(self, text: str, encoding: str = "utf-8") -> None:
        self.write_bytes(text.encode(encoding))

    def exists(self) -> bool:
        fs, path = self._fs()
        return fs.exists(path)

    def unlink(self, missing_ok: bool = False) -> None:
        fs, path = self._fs()
        if fs.exists(path):
            fs.rm_file(path)
        elif not missing_ok:
            raise FileNotFoundError(self._uri)

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Object stores have no folders to make (an object's name holds its path, and
        fsspec's makedirs there may create a bucket); a file system behind a URI (hdfs) makes
        them."""
        if self.protocol in OBJECT_STORE_PROTOCOLS:
            return
        fs, path = self._fs()
        fs.makedirs(path, exist_ok=True)

    def stat(self) -> _ObjectStat:
        fs, path = self._fs()
        return _ObjectStat(int(fs.info(path)["size"]))

    @property
    def suffix(self) -> str:
        dot = self.name.rfind(".")
        return self.name[dot:] if dot > 0 else ""

    def is_file(self) -> bool:
        fs, path = self._fs()
        return fs.isfile(path)

    def is_dir(self) -> bool:
        fs, path = self._fs()
        return fs.isdir(path)

    def _found(self, fs, root: str, found: list[str]) -> list[ObjectPath]:
        """fsspec's paths below this one (spelled without the URI's scheme and account) as
        ObjectPaths under this URI's own text."""
        root = root.rstrip("/")
        return [self.joinpath(p[len(root):]) for p in sorted(found) if p.startswith(root + "/")]

    def iterdir(self) -> list[ObjectPath]:
        fs, path = self._fs()
        return self._found(fs, path, fs.ls(path, detail=False) if fs.isdir(path) else [])

    def glob(self, pattern: str) -> list[ObjectPath]:
        fs, path = self._fs()
        return self._found(fs, path, fs.glob(f"{path.rstrip('/')}/{pattern}"))

    def rglob(self, pattern: str) -> list[ObjectPath]:
        fs, path = self._fs()
        return self._found(fs, path, fs.glob(f"{path.rstrip('/')}/**/{pattern}"))


def _object(location):
    """(fsspec filesystem, path) of a URI; fsspec parses the whole URI (bucket, account, host)."""
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
