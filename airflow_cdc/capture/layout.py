"""The file layout a Kafka Connect object-storage sink (Confluent S3/GCS sink) writes, on a folder.

::

    <output>/topics/<topic>/partition=<p>/<topic>+<p>+<startOffset>.json[.gz]
    <output>/_offsets/<topic>/partition=<p>.json     {"next_offset": n, "file": ...}
    <output>/_tmp/...                                 files being written (never read)

* One JSON value per line, exactly the text the record's converter produced; a Kafka
  tombstone (null value) is the line ``null``.
* ``startOffset`` is the offset of the file's first record, zero-padded to 10 digits like the
  Confluent sinks' default (``filename.offset.zero.pad.width=10``); readers parse it as an int.
  Offsets increase by one per record and per topic-partition, with no gap between files.
* A file is written under ``_tmp/``, fsync'ed, then renamed to its final name: a name under
  ``topics/`` is always a complete file. A file closes after ``flush_size`` records or when it
  has been open ``rotate_interval_ms`` (wall clock, like ``rotate.schedule.interval.ms``).
* After each file, the next offset of its topic-partition is written (atomically) under
  ``_offsets/``. On start the writer also reads the newest file of each topic-partition and
  continues after it, so a crash between the rename and the offsets write never reuses an offset.
* Partition of a record: an explicit partition on the record wins; else 0 with one partition
  (the default); else Kafka's default partitioner on the key's converted bytes
  (``murmur2(key) & 0x7fffffff % partitions``, :func:`murmur2` is Kafka's
  ``Utils.murmur2``). A record without a key goes to partition 0 (Kafka would spread such
  records with its sticky partitioner; a fixed partition keeps the layout deterministic).

Only the standard library: no Java here.
"""

from __future__ import annotations

import gzip as gzip_module
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from airflow_cdc.model import CdcError

PAD_WIDTH = 10
# Kafka's legal topic characters; also keeps a topic from escaping the output folder.
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class LayoutError(CdcError, ValueError):
    """The sink layout cannot be written as asked (a bad topic, partition or setting)."""


