"""The Kafka Connect object-storage sink layout, read: which files a window reads, and their lines.

Kafka Connect's GCS and S3 sinks (and ``airflow-cdc capture debezium``) land each
topic-partition as files named by the offset of their first record::

    <root>/topics/<topic>/partition=<p>/<topic>+<p>+<startOffset>.json[.gz]

one JSON value per line (``null`` for a tombstone), in offset order. A file appears under its
final name only once it is complete (object stores publish an upload whole; the capture
renames a finished file into place), and is never changed after. So:

* a **partition** of the window protocol is one topic-partition (:func:`partition_id`), and
  its **resume position** is the next offset to read;
* the records of a file have the offsets ``start + line index`` (:func:`read_sink_file`), and
  a file holds the offsets from its start up to the next file's start;
* the files a window reads (:func:`files_from`) are the one holding the resume offset and all
  later ones, in offset order, as listed at plan time: the plan records them, so a re-run
  reads exactly the same files, and files that appear later go to the next window.

Kafka offsets may have gaps (compaction, transaction markers of exactly-once producers);
then ``start + line index`` is a position below the record's real offset but still above
every earlier record's and below the next file's start, so positions stay unique, increasing
and the same on every read, which is all the resume position needs. A file already read to
its end can be listed again by the next window when the position after its last line is
below the next file's start; its lines below the resume position are skipped.

Listing is injected (:data:`Lister`: a prefix -> the paths under it), so the same code reads a
local folder (:func:`local_lister`) and ``gs://`` (the Airflow GCS hook, wired by the
source). A path under the layout's ``topics/`` folder that does not follow it is reported
(:attr:`SinkListing.unmatched`), never skipped silently.

Only the standard library.
"""

from __future__ import annotations

import gzip
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from airflow_cdc.model import CdcError
from airflow_cdc.sources.read_errors import walk_files

#: A listing function: every path (file or object name, full) under a prefix, recursively.
Lister = Callable[[str], Iterable[str]]
#: Reads one path's bytes (a local file, a gs:// object).
Reader = Callable[[str], bytes]

TOPICS_DIR = "topics"
_FILE_NAME = re.compile(
    r"^(?P<topic>[A-Za-z0-9._-]+)\+(?P<partition>\d+)\+(?P<offset>\d+)\.json(?P<gz>\.gz)?$"
)
_PARTITION_DIR = re.compile(r"^partition=(?P<partition>\d+)$")


class SinkLayoutError(CdcError, ValueError):
    """The sink's files contradict the layout (two files with one start offset, a bad root)."""


@dataclass(frozen=True, order=True)
class SinkFile:
    """One complete sink file: its topic-partition, the offset of its first record, its path."""

    topic: str
    partition: int
    start_offset: int
    path: str

    @property
    def compressed(self) -> bool:
        return self.path.endswith(".gz")

    @property
    def partition_id(self) -> str:
        return partition_id(self.topic, self.partition)


@dataclass(frozen=True)
class SinkListing:
    """What listing a sink root found: the layout's files, in (topic, partition, offset)
    order, and the paths under ``topics/`` that do not follow the layout."""

    files: tuple[SinkFile, ...]
    unmatched: tuple[str, ...] = ()

    def topic_partitions(self) -> list[tuple[str, int]]:
        return sorted({(f.topic, f.partition) for f in self.files})

    def of(self, topic: str, partition: int) -> list[SinkFile]:
        return [f for f in self.files if f.topic == topic and f.partition == partition]


@dataclass(frozen=True)
class WindowFiles:
    """The files a window reads of one topic-partition from ``resume_offset`` on.

    ``gap`` is (resume offset, first file's start) when the first file starts after the
    resume offset: offsets the listing does not hold (Kafka's offset gaps, or files that are
    missing); None when the first file holds the resume offset, or there is no file.
    """

    topic: str
    partition: int
    resume_offset: int
    files: tuple[SinkFile, ...]
    gap: tuple[int, int] | None = None


def partition_id(topic: str, partition: int) -> str:
    """The window protocol's partition id of a topic-partition: ``<topic>+<partition>`` (the
    sink's own spelling in file names)."""
    return f"{topic}+{partition}"


def parse_partition_id(text: str) -> tuple[str, int]:
    """(topic, partition) of :func:`partition_id` text."""
    topic, _, number = str(text).rpartition("+")
    if not topic or not number.isdigit():
        raise SinkLayoutError(f"partition id {text!r} is not <topic>+<partition> (e.g. pg.public.orders+0)")
    return topic, int(number)


