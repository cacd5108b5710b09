"""Bigtable's rules for one row, in plain Python: a window's mutations onto the row's cells.

A cell is (family, qualifier, cell timestamp) -> value. Applied in the order of their
ordering keys (commit timestamp, tiebreaker, position in the record, I2):

1. SetCell writes the cell's value, unless the cell holds a newer write or a newer delete
   covers it (a late record from another cluster loses to what came after it).
2. DeleteFromColumn removes the column's cells whose timestamp lies in ``[from, to)`` (0: open
   bound), DeleteFromFamily the family's cells (a row delete is one per family): only cells
   written before the delete. Each delete leaves a tombstone (with its ordering key), so a
   SetCell that arrives in a later window but committed before it stays deleted (I3).
3. Garbage-collection mutations count like user deletes, unless ``apply_gc`` is off.
4. Tombstones whose delete committed before the cutoff (the pipeline's tombstone horizon)
   are forgotten.

The outcome per row is what changes: cells and tombstones to write or remove, and the newest
cell per column (``latest``) before and after.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

SET_CELL, DELETE_FROM_COLUMN, DELETE_FROM_FAMILY = (
    "SET_CELL", "DELETE_FROM_COLUMN", "DELETE_FROM_FAMILY")


@dataclass(frozen=True)
class CellMutation:
    seq: bytes
    kind: str
    family: str
    qualifier: bytes | None
    cell_ts: int | None
    ts_from: int
    ts_to: int
    value: bytes | None
    gc: bool
    commit_micros: int


@dataclass
class RowOutcome:
    cells_written: list = field(default_factory=list)  # (family, qualifier, ts, value, seq, commit)
    cells_removed: list = field(default_factory=list)  # (family, qualifier, ts)
    tombstones_written: list = field(default_factory=list)  # (family, qualifier, from, to, seq, commit)
    tombstones_removed: list = field(default_factory=list)  # (family, qualifier, from, to)
    latest_written: list = field(default_factory=list)  # (family, qualifier, ts, value, seq, commit)
    latest_removed: list = field(default_factory=list)  # (family, qualifier)
    cells_after: dict = field(default_factory=dict)
    applied: int = 0
    superseded: int = 0
    ignored_gc: int = 0


def _covers(tomb: tuple, family: str, qualifier: bytes, ts: int) -> bool:
    t_family, t_qualifier, t_from, t_to = tomb
    if t_family != family or (t_qualifier is not None and t_qualifier != qualifier):
        return False
    return ts >= t_from and (t_to == 0 or ts < t_to)


def _latest(cells: dict) -> dict:
    newest: dict = {}
    for (family, qualifier, ts), cell in cells.items():
        column = (family, qualifier)
        if column not in newest or ts > newest[column][0]:
            newest[column] = (ts, *cell)
    return newest


def fold_row(
    mutations: Iterable[CellMutation],
    cells_before: dict,
    tombstones_before: dict,
    apply_gc: bool,
    cutoff_micros: int,
) -> RowOutcome:
    """Steps 1-4 of the module doc for one row. ``cells_before``: (family, qualifier, ts) ->
    (value, seq, commit_micros); ``tombstones_before``: (family, qualifier or None, from, to)
    -> (seq, commit_micros)."""
    cells = dict(cells_before)
    tombs = dict(tombstones_before)
    outcome = RowOutcome()
    for m in sorted(mutations, key=lambda m: m.seq):
        if m.gc and not apply_gc:
            outcome.ignored_gc += 1
        elif m.kind == SET_CELL and not _set_cell(m, cells, tombs):
            outcome.superseded += 1
        else:
            if m.kind != SET_CELL:
                _delete(m, cells, tombs)
            outcome.applied += 1
    tombs = {k: v for k, v in tombs.items() if v[1] >= cutoff_micros}
    _record_changes(outcome, cells_before, cells, tombstones_before, tombs)
    return outcome


def _set_cell(m: CellMutation, cells: dict, tombs: dict) -> bool:
    """Step 1: write the cell, unless it holds a newer write or a newer delete covers it
    (False: superseded)."""
    key = (m.family, m.qualifier, m.cell_ts)
    present = cells.get(key)
    deleted_later = any(
        seq > m.seq and _covers(tomb, m.family, m.qualifier, m.cell_ts)
        for tomb, (seq, _) in tombs.items()
    )
    if (present is not None and present[1] > m.seq) or deleted_later:
        return False
    cells[key] = (m.value, m.seq, m.commit_micros)
    return True


def _delete(m: CellMutation, cells: dict, tombs: dict) -> None:
    """Step 2: remove the covered cells written before the delete; leave its tombstone."""
    qualifier = m.qualifier if m.kind == DELETE_FROM_COLUMN else None
    tomb = (m.family, qualifier, m.ts_from if qualifier is not None else 0,
            m.ts_to if qualifier is not None else 0)
    for key in [k for k, cell in cells.items() if cell[1] < m.seq and _covers(tomb, *k)]:
        del cells[key]
    if tombs.get(tomb, (b"",))[0] < m.seq:
        tombs[tomb] = (m.seq, m.commit_micros)


def _record_changes(outcome: RowOutcome, cells_before: dict, cells: dict,
                    tombstones_before: dict, tombs: dict) -> None:
    """What changed: cells, tombstones and the newest cell per column, written or removed."""
    for key, cell in cells.items():
        if cells_before.get(key) != cell:
            outcome.cells_written.append((*key, *cell))
    outcome.cells_removed = [key for key in cells_before if key not in cells]
    for key, tomb in tombs.items():
        if tombstones_before.get(key) != tomb:
            outcome.tombstones_written.append((*key, *tomb))
    outcome.tombstones_removed = [key for key in tombstones_before if key not in tombs]
    latest_before, latest_after = _latest(cells_before), _latest(cells)
    for column, newest in latest_after.items():
        if latest_before.get(column) != newest:
            outcome.latest_written.append((*column, *newest))
    outcome.latest_removed = [column for column in latest_before if column not in latest_after]
    outcome.cells_after = cells
