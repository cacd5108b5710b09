"""Change stream partitions over a key space, splitting and merging on a seeded schedule.

Every row has a fixed position in ``[0, KEYSPACE)`` (a hash of its table and key). At any
instant the live partitions tile the key space with half-open ranges ``[low, high)``, so a row's
changes belong to exactly one partition at a time. A partition lives over ``[start, end)``:
its records have ``start <= commit_timestamp < end``, and its children start at ``end``.

* A **split** ends one partition at ``t`` and starts two children covering its range, each
  with that one parent.
* A **merge** ends two or three adjacent partitions at ``t`` and starts one child covering
  their union, with all of them as parents: each parent then reports the same child.

The schedule depends only on the seed, the stream name and the counts, so the same arguments
always give the same tokens, ranges and times.
"""

from __future__ import annotations

import base64
import hashlib
import random
from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime

from airflow_cdc_emulators.common import EmulatorError

from .timeline import to_datetime

KEYSPACE = 1 << 32


class LineagePlanError(EmulatorError, ValueError):
    """The requested splits and merges cannot be scheduled."""


@dataclass(frozen=True)
class Partition:
    """One change stream partition: a key range over a time range, with its lineage."""

    token: str
    start_us: int
    end_us: int | None
    low: int
    high: int
    parents: tuple[str, ...]
    children: tuple[str, ...]

    @property
    def start(self) -> datetime:
        return to_datetime(self.start_us)

    @property
    def end(self) -> datetime | None:
        return None if self.end_us is None else to_datetime(self.end_us)

    def live_at(self, at_us: int) -> bool:
        return self.start_us <= at_us and (self.end_us is None or at_us < self.end_us)


@dataclass(frozen=True)
class PartitionEvent:
    """A split (one parent, several children) or a merge (several parents, one child) at ``at``."""

    kind: str
    at_us: int
    parents: tuple[str, ...]
    children: tuple[str, ...]

    @property
    def at(self) -> datetime:
        return to_datetime(self.at_us)


@dataclass(frozen=True)
class Lineage:
    """All partitions of a stream's history (in creation order) and the events between them."""

    partitions: dict[str, Partition]
    events: tuple[PartitionEvent, ...]

    @property
    def roots(self) -> tuple[Partition, ...]:
        return tuple(p for p in self.partitions.values() if not p.parents)

    @property
    def splits(self) -> tuple[PartitionEvent, ...]:
        return tuple(e for e in self.events if e.kind == "split")

    @property
    def merges(self) -> tuple[PartitionEvent, ...]:
        return tuple(e for e in self.events if e.kind == "merge")

    def live_at(self, at_us: int) -> list[Partition]:
        """The partitions live at ``at_us``, ordered by key range."""
        return sorted(
            (p for p in self.partitions.values() if p.live_at(at_us)), key=lambda p: p.low
        )

    def cursor(self) -> LineageCursor:
        return LineageCursor(self)


class LineageCursor:
    """Finds the partition owning a key position while time only moves forward (generation)."""

    def __init__(self, lineage: Lineage) -> None:
        self._lineage = lineage
        self._pending = list(lineage.events)
        self._next_event = 0
        self._live = sorted(lineage.roots, key=lambda p: p.low)
        self._lows = [p.low for p in self._live]

    def advance(self, at_us: int) -> None:
        """Apply every split and merge that happened at or before ``at_us``."""
        changed = False
        while (
            self._next_event < len(self._pending) and self._pending[self._next_event].at_us <= at_us
        ):
            event = self._pending[self._next_event]
            self._next_event += 1
            ended = set(event.parents)
            self._live = [p for p in self._live if p.token not in ended]
            self._live.extend(self._lineage.partitions[t] for t in event.children)
            changed = True
        if changed:
            self._live.sort(key=lambda p: p.low)
            self._lows = [p.low for p in self._live]

    def locate(self, position: int) -> Partition:
        return self._live[bisect_right(self._lows, position) - 1]


def key_position(table: str, key: tuple) -> int:
    """Where a row sits in the key space: stable across runs and Python versions."""
    text = table + "\x00" + "\x00".join(str(part) for part in key)
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=4).digest(), "big")


