"""Commits and their mutations, and the table content they produce (the truth).

A :class:`Commit` is what one RPC changed atomically in ONE row: its source cluster, commit
timestamp, tiebreaker, type (USER or GARBAGE_COLLECTION) and an ordered list of mutations,
exactly what one change stream ``DataChange`` carries:

* :class:`SetCell` writes the cell at one (family, qualifier, timestamp);
* :class:`DeleteFromColumn` removes a column's cells whose timestamp lies in
  ``[start_us, end_us)`` (``0`` leaves a bound open, as ``TimestampRange`` does);
* :class:`DeleteFromFamily` removes the row's cells of one family. A whole-row delete is
  recorded as one DeleteFromFamily per family holding data in the row at that time.

The content of the table at an instant (:func:`true_state`) applies every commit with a
commit timestamp strictly before it, in ``(commit timestamp, tiebreaker)`` order, mutations in
list order. Equal commit timestamps on the same cell from two clusters resolve to the higher
tiebreaker, Bigtable's conflict rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Union

from .timeline import to_datetime

USER = "USER"
GARBAGE_COLLECTION = "GARBAGE_COLLECTION"

# row -> family -> qualifier -> cell timestamp (micros) -> value
TableState = dict[bytes, dict[str, dict[bytes, dict[int, bytes]]]]
RowState = dict[str, dict[bytes, dict[int, bytes]]]


@dataclass(frozen=True, slots=True)
class SetCell:
    family: str
    qualifier: bytes
    timestamp_us: int
    value: bytes


@dataclass(frozen=True, slots=True)
class DeleteFromColumn:
    family: str
    qualifier: bytes
    start_us: int = 0  # inclusive; 0 = from the beginning
    end_us: int = 0  # exclusive; 0 = no end

    def covers(self, timestamp_us: int) -> bool:
        return timestamp_us >= self.start_us and (self.end_us == 0 or timestamp_us < self.end_us)


@dataclass(frozen=True, slots=True)
class DeleteFromFamily:
    family: str


Mutation = Union[SetCell, DeleteFromColumn, DeleteFromFamily]


@dataclass(frozen=True, slots=True)
class Commit:
    """One row's atomic change: one change stream record.

    ``seq`` numbers commits in the order they were created (unique per emulator); it breaks
    exact ties in orderings and never reaches the wire.
    """

    seq: int
    row_key: bytes
    cluster: str  # "" for garbage collection
    commit_us: int
    tiebreaker: int
    type: str
    mutations: tuple[Mutation, ...]

    @property
    def commit_timestamp(self) -> datetime:
        return to_datetime(self.commit_us)

    @property
    def order(self) -> tuple[int, int, int]:
        """The order commits apply in: commit timestamp, then tiebreaker."""
        return (self.commit_us, self.tiebreaker, self.seq)


def apply_mutations(row: RowState, mutations: Iterable[Mutation]) -> None:
    """Apply mutations to one row's cells in place (empty columns and families are dropped)."""
    for mutation in mutations:
        if isinstance(mutation, SetCell):
            family = row.setdefault(mutation.family, {})
            family.setdefault(mutation.qualifier, {})[mutation.timestamp_us] = mutation.value
        elif isinstance(mutation, DeleteFromColumn):
            family = row.get(mutation.family)
            cells = family.get(mutation.qualifier) if family else None
            if cells:
                for ts in [ts for ts in cells if mutation.covers(ts)]:
                    del cells[ts]
                if not cells:
                    del family[mutation.qualifier]
                if not family:
                    del row[mutation.family]
        else:
            row.pop(mutation.family, None)


def row_state(commits: Iterable[Commit]) -> RowState:
    """One row's cells after its commits (given in any order; applied by :attr:`Commit.order`)."""
    row: RowState = {}
    for commit in sorted(commits, key=lambda c: c.order):
        apply_mutations(row, commit.mutations)
    return row


def true_state(commits: Iterable[Commit], at_us: int) -> TableState:
    """The table after every commit with ``commit_us < at_us`` (a half-open ``[.., at)`` view)."""
    state: TableState = {}
    for commit in sorted((c for c in commits if c.commit_us < at_us), key=lambda c: c.order):
        row = state.setdefault(commit.row_key, {})
        apply_mutations(row, commit.mutations)
        if not row:
            del state[commit.row_key]
    return dict(sorted(state.items()))


def row_delete(row: RowState) -> tuple[DeleteFromFamily, ...]:
    """A whole-row delete as Bigtable records it: DeleteFromFamily per family holding data."""
    return tuple(DeleteFromFamily(family) for family in sorted(row) if row[family])