def murmur2(data: bytes) -> int:
    """Kafka's ``org.apache.kafka.common.utils.Utils.murmur2``, as a signed 32-bit int."""
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(length // 4):
        k = int.from_bytes(data[i * 4 : i * 4 + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length & ~3
    rest = length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: str | bytes | None, partitions: int) -> int:
    """Kafka's default partitioner for a keyed record; partition 0 without a key."""
    if partitions <= 1 or key is None:
        return 0
    data = key.encode("utf-8") if isinstance(key, str) else key
    return (murmur2(data) & 0x7FFFFFFF) % partitions


def file_name(topic: str, partition: int, start_offset: int, gzip: bool = False) -> str:
    return f"{topic}+{partition}+{start_offset:0{PAD_WIDTH}d}.json" + (".gz" if gzip else "")


_FILE = re.compile(r"^(?P<topic>.+)\+(?P<partition>\d+)\+(?P<offset>\d+)\.json(?P<gz>\.gz)?$")


def parse_file_name(name: str) -> tuple[str, int, int] | None:
    """(topic, partition, start offset) of a sink file name; None for other names."""
    match = _FILE.match(name)
    if not match:
        return None
    return match["topic"], int(match["partition"]), int(match["offset"])


def read_lines(path: str | Path) -> list[str]:
    """The lines (JSON texts) of one sink file, gzip or not."""
    path = Path(path)
    opener = gzip_module.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle if line.strip()]


@dataclass(frozen=True)
class FileId:
    """One sink file: a topic-partition and the offset of its first record."""

    topic: str
    partition: int
    start_offset: int


@dataclass(frozen=True)
class WrittenFile:
    """A file that reached its final name."""

    topic: str
    partition: int
    start_offset: int
    records: int
    path: Path


@dataclass
class _OpenFile:
    file_id: FileId
    tmp_path: Path
    handle: object
    opened_at: float
    records: int = 0


@dataclass
class LayoutStats:
    records: dict[str, int] = field(default_factory=dict)  # per topic
    files: list[WrittenFile] = field(default_factory=list)


class SinkLayoutWriter:
    """Appends records per topic-partition and closes files by size or age (see module doc).

    Not thread safe: the caller serialises :meth:`append`, :meth:`rotate_due` and :meth:`close`.
    """

    def __init__(
        self,
        output: str | Path,
        *,
        flush_size: int = 1000,
        rotate_interval_ms: int | None = 10_000,
        partitions: int = 1,
        gzip: bool = False,
        clock=time.monotonic,
    ):
        if not isinstance(flush_size, int) or flush_size < 1:
            raise LayoutError(f"flush_size={flush_size!r}: must be an integer >= 1 (records per file)")
        if rotate_interval_ms is not None and (not isinstance(rotate_interval_ms, int) or rotate_interval_ms < 0):
            raise LayoutError(
                f"rotate_interval_ms={rotate_interval_ms!r}: must be an integer >= 0 (0 or null: size only)"
            )
        if not isinstance(partitions, int) or partitions < 1:
            raise LayoutError(f"partitions={partitions!r}: must be an integer >= 1 (partitions per topic)")
        self.output = Path(output)
        self.flush_size = flush_size
        self.rotate_seconds = (rotate_interval_ms or 0) / 1000.0
        self.partitions = partitions
        self.gzip = bool(gzip)
        self.clock = clock
        self.stats = LayoutStats()
        self._open: dict[tuple[str, int], _OpenFile] = {}
        self._next: dict[tuple[str, int], int] = {}
        self._tmp = self.output / "_tmp"
        # Whatever a crashed run left half-written is not part of the layout: drop it.
        if self._tmp.exists():
            shutil.rmtree(self._tmp)
        self._tmp.mkdir(parents=True, exist_ok=True)

    # --- positions ----------------------------------------------------------------------------
    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.output / "topics" / topic / f"partition={partition}"

    def _offsets_path(self, topic: str, partition: int) -> Path:
        return self.output / "_offsets" / topic / f"partition={partition}.json"

    def next_offset(self, topic: str, partition: int) -> int:
        """The offset the next record of this topic-partition gets."""
        key = (topic, partition)
        if key not in self._next:
            self._next[key] = self._recover_next_offset(topic, partition)
        return self._next[key]

    def _recover_next_offset(self, topic: str, partition: int) -> int:
        stored = 0
        path = self._offsets_path(topic, partition)
        if path.exists():
            try:
                stored = int(json.loads(path.read_text())["next_offset"])
            except (ValueError, KeyError, TypeError) as error:
                raise LayoutError(
                    f"{path}: unreadable offsets file ({error}); delete it and the writer recomputes "
                    "the next offset from the newest file of the partition"
                ) from error
        on_disk = 0
        folder = self.partition_dir(topic, partition)
        if folder.is_dir():
            newest = None
            for entry in folder.iterdir():
                parsed = parse_file_name(entry.name)
                if parsed and parsed[0] == topic and parsed[1] == partition:
                    if newest is None or parsed[2] > newest[0]:
                        newest = (parsed[2], entry)
            if newest is not None:
                on_disk = newest[0] + len(read_lines(newest[1]))
        return max(stored, on_disk)

    def partition_of(self, key: str | None, explicit: int | None = None) -> int:
        if explicit is not None:
            if not 0 <= int(explicit) < self.partitions:
                raise LayoutError(
                    f"record partition {explicit} is outside 0..{self.partitions - 1}: raise `partitions` "
                    "in the capture config or drop the transform that sets it"
                )
            return int(explicit)
        return partition_for_key(key, self.partitions)

    # --- writing ------------------------------------------------------------------------------
    def append(self, topic: str, key: str | None, value: str | None, partition: int | None = None) -> FileId:
        """Write one record (value None: a tombstone, the line ``null``); returns its file."""
        if not _TOPIC.match(topic or ""):
            raise LayoutError(
                f"topic {topic!r} is not a Kafka topic name ([A-Za-z0-9._-], at most 249): "
                "set topic.prefix / a topic routing transform that gives plain names"
            )
        p = self.partition_of(key, partition)
        current = self._open.get((topic, p))
        if current is None:
            current = self._open_file(topic, p)
        line = "null" if value is None else value
        if "\n" in line:  # JSON converters never emit raw newlines; keep one value per line
            line = line.replace("\r\n", " ").replace("\n", " ")
        current.handle.write((line + "\n").encode("utf-8"))
        current.records += 1
        self._next[(topic, p)] += 1
        self.stats.records[topic] = self.stats.records.get(topic, 0) + 1
        file_id = current.file_id
        if current.records >= self.flush_size:
            self._finish((topic, p))
        return file_id

    def _open_file(self, topic: str, partition: int) -> _OpenFile:
        start = self.next_offset(topic, partition)
        file_id = FileId(topic, partition, start)
        tmp = self._tmp / f"{file_name(topic, partition, start, self.gzip)}.{os.getpid()}.tmp"
        raw = open(tmp, "wb")
        handle = gzip_module.GzipFile(fileobj=raw, mode="wb", filename="") if self.gzip else raw
        opened = _OpenFile(file_id, tmp, handle, self.clock())
        opened.raw = raw  # type: ignore[attr-defined]
        self._open[(topic, partition)] = opened
        return opened

    def is_open(self, file_id: FileId) -> bool:
        """Whether that file is still being written (its records are not durable yet)."""
        current = self._open.get((file_id.topic, file_id.partition))
        return current is not None and current.file_id == file_id

    def _finish(self, key: tuple[str, int]) -> WrittenFile:
        current = self._open.pop(key)
        raw = current.raw  # type: ignore[attr-defined]
        if current.handle is not raw:
            current.handle.close()  # the gzip trailer
        raw.flush()
        os.fsync(raw.fileno())
        raw.close()
        topic, partition = key
        folder = self.partition_dir(topic, partition)
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / file_name(topic, partition, current.file_id.start_offset, self.gzip)
        if final.exists():
            raise LayoutError(
                f"{final} already exists: another capture writes into {self.output}? "
                "Give each capture its own output folder"
            )
        os.replace(current.tmp_path, final)
        _fsync_dir(folder)
        next_offset = current.file_id.start_offset + current.records
        self._write_offsets(topic, partition, next_offset, final)
        written = WrittenFile(topic, partition, current.file_id.start_offset, current.records, final)
        self.stats.files.append(written)
        return written

    def _write_offsets(self, topic: str, partition: int, next_offset: int, final: Path) -> None:
        path = self._offsets_path(topic, partition)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        body = {"topic": topic, "partition": partition, "next_offset": next_offset, "last_file": final.name}
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(body, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    def rotate_due(self) -> list[WrittenFile]:
        """Close the files open for ``rotate_interval_ms`` or longer."""
        if not self.rotate_seconds:
            return []
        now = self.clock()
        due = [key for key, f in self._open.items() if now - f.opened_at >= self.rotate_seconds]
        return [self._finish(key) for key in due]

    def flush_all(self) -> list[WrittenFile]:
        """Close every open file (a graceful stop)."""
        return [self._finish(key) for key in list(self._open)]

    def abandon(self) -> None:
        """Drop the open files without publishing them (their records were not acknowledged)."""
        for key in list(self._open):
            current = self._open.pop(key)
            topic = key[0]
            self.stats.records[topic] = self.stats.records.get(topic, 0) - current.records
            try:
                current.raw.close()  # type: ignore[attr-defined]
            finally:
                current.tmp_path.unlink(missing_ok=True)
            self._next.pop(key, None)  # recomputed from disk next time


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