def plan_lineage(
    *,
    seed: int,
    stream_name: str,
    start_us: int,
    end_us: int,
    initial_partitions: int,
    splits: int,
    merges: int,
    three_way_merges: int,
) -> Lineage:
    """Schedule ``splits`` and ``merges`` (``three_way_merges`` of them with three parents)."""
    if initial_partitions < 1:
        raise LineagePlanError(f"initial_partitions {initial_partitions} must be at least 1")
    if splits < 0 or merges < 0 or not 0 <= three_way_merges <= merges:
        raise LineagePlanError(
            f"splits {splits} and merges {merges} must be >= 0 and three_way_merges "
            f"{three_way_merges} between 0 and merges"
        )
    # Each split adds one live partition, each merge removes one (two for a three-way merge).
    needed = 2 * three_way_merges + (merges - three_way_merges)
    if initial_partitions + splits - needed < 1:
        raise LineagePlanError(
            f"{merges} merges ({three_way_merges} three-way) need more partitions than "
            f"{initial_partitions} initial ones plus {splits} splits give: add splits or "
            f"initial partitions"
        )
    rng = random.Random(f"lineage/{seed}/{stream_name}")
    tokens = _TokenFactory(seed, stream_name)
    built: dict[str, dict] = {}

    def new_partition(start: int, low: int, high: int, parents: tuple[str, ...]) -> str:
        token = tokens.next()
        built[token] = {
            "start_us": start,
            "end_us": None,
            "low": low,
            "high": high,
            "parents": parents,
            "children": (),
        }
        return token

    bounds = [KEYSPACE * i // initial_partitions for i in range(initial_partitions + 1)]
    live = [
        new_partition(start_us, bounds[i], bounds[i + 1], ()) for i in range(initial_partitions)
    ]

    event_count = splits + merges
    slot = (end_us - start_us) // (event_count + 1) if event_count else 0
    if event_count and slot < 4:
        raise LineagePlanError(f"the history is too short for {event_count} partition events")
    merge_sizes = [3] * three_way_merges + [2] * (merges - three_way_merges)
    remaining_splits = splits
    events = []
    for index in range(event_count):
        at = start_us + slot * (index + 1) + rng.randint(-slot // 4, slot // 4)
        # The count check above keeps any order finishable; a merge just needs enough partitions.
        feasible_merge = next((size for size in merge_sizes if size <= len(live)), None)
        do_split = remaining_splits > 0 and (
            feasible_merge is None
            or rng.random() < remaining_splits / (remaining_splits + len(merge_sizes))
        )
        live.sort(key=lambda t: built[t]["low"])
        if do_split:
            remaining_splits -= 1
            parent = rng.choice(live)
            low, high = built[parent]["low"], built[parent]["high"]
            middle = low + (high - low) // 2 + rng.randint(-(high - low) // 8, (high - low) // 8)
            children = (
                new_partition(at, low, middle, (parent,)),
                new_partition(at, middle, high, (parent,)),
            )
            parents = (parent,)
        else:
            size = feasible_merge
            assert size is not None, "the partition count check above keeps a merge feasible"
            merge_sizes.remove(size)
            first = rng.randrange(len(live) - size + 1)
            parents = tuple(live[first : first + size])
            low, high = built[parents[0]]["low"], built[parents[-1]]["high"]
            children = (new_partition(at, low, high, parents),)
        for parent in parents:
            built[parent]["end_us"] = at
            built[parent]["children"] = children
        live = [t for t in live if t not in parents] + list(children)
        events.append(PartitionEvent("split" if do_split else "merge", at, parents, children))
    partitions = {token: Partition(token=token, **fields) for token, fields in built.items()}
    return Lineage(partitions, tuple(events))


class _TokenFactory:
    """Opaque, deterministic partition tokens (base64url like the real ones)."""

    def __init__(self, seed: int, stream_name: str) -> None:
        self._prefix = f"{seed}/{stream_name}/"
        self._count = 0

    def next(self) -> str:
        self._count += 1
        digest = hashlib.blake2b(
            (self._prefix + str(self._count)).encode(), digest_size=24
        ).digest()
        return base64.urlsafe_b64encode(digest).decode("ascii")
