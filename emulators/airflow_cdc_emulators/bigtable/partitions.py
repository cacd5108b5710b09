"""Change stream partitions: row ranges over time, splitting and merging on a seeded schedule.

A partition is a row range ``[start, end)`` of the table (``b""`` as start is the first key, as
end it is "unbounded") with a lifetime ``[birth, end)`` in microseconds. At every instant the
live partitions tile the whole key space with no gap and no overlap, so every row belongs to
exactly one partition at a time.

* A **split** ends one partition at ``t`` and starts two children covering its range.
* A **merge** ends two or three adjacent partitions at ``t`` and starts one child covering
  their union; every parent names the same child.

Partitions carry ids (``p0``, ``p1``...) for people and tests; on the wire a partition is only
its row range, so the same range may be two partitions at two different times.
"""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from datetime import datetime

from airflow_cdc_emulators.common import EmulatorError

from .timeline import format_micros, to_datetime


class PartitionPlanError(EmulatorError, ValueError):
    """The requested splits and merges cannot be scheduled over the key space."""


def show_key(key: bytes) -> str:
    """A row key as readable text (non-UTF-8 bytes as ``\\xNN``)."""
    return key.decode("utf-8", "backslashreplace")


@dataclass(frozen=True, order=True)
class RowRange:
    """Rows ``start <= key < end``; ``start=b""`` is the first key, ``end=b""`` is unbounded."""

    start: bytes = b""
    end: bytes = b""

    def __post_init__(self) -> None:
        if self.end and self.start >= self.end:
            raise PartitionPlanError(
                f"row range {self} is empty: its start must sort before its end "
                f"(use end b'' for an unbounded range)"
            )

    def contains(self, key: bytes) -> bool:
        return self.start <= key and (not self.end or key < self.end)

    def end_after(self, key: bytes) -> bool:
        """True if this range's end lies after ``key`` (an unbounded end lies after everything)."""
        return not self.end or self.end > key

    def overlaps(self, other: RowRange) -> bool:
        return self.end_after(other.start) and other.end_after(self.start)

    def intersect(self, other: RowRange) -> RowRange | None:
        if not self.overlaps(other):
            return None
        start = max(self.start, other.start)
        if not self.end:
            end = other.end
        elif not other.end:
            end = self.end
        else:
            end = min(self.end, other.end)
        return RowRange(start, end)

    def covers(self, other: RowRange) -> bool:
        return self.start <= other.start and (
            not self.end or (bool(other.end) and other.end <= self.end)
        )

    def __str__(self) -> str:
        start = show_key(self.start) if self.start else "<first key>"
        end = show_key(self.end) if self.end else "<unbounded>"
        return f"[{start}, {end})"


@dataclass(frozen=True)
class Partition:
    """One change stream partition: a row range over a lifetime, with its lineage."""

    id: str
    range: RowRange
    birth_us: int
    end_us: int | None = None
    parents: tuple[str, ...] = ()
    children: tuple[str, ...] = ()

    @property
    def birth(self) -> datetime:
        return to_datetime(self.birth_us)

    @property
    def end(self) -> datetime | None:
        return None if self.end_us is None else to_datetime(self.end_us)

    def live_at(self, at_us: int) -> bool:
        return self.birth_us <= at_us and (self.end_us is None or at_us < self.end_us)

    def __str__(self) -> str:
        end = "open" if self.end_us is None else format_micros(self.end_us)
        return f"partition {self.id} {self.range} live {format_micros(self.birth_us)} .. {end}"


@dataclass(frozen=True)
class PartitionEvent:
    """A split (one parent, two children) or a merge (two or three parents, one child)."""

    kind: str  # "split" or "merge"
    at_us: int
    parents: tuple[str, ...]
    children: tuple[str, ...]

    @property
    def at(self) -> datetime:
        return to_datetime(self.at_us)


