"""Finding event files: list the prefix, keep settled files, make them partitions.

There is never a time-based look-back: every listed file not yet known to the state store
becomes a partition of the next window (partition id = file path), so a file that arrives
late is read by the next window, and a re-run of a window reads exactly its recorded files.
A file changed less than ``settle_seconds`` before planning may still be being written: it
waits for the next window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow_cdc.model import CdcError, PartitionPosition, ensure_utc
from airflow_cdc.sources.read_errors import walk_files

EVENT_FILE_SUFFIXES = {".jsonl": "json", ".json": "json", ".avro": "avro"}


class EventFileError(CdcError, ValueError):
    pass


@dataclass(frozen=True)
class EventFile:
    """One listed object: its full path (``gs://b/o`` or a local path), size and update time."""

    path: str
    size: int
    updated: datetime

    @property
    def file_format(self) -> str | None:
        return event_file_format(self.path)


def event_file_format(path: str) -> str | None:
    """``json`` or ``avro`` by suffix; None for anything else (never an event file)."""
    name = path.rsplit("/", 1)[-1].lower()
    for suffix, kind in EVENT_FILE_SUFFIXES.items():
        if name.endswith(suffix):
            return kind
    return None


def list_local_files(prefix: str) -> list[EventFile]:
    """Every event file under the local folder ``prefix`` (``file://`` allowed)."""
    root = Path(prefix.removeprefix("file://"))
    if not root.is_dir():
        raise EventFileError(
            f"Datastream prefix {prefix!r} is not a folder: give the folder Datastream writes "
            f"into (or a gs://bucket/prefix with a gcp_conn_id)"
        )
    found = []
    for path in walk_files(root, f"Datastream prefix {prefix!r}"):
        if path.name.startswith(".") or event_file_format(path.name) is None:
            continue
        stat = path.stat()
        found.append(
            EventFile(str(path), stat.st_size, datetime.fromtimestamp(stat.st_mtime, tz=timezone.utc))
        )
    return sorted(found, key=lambda f: f.path)


def settled_files(files: list[EventFile], now: datetime, settle_seconds: float) -> list[EventFile]:
    """The files last changed at least ``settle_seconds`` before ``now``."""
    cutoff = ensure_utc("now", now) - timedelta(seconds=settle_seconds)
    return [f for f in files if f.file_format and f.size > 0 and f.updated <= cutoff]


def file_partitions(files: list[EventFile], start: datetime) -> list[PartitionPosition]:
    """One partition per file; its format travels as the resume position."""
    return [
        PartitionPosition(partition_id=f.path, start=start, resume_position=f.file_format)
        for f in files
    ]