def parse_sink_path(path: str) -> SinkFile | None:
    """The :class:`SinkFile` of a path ending ``<topic>/partition=<p>/<topic>+<p>+<offset>.json[.gz]``,
    or None when the path does not follow the layout (including a folder topic or partition
    that differs from the name's)."""
    parts = str(path).replace("\\", "/").rsplit("/", 3)
    if len(parts) < 3:
        return None
    topic_dir, partition_dir, name = parts[-3], parts[-2], parts[-1]
    name_match = _FILE_NAME.match(name)
    dir_match = _PARTITION_DIR.match(partition_dir)
    if not name_match or not dir_match:
        return None
    partition = int(name_match["partition"])
    if name_match["topic"] != topic_dir or int(dir_match["partition"]) != partition:
        return None
    return SinkFile(name_match["topic"], partition, int(name_match["offset"]), str(path))


def list_sink_files(lister: Lister, root: str, topics_dir: str = TOPICS_DIR) -> SinkListing:
    """The sink files under ``<root>/<topics_dir>/`` (``topics.dir`` of the sink, ``topics`` by
    default), via ``lister``. Raises :class:`SinkLayoutError` when one topic-partition has two
    files with the same start offset (``x.json`` and ``x.json.gz``): which holds the records
    is unknown."""
    prefix = f"{str(root).rstrip('/')}/{topics_dir.strip('/')}/"
    files, unmatched = [], []
    for path in lister(prefix):
        path = str(path)
        parsed = parse_sink_path(path)
        if parsed is None or not path.startswith(prefix):
            unmatched.append(path)
        else:
            files.append(parsed)
    files.sort()
    for before, after in zip(files, files[1:]):
        if _file_id(before) == _file_id(after):
            raise SinkLayoutError(
                f"topic {before.topic!r} partition {before.partition} has two files starting at "
                f"offset {before.start_offset}: {before.path} and {after.path}; keep one (the sink "
                f"writes each start offset once)"
            )
    return SinkListing(tuple(files), tuple(sorted(unmatched)))


def _file_id(sink_file: SinkFile) -> tuple[str, int, int]:
    return sink_file.topic, sink_file.partition, sink_file.start_offset


def files_from(
    listing: SinkListing | Iterable[SinkFile], topic: str, partition: int, resume_offset: int
) -> WindowFiles:
    """The files of ``topic``/``partition`` whose records reach ``resume_offset`` or beyond: the
    last file starting at or before it (it may hold it) and every later file, in offset order."""
    if resume_offset < 0:
        raise SinkLayoutError(
            f"resume offset {resume_offset} of {partition_id(topic, partition)} is negative"
        )
    files = listing.files if isinstance(listing, SinkListing) else tuple(listing)
    mine = sorted(f for f in files if f.topic == topic and f.partition == partition)
    first = 0
    for index, sink_file in enumerate(mine):
        if sink_file.start_offset <= resume_offset:
            first = index
    chosen = tuple(mine[first:])
    # A file starting at or before the resume offset that is followed by one starting at or
    # before it too holds nothing at or beyond it: the loop above kept only the last such file.
    gap = None
    if chosen and chosen[0].start_offset > resume_offset:
        gap = (resume_offset, chosen[0].start_offset)
    return WindowFiles(topic, partition, resume_offset, chosen, gap)


def read_sink_file(reader: Reader, sink_file: SinkFile, from_offset: int = 0) -> Iterator[tuple[int, str | bytes]]:
    """(offset, line) of each record of ``sink_file`` at ``from_offset`` or beyond, gzip or not.

    A record's offset is the file's start offset plus its line index. The newline ending the
    last line is no record; any other line is one, an empty one included (the source
    dead-letters it), so offsets never shift.
    """
    data = reader(sink_file.path)
    if sink_file.compressed:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise SinkLayoutError(f"sink file {sink_file.path} is not gzip data ({exc})") from None
    # Split before decoding (a newline byte is never part of a UTF-8 sequence): a line that
    # is not UTF-8 is handed over as bytes, which the source dead-letters alone.
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for index, raw in enumerate(lines):
        offset = sink_file.start_offset + index
        if offset >= from_offset:
            raw = raw.removesuffix(b"\r")
            try:
                yield offset, raw.decode("utf-8")
            except UnicodeDecodeError:
                yield offset, raw


def local_lister(path_prefix: str) -> list[str]:
    """:data:`Lister` for a local folder: every file under ``path_prefix`` (a folder path
    ending in ``/``, ``file://`` allowed), as full paths; nothing when the folder is missing."""
    root = Path(path_prefix.removeprefix("file://"))
    if not root.is_dir():
        return []
    found = [str(path) for path in walk_files(root, f"Debezium sink folder {path_prefix!r}")]
    # Keep the caller's spelling of the prefix so list_sink_files can tell what is under it.
    base = path_prefix if path_prefix.endswith("/") else path_prefix + "/"
    return sorted(base + os.path.relpath(p, root).replace(os.sep, "/") for p in found)


def local_reader(path: str) -> bytes:
    """:data:`Reader` for local files (``file://`` allowed)."""
    return Path(path.removeprefix("file://")).read_bytes()
