"""The ``--py-files`` archive: ``airflow_cdc`` with its Spark jobs zipped for Spark drivers and executors.

Executors on a cluster have neither Airflow nor this package installed. Every job therefore ships
one zip holding the package and its Spark jobs (pure Python, no Airflow import on the Spark side), built once per
content: the name carries a hash of every file's path and bytes, so an unchanged tree reuses the
cached zip and a changed one can never be mistaken for it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
import threading
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from airflow_cdc.model import CdcError

# The Spark jobs are ``airflow_cdc.spark_jobs``: inside the package's folder once installed,
# the repository's ``spark_jobs/`` folder in a source checkout (a package-dir mapping).
PY_FILES_PACKAGES: tuple[str, ...] = ("airflow_cdc", "airflow_cdc.spark_jobs")
# A fixed timestamp makes the zip's bytes a function of the content alone.
_ZIP_DATE_TIME = (2020, 1, 1, 0, 0, 0)
_SKIPPED_DIRS = {"__pycache__"}
_SKIPPED_SUFFIXES = (".pyc", ".pyo")


class PackagingError(CdcError):
    """A package that must be shipped to Spark cannot be found."""


def py_files_cache_dir() -> Path:
    """Where built zips live: ``$AIRFLOW_CDC_PY_FILES_DIR`` or ``~/.cache/airflow-cdc/py-files``."""
    configured = os.environ.get("AIRFLOW_CDC_PY_FILES_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "airflow-cdc" / "py-files"


def package_dir(package: str) -> Path:
    """The folder of an importable package (its parents are imported, not the package)."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise PackagingError(
            f"package {package!r} is not importable from this interpreter, so it cannot be "
            f"shipped to Spark: install airflow-cdc (pip install airflow-cdc) or run from "
            f"the repository root"
        )
    return Path(locations[0])


def build_py_files(
    packages: Sequence[str] = PY_FILES_PACKAGES,
    cache_dir: Path | None = None,
    roots: Sequence[Path] | None = None,
) -> Path:
    """Return the path of a zip holding ``packages``; build it only if no zip of that content exists.

    ``roots`` (folders whose names are the package names) replaces the lookup of ``packages``
    by import; tests use it to package a tree of their own.
    """
    if roots is not None:
        folders = [(folder.name, folder) for folder in roots]
    else:
        folders = _shipped_folders([(name, package_dir(name)) for name in packages])
    entries = sorted(_entries(folders))
    digest = hashlib.sha256()
    for arcname, path in entries:
        digest.update(arcname.encode("utf-8") + b"\0")
        digest.update(path.read_bytes() if path is not None else b"<dir>")
        digest.update(b"\0")
    name = f"{folders[0][0].split('/')[0]}-{digest.hexdigest()[:16]}.zip"
    cache = cache_dir or py_files_cache_dir()
    if (cache / name).exists():
        return mark_used(cache / name)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        if cache_dir is not None:
            raise
        # Airflow workers may run with a read-only home: the temp folder still works.
        cache = Path(tempfile.gettempdir()) / "airflow-cdc-py-files"
        cache.mkdir(parents=True, exist_ok=True)
    target = cache / name
    if target.exists():
        return mark_used(target)
    # Built under a name of this process and thread, then renamed: a concurrent job never sees
    # half a zip, and two threads of one process (two tasks' jobs started at once) never
    # write, or rename away, each other's staging file.
    staging = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with zipfile.ZipFile(staging, "w", zipfile.ZIP_DEFLATED) as archive:
        for arcname, path in entries:
            info = zipfile.ZipInfo(arcname, date_time=_ZIP_DATE_TIME)
            if path is None:
                # Directory entries let zipimport find packages without __init__.py
                # (namespace packages) inside the zip.
                info.external_attr = (0o40755 << 16) | 0x10
                archive.writestr(info, b"")
            else:
                info.external_attr = 0o644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, path.read_bytes())
    os.replace(staging, target)
    prune_unused(cache, f"{name.rsplit('-', 1)[0]}-*.zip", keep=target)
    return target


# How long a cached build (a py-files zip, a driver's class archive) is kept unused.
STALE_AFTER_SECONDS = 7 * 86_400


def mark_used(path: Path) -> Path:
    """Mark ``path`` as just used (its mtime), so :func:`prune_unused` keeps it."""
    try:
        os.utime(path)
    except OSError:
        pass  # read-only cache: it is only pruned by whoever owns it
    return path


def prune_unused(folder: Path, pattern: str, keep: Path,
                 max_age_seconds: float = STALE_AFTER_SECONDS) -> list[Path]:
    """Remove the files of ``folder`` matching ``pattern`` other than ``keep`` that were not
    used (:func:`mark_used`) for ``max_age_seconds``: older builds, one per code change (zips)
    or per venv and Spark (class archives). Returns those removed."""
    import time

    cutoff = time.time() - max_age_seconds
    removed = []
    for old in folder.glob(pattern):
        try:
            if old != keep and old.stat().st_mtime < cutoff:
                old.unlink()
                removed.append(old)
        except OSError:
            pass  # another process removed or is replacing it
    return removed


def _shipped_folders(found: Sequence[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """(path inside the zip, folder) per package: a package whose folder is inside one already
    shipped (an installed ``airflow_cdc/spark_jobs``) ships with it, not a second time."""
    shipped: list[tuple[str, Path]] = []
    for name, folder in found:
        if not any(folder.resolve().is_relative_to(kept.resolve()) for _, kept in shipped):
            shipped.append((name.replace(".", "/"), folder))
    return shipped


def _entries(folders: Iterable[tuple[str, Path]]) -> Iterable[tuple[str, Path | None]]:
    """(name inside the zip, file or None for a folder) for every shipped file and folder."""
    for arcroot, folder in folders:
        if not folder.is_dir():
            raise PackagingError(f"{folder} is not a folder: cannot ship it as a package")
        yield f"{arcroot}/", None
        for current, dirnames, filenames in os.walk(folder):
            dirnames[:] = sorted(
                d for d in dirnames if d not in _SKIPPED_DIRS and not d.startswith(".")
            )
            relative = Path(arcroot) / Path(current).relative_to(folder)
            for dirname in dirnames:
                yield f"{(relative / dirname).as_posix()}/", None
            for filename in sorted(filenames):
                if filename.startswith(".") or filename.endswith(_SKIPPED_SUFFIXES):
                    continue
                yield (relative / filename).as_posix(), Path(current) / filename
