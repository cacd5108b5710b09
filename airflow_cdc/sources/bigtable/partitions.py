"""Partitions are row ranges: their ids, their resume positions, and the key space they tile.

A partition id is ``<generation>:[<start>,<end>)`` with the keys percent-encoded and an empty
key meaning unbounded. The generation is 0 for the partitions a stream starts with and one
more than the greatest of its parents' for a child, so a range that comes back after a split
and a merge gets a new id (the state store keys partitions by id).

A resume position is JSON: ``{"tokens": [{"start", "end", "token"}], "skip": [event ids]}``:
the continuation tokens to read from (one, or one per parent piece after a merge) and the
records already taken after them (see :mod:`.reader`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote_from_bytes, unquote_to_bytes

from airflow_cdc.model import CdcError

_SAFE = "#:._-~+=@!$*/"
_ID = re.compile(r"^(\d+):\[([^,\[\]()]*),([^,\[\]()]*)\)$")


class KeySpaceError(CdcError):
    """The live partitions do not cover the table's key space exactly once."""


@dataclass(frozen=True, order=True)
class RowRange:
    """``[start, end)`` of row keys; ``b""`` as ``end`` is unbounded."""

    start: bytes
    end: bytes

    def overlaps(self, other: RowRange) -> bool:
        return (not self.end or other.start < self.end) and (not other.end or self.start < other.end)

    def contains(self, other: RowRange) -> bool:
        """Whether every key of ``other`` is in this range."""
        if other.start < self.start:
            return False
        return not self.end or (bool(other.end) and other.end <= self.end)

    def text(self) -> str:
        return f"[{quote_from_bytes(self.start, _SAFE)},{quote_from_bytes(self.end, _SAFE)})"


@dataclass(frozen=True)
class PartitionName:
    generation: int
    rows: RowRange

    @property
    def partition_id(self) -> str:
        return f"{self.generation}:{self.rows.text()}"

    @classmethod
    def parse(cls, partition_id: str) -> PartitionName:
        found = _ID.match(partition_id or "")
        if not found:
            raise ValueError(
                f"Bigtable partition id {partition_id!r} is not '<generation>:[<start>,<end>)': "
                f"the state store holds a partition this source did not name; reset the stream"
            )
        return cls(int(found[1]), RowRange(unquote_to_bytes(found[2]), unquote_to_bytes(found[3])))


def rows_of(partition_id: str) -> RowRange:
    return PartitionName.parse(partition_id).rows


def check_tiling(ranges: Iterable[tuple[str, RowRange]], what: str) -> None:
    """Raise :class:`KeySpaceError` unless ``ranges`` (name, range) cover every row key once."""
    ordered = sorted(ranges, key=lambda item: item[1].start)
    expected = b""
    previous = "the start of the key space"
    for name, rows in ordered:
        if rows.start != expected:
            kind = "a gap" if rows.start > expected else "an overlap"
            raise KeySpaceError(
                f"{what}: {kind} in the key space between {previous} and {name} (row key "
                f"{expected!r} vs {rows.start!r}): no row range may be skipped or read twice. "
                f"The partitions in the state store no longer match the table; reset the "
                f"stream's state to start it again from a time within the retention period"
            )
        if not rows.end:
            expected, previous = None, name
            break
        expected, previous = rows.end, name
    if expected is not None:
        raise KeySpaceError(
            f"{what}: a gap in the key space after {previous} (row key {expected!r} to the end "
            f"of the table): no row range may be skipped. The partitions in the state store no "
            f"longer match the table; reset the stream's state"
        )


@dataclass(frozen=True)
class TokenPiece:
    """A continuation token and the row range it resumes."""

    rows: RowRange
    token: str

    def to_json(self) -> dict:
        return {"start": quote_from_bytes(self.rows.start, _SAFE),
                "end": quote_from_bytes(self.rows.end, _SAFE), "token": self.token}

    @classmethod
    def from_json(cls, data: dict) -> TokenPiece:
        return cls(RowRange(unquote_to_bytes(data["start"]), unquote_to_bytes(data["end"])),
                   data["token"])


def resume_text(tokens: Sequence[TokenPiece], skip: Iterable[str] = ()) -> str:
    return json.dumps({"tokens": [t.to_json() for t in tokens], "skip": sorted(set(skip))},
                      sort_keys=True)


def read_resume(text: str) -> tuple[list[TokenPiece], frozenset[str]]:
    data = json.loads(text)
    return [TokenPiece.from_json(t) for t in data.get("tokens") or ()], frozenset(data.get("skip") or ())
