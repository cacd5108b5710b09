"""Bigtable's per-row fold (:func:`airflow_cdc.sources.bigtable.cells.fold_row`) under any
mutations: extreme cell timestamps and ranges, odd families and qualifiers, late records.

Whatever the changelog holds for a row, the fold never fails, and its outcome depends only on
the mutations' ordering keys (I2): not on the order they arrive in, nor on how windows split
them (folding a later window onto the earlier one's cells and tombstones gives the cells of
one fold of both).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from airflow_cdc.model import encode_ordering_key
from airflow_cdc.sources.bigtable.cells import (
    DELETE_FROM_COLUMN,
    DELETE_FROM_FAMILY,
    SET_CELL,
    CellMutation,
    fold_row,
)

from .strategies import ODD_TEXT

families = st.sampled_from(["cf", "", "é", ODD_TEXT[6]])
qualifiers = st.sampled_from([b"q", b"", b"\x00", b"\xff" * 3])
cell_times = st.sampled_from([0, 1, 5, 2**63 - 1, -(2**63)]) | st.integers(-(2**63), 2**63 - 1)


@st.composite
def mutation(draw, index: int):
    kind = draw(st.sampled_from([SET_CELL, SET_CELL, DELETE_FROM_COLUMN, DELETE_FROM_FAMILY]))
    commit = draw(st.integers(0, 50))
    seq = encode_ordering_key(commit, draw(st.integers(0, 3)), index)  # unique, as the source's
    if kind == SET_CELL:
        return CellMutation(seq, kind, draw(families), draw(qualifiers), draw(cell_times), 0, 0,
                            draw(st.binary(max_size=4)), draw(st.booleans()), commit)
    if kind == DELETE_FROM_COLUMN:
        return CellMutation(seq, kind, draw(families), draw(qualifiers), None, draw(cell_times),
                            draw(cell_times), None, draw(st.booleans()), commit)
    return CellMutation(seq, kind, draw(families), None, None, 0, 0, None, False, commit)


mutations = st.integers(0, 12).flatmap(lambda n: st.tuples(*[mutation(i) for i in range(n)]))


def tombstones_after(before: dict, outcome) -> dict:
    tombs = {k: v for k, v in before.items() if k not in outcome.tombstones_removed}
    tombs.update({tuple(t[:4]): tuple(t[4:]) for t in outcome.tombstones_written})
    return tombs


@given(mutations, st.randoms(), st.booleans())
def test_a_rows_fold_does_not_depend_on_the_order_its_mutations_arrive_in(row, random, apply_gc):
    shuffled = list(row)
    random.shuffle(shuffled)

    first = fold_row(row, {}, {}, apply_gc, 0)
    second = fold_row(shuffled, {}, {}, apply_gc, 0)

    assert first.cells_after == second.cells_after
    assert set(first.tombstones_written) == set(second.tombstones_written)


@given(mutations, st.randoms())
def test_folding_a_row_window_by_window_gives_the_cells_of_one_fold(row, random):
    late = [m for m in row if random.random() < 0.5]  # arrive in the later window, whatever their commit
    early = [m for m in row if m not in late]

    once = fold_row(row, {}, {}, True, 0)
    first = fold_row(early, {}, {}, True, 0)
    second = fold_row(late, first.cells_after, tombstones_after({}, first), True, 0)

    assert second.cells_after == once.cells_after
