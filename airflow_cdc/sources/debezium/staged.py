"""A parallel snapshot's staged batches: how its READ rows reach the stream's windows.

The snapshot job (``spark_jobs/snapshot.py``) reads a table in batches of chunks between two
watermarks (:mod:`.watermarks`) and stages each batch's READ change rows as Parquet under the
sink's ``snapshots/`` folder::

    <prefix>/snapshots/<snapshot id>/plan.json                   the chunk plan, written first
    <prefix>/snapshots/<snapshot id>/batch=000001/part-*.parquet  the rows (changelog columns)
    <prefix>/snapshots/<snapshot id>/batch=000001/_BATCH.json     written last: the batch is whole
    <prefix>/snapshots/<snapshot id>/_COMPLETE.json               every chunk is staged

To the window protocol a snapshot is one more partition of the stream, ``snapshot:<id>``,
whose resume position is its next batch number: a window plans the whole batches staged when
it is planned (their folders are recorded in the plan, so a re-run reads the same ones), the
extract reads them natively (:meth:`.source.DebeziumSource.staged_batch_folders`) into the window's
changelog commit, and the partition finishes with the window that takes the last batch after
``_COMPLETE.json`` exists. The partition never holds a window back: its watermark is the
window's end (a batch is whole or absent), so a snapshot runs beside the stream for hours
without delaying a gate. A staged row is applied by the window that takes it, in the order
its ordering key (the batch's low watermark) gives it among the key's changes, exactly once.

Only the standard library.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

SNAPSHOTS_DIR = "snapshots"
PARTITION_PREFIX = "snapshot:"
PLAN_FILE = "plan.json"
BATCH_MARKER = "_BATCH.json"
COMPLETE_MARKER = "_COMPLETE.json"
_SNAPSHOT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_BATCH_DIR = re.compile(r"^batch=(\d{6,})$")


def validate_snapshot_id(snapshot_id: object) -> str:
    if not isinstance(snapshot_id, str) or not _SNAPSHOT_ID.match(snapshot_id):
        raise ValueError(
            f"snapshot id {snapshot_id!r} is not 1-100 letters, digits, '_', '.', '-' starting "
            f"with a letter or digit: it names a folder and a partition; choose such a name")
    return snapshot_id


def partition_of(snapshot_id: str) -> str:
    return PARTITION_PREFIX + validate_snapshot_id(snapshot_id)


def snapshot_of(partition_id: str) -> str | None:
    """The snapshot id of a ``snapshot:<id>`` partition, None for any other partition."""
    if partition_id.startswith(PARTITION_PREFIX):
        return partition_id[len(PARTITION_PREFIX):]
    return None


def batch_dir(snapshot_id: str, batch: int) -> str:
    """``<snapshot id>/batch=000001``, relative to the snapshots folder."""
    return f"{validate_snapshot_id(snapshot_id)}/batch={batch:06d}"


@dataclass
class StagedSnapshot:
    """What the snapshots folder holds of one snapshot: its whole batches (number -> folder
    relative to the folder), and whether every chunk is staged."""

    snapshot_id: str
    batches: dict[int, str] = field(default_factory=dict)
    complete: bool = False

    def batches_from(self, first: int) -> list[str]:
        """The folders of the contiguous whole batches from ``first`` on (a gap stops it: a
        batch staged out of order waits for the one before it)."""
        folders = []
        number = first
        while number in self.batches:
            folders.append(self.batches[number])
            number += 1
        return folders


def staged_snapshots(paths: Iterable[str], root: str) -> dict[str, StagedSnapshot]:
    """The snapshots under ``root`` (the snapshots folder), from a recursive listing."""
    base = root.rstrip("/") + "/"
    found: dict[str, StagedSnapshot] = {}
    for path in paths:
        if not path.startswith(base):
            continue
        parts = path[len(base):].split("/")
        if not _SNAPSHOT_ID.match(parts[0]):
            continue
        snapshot = found.setdefault(parts[0], StagedSnapshot(parts[0]))
        if parts[1:] == [COMPLETE_MARKER]:
            snapshot.complete = True
        elif len(parts) == 3 and parts[2] == BATCH_MARKER:
            match = _BATCH_DIR.match(parts[1])
            if match:
                snapshot.batches[int(match.group(1))] = f"{parts[0]}/{parts[1]}"
    return found


def batch_marker(chunks: list[int], rows: int, keys_changed_during_read: int, low: str,
                 high: str) -> str:
    """The ``_BATCH.json`` text: which chunks the batch holds, its rows (every row read), how
    many keys of the table changed between its watermarks (their changes apply on top of the
    READ rows), and the watermarks' positions."""
    return json.dumps({"chunks": chunks, "rows": rows,
                       "keys_changed_during_read": keys_changed_during_read, "low": low,
                       "high": high}, sort_keys=True)
