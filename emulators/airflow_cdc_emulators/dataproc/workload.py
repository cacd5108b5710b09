"""A PySpark workload as Dataproc describes it, turned into a local ``spark-submit`` command.

Jobs (``Job.pyspark_job``) and batches (``Batch.pyspark_batch`` with
``runtime_config.properties``) carry the same fields; both become a :class:`PySparkWorkload`.
URIs are read from this machine: ``file://`` URIs and plain paths as they are, ``gs://b/p`` as
``<gcs_dir>/b/p`` when the emulator has a ``gcs_dir`` (a local stand-in for Cloud Storage);
other schemes are refused with INVALID_ARGUMENT. A file that does not exist is not an argument
error: the real service accepts the request and the job fails, so does the emulator.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from urllib.parse import unquote, urlparse

from .errors import invalid_argument, required


def find_spark_submit(explicit: str | None = None) -> str:
    """``explicit``, else the ``spark-submit`` inside this interpreter's pyspark, else PATH's.

    pyspark's own copy (not the venv's ``bin/`` one, which asks ``python3`` from PATH where
    Spark lives); pyspark is located, never imported.
    """
    if explicit:
        return explicit
    spec = find_spec("pyspark")
    if spec is not None and spec.origin is not None:
        inside = Path(spec.origin).parent / "bin" / "spark-submit"
        if inside.is_file():
            return str(inside)
    found = shutil.which("spark-submit")
    if found is None:
        raise FileNotFoundError(
            "spark-submit was found neither in this interpreter's pyspark nor on PATH: install "
            "pyspark here or pass spark_submit='/path/to/spark-submit' (--spark-submit)"
        )
    return found


@dataclass(frozen=True)
class PySparkWorkload:
    """What ``spark-submit`` needs of a ``pyspark_job`` or ``pyspark_batch``."""

    main_python_file_uri: str
    args: tuple[str, ...] = ()
    python_file_uris: tuple[str, ...] = ()
    jar_file_uris: tuple[str, ...] = ()
    file_uris: tuple[str, ...] = ()
    archive_uris: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_message(
        cls, message, properties: Mapping[str, str], prefix: str, gcs_dir: Path | None
    ) -> PySparkWorkload:
        """From a ``PySparkJob`` or ``PySparkBatch`` whose fields sit under ``prefix``.

        Raises INVALID_ARGUMENT naming the field for a missing or non-``.py`` main file and for
        URIs this machine cannot read.
        """
        main_field = f"{prefix}.main_python_file_uri"
        if not message.main_python_file_uri:
            raise required(main_field)
        if not message.main_python_file_uri.endswith(".py"):
            raise invalid_argument(
                main_field, message.main_python_file_uri, "the main file must be a .py file"
            )
        workload = cls(
            main_python_file_uri=message.main_python_file_uri,
            args=tuple(message.args),
            python_file_uris=tuple(message.python_file_uris),
            jar_file_uris=tuple(message.jar_file_uris),
            file_uris=tuple(message.file_uris),
            archive_uris=tuple(message.archive_uris),
            properties=dict(properties),
        )
        for name, uri in workload.uris(prefix):
            local_path(uri, name, gcs_dir)  # refuse unreadable schemes at submission
        return workload

    def uris(self, prefix: str) -> Iterable[tuple[str, str]]:
        """(field name, URI) of every file the workload names."""
        yield f"{prefix}.main_python_file_uri", self.main_python_file_uri
        for name in ("python_file_uris", "jar_file_uris", "file_uris", "archive_uris"):
            for index, uri in enumerate(getattr(self, name)):
                yield f"{prefix}.{name}[{index}]", uri

    def command(
        self, spark_submit: str, master: str, app_name: str, gcs_dir: Path | None
    ) -> list[str]:
        """The ``spark-submit`` command line running this workload on ``master``."""

        def paths(uris: tuple[str, ...], name: str) -> str:
            # ``#alias`` (the name an archive or file gets in the working directory) is kept
            return ",".join(
                str(local_path(uri, name, gcs_dir))
                + (f"#{urlparse(uri).fragment}" if urlparse(uri).fragment else "")
                for uri in uris
            )

        command = [spark_submit, "--master", master, "--name", app_name]
        for key, value in sorted(self.properties.items()):
            command += ["--conf", f"{key}={value}"]
        for option, name in (
            ("--py-files", "python_file_uris"),
            ("--jars", "jar_file_uris"),
            ("--files", "file_uris"),
            ("--archives", "archive_uris"),
        ):
            uris = getattr(self, name)
            if uris:
                command += [option, paths(uris, name)]
        main = local_path(self.main_python_file_uri, "main_python_file_uri", gcs_dir)
        return [*command, str(main), *self.args]

    def missing_files(self, gcs_dir: Path | None) -> list[str]:
        """URIs of the workload whose local file does not exist."""
        return [
            uri
            for name, uri in self.uris("workload")
            if not local_path(uri, name, gcs_dir).exists()
        ]


def local_path(uri: str, field_name: str, gcs_dir: Path | None) -> Path:
    """The file on this machine that ``uri`` names (without its ``#alias``)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
            raise invalid_argument(
                field_name, uri, "a file URI names a local path: file:///absolute/path"
            )
        return Path(unquote(parsed.path))
    if parsed.scheme == "gs":
        if gcs_dir is None and os.environ.get("STORAGE_EMULATOR_HOST"):
            return fetched_from_gcs(uri)
        if gcs_dir is None:
            raise invalid_argument(
                field_name,
                uri,
                "the emulator reads gs:// URIs from a GCS emulator (set STORAGE_EMULATOR_HOST) "
                "or from a local folder: start it with gcs_dir=... (--gcs-dir DIR, "
                "gs://bucket/path is then DIR/bucket/path), or use file:// URIs",
            )
        return gcs_dir / parsed.netloc / unquote(parsed.path).lstrip("/")
    raise invalid_argument(
        field_name, uri, "the emulator reads file://, plain local paths and gs:// (with gcs_dir)"
    )


def fetched_from_gcs(uri: str) -> Path:
    """A local copy of the object ``uri`` on the GCS emulator at ``$STORAGE_EMULATOR_HOST``
    (Dataproc copies a job's gs:// files to the driver's disk the same way); fetched again
    when the object's size changed."""
    # gcsfs's plain JSON-API filesystem is what an emulator speaks; its default one first
    # probes the bucket's layout over gRPC (Storage Control), which no emulator answers.
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    from gcsfs.core import GCSFileSystem

    parsed = urlparse(uri)
    storage = GCSFileSystem(token="anon")
    source = f"{parsed.netloc}{parsed.path}"
    target = Path(tempfile.gettempdir()) / "dataproc-emulator-gcs" / parsed.netloc / \
        unquote(parsed.path).lstrip("/")
    size = storage.size(source)
    if not target.exists() or target.stat().st_size != size:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}.part")
        partial.write_bytes(storage.cat_file(source))
        os.replace(partial, target)
    return target