@dataclass
class PartitionTimeline:
    """Every partition of a table's history and the splits and merges between them."""

    partitions: dict[str, Partition]
    events: list[PartitionEvent] = field(default_factory=list)

    def live_at(self, at_us: int) -> list[Partition]:
        """The partitions live at ``at_us`` in key order (before the first birth: the first)."""
        first = min(p.birth_us for p in self.partitions.values())
        at_us = max(at_us, first)
        return sorted(
            (p for p in self.partitions.values() if p.live_at(at_us)), key=lambda p: p.range
        )

    def find(self, row_range: RowRange, at_us: int) -> Partition | None:
        """The partition with exactly ``row_range`` live at ``at_us``, if there is one."""
        for partition in self.partitions.values():
            if partition.range == row_range and partition.live_at(at_us):
                return partition
        return None

    def children_of(self, partition: Partition) -> list[Partition]:
        return [self.partitions[c] for c in partition.children]

    @property
    def splits(self) -> list[PartitionEvent]:
        return [e for e in self.events if e.kind == "split"]

    @property
    def merges(self) -> list[PartitionEvent]:
        return [e for e in self.events if e.kind == "merge"]


def initial_boundaries(keys: list[bytes], count: int) -> list[bytes]:
    """``count - 1`` split keys at the quantiles of the (sorted) row keys."""
    if count < 1:
        raise PartitionPlanError(f"initial_partitions {count} must be at least 1")
    if count > 1 and len(keys) < count:
        raise PartitionPlanError(
            f"{count} initial partitions need at least {count} row keys, the history has "
            f"{len(keys)}: lower initial_partitions or raise the row count"
        )
    return [keys[len(keys) * i // count] for i in range(1, count)]


def plan_timeline(
    *,
    seed: int,
    birth_us: int,
    keys: list[bytes],
    initial_partitions: int,
    event_times: list[int],
    kinds: list[str],
) -> PartitionTimeline:
    """Initial partitions at ``birth_us``, then one event per time: split, merge2 or merge3.

    ``keys`` are the history's row keys (sorted); split points are chosen among them so every
    partition holds rows.
    """
    rng = random.Random(f"bigtable-partitions-{seed}")
    bounds = [b""] + initial_boundaries(keys, initial_partitions) + [b""]
    partitions: dict[str, Partition] = {}
    live: list[str] = []

    def add(row_range: RowRange, at: int, parents: tuple[str, ...]) -> str:
        pid = f"p{len(partitions)}"
        partitions[pid] = Partition(pid, row_range, at, None, parents, ())
        return pid

    def end(pid: str, at: int, children: tuple[str, ...]) -> None:
        old = partitions[pid]
        partitions[pid] = Partition(old.id, old.range, old.birth_us, at, old.parents, children)

    for low, high in zip(bounds, bounds[1:]):
        live.append(add(RowRange(low, high), birth_us, ()))
    events: list[PartitionEvent] = []
    for at, kind in sorted(zip(event_times, kinds)):
        live.sort(key=lambda p: partitions[p].range)
        if kind == "split":
            candidates = []
            for pid in live:
                inside = _keys_inside(keys, partitions[pid].range)
                if len(inside) >= 2:
                    candidates.append((pid, inside[len(inside) // 2]))
            if not candidates:
                raise PartitionPlanError(
                    f"no partition can split at {format_micros(at)}: every live partition holds "
                    f"fewer than 2 row keys; raise the row count or lower splits"
                )
            pid, key = rng.choice(candidates)
            old = partitions[pid].range
            left = add(RowRange(old.start, key), at, (pid,))
            right = add(RowRange(key, old.end), at, (pid,))
            end(pid, at, (left, right))
            live.remove(pid)
            live += [left, right]
            events.append(PartitionEvent("split", at, (pid,), (left, right)))
        else:
            width = 3 if kind == "merge3" else 2
            if len(live) < width:
                raise PartitionPlanError(
                    f"a {width}-parent merge at {format_micros(at)} needs {width} live "
                    f"partitions, there are {len(live)}: schedule more splits first"
                )
            first = rng.randrange(len(live) - width + 1)
            parents = tuple(live[first : first + width])
            merged = RowRange(partitions[parents[0]].range.start, partitions[parents[-1]].range.end)
            child = add(merged, at, parents)
            for pid in parents:
                end(pid, at, (child,))
                live.remove(pid)
            live.append(child)
            events.append(PartitionEvent("merge", at, parents, (child,)))
    return PartitionTimeline(partitions, events)


def _keys_inside(keys: list[bytes], row_range: RowRange) -> list[bytes]:
    """Keys strictly after the range's start and inside it (possible split points)."""
    low = bisect_right(keys, row_range.start)
    high = len(keys) if not row_range.end else bisect_left(keys, row_range.end)
    return keys[low:high]
