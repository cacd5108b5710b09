"""Bigtable's per-row rules the apply folds a window with (:mod:`airflow_cdc.sources.bigtable.cells`)."""

from __future__ import annotations

from airflow_cdc.model import encode_ordering_key
from airflow_cdc.sources.bigtable.cells import (
    DELETE_FROM_COLUMN,
    DELETE_FROM_FAMILY,
    SET_CELL,
    CellMutation,
    fold_row,
)


def seq(commit: int, tiebreaker: int = 0, index: int = 0) -> bytes:
    return encode_ordering_key(commit, tiebreaker, index)


def set_cell(commit, qualifier=b"q", ts=1, value=b"v", tiebreaker=0, family="cf", gc=False):
    return CellMutation(seq(commit, tiebreaker), SET_CELL, family, qualifier, ts, 0, 0, value, gc,
                        commit)


def delete_column(commit, qualifier=b"q", ts_from=0, ts_to=0, gc=False):
    return CellMutation(seq(commit), DELETE_FROM_COLUMN, "cf", qualifier, None, ts_from, ts_to,
                        None, gc, commit)


def delete_family(commit, family="cf"):
    return CellMutation(seq(commit), DELETE_FROM_FAMILY, family, None, None, 0, 0, None, False,
                        commit)


def cells_after(mutations, before=None, tombstones=None, apply_gc=True):
    outcome = fold_row(mutations, before or {}, tombstones or {}, apply_gc, cutoff_micros=0)
    return {key: cell[0] for key, cell in outcome.cells_after.items()}, outcome


def test_set_cells_keep_every_version_and_overwrite_the_same_timestamp():
    cells, _ = cells_after([set_cell(10, ts=1, value=b"a"), set_cell(11, ts=2, value=b"b"),
                            set_cell(12, ts=1, value=b"c")])

    assert cells == {("cf", b"q", 1): b"c", ("cf", b"q", 2): b"b"}


def test_the_higher_tiebreaker_wins_a_conflict_at_the_same_commit_timestamp():
    cells, _ = cells_after([set_cell(10, value=b"high", tiebreaker=2),
                            set_cell(10, value=b"low", tiebreaker=1)])

    assert cells == {("cf", b"q", 1): b"high"}


def test_delete_from_column_removes_only_versions_inside_its_time_range():
    cells, _ = cells_after([set_cell(10, ts=1), set_cell(10, ts=5, tiebreaker=1),
                            set_cell(10, ts=9, tiebreaker=2), delete_column(11, ts_from=2, ts_to=9)])

    assert sorted(cells) == [("cf", b"q", 1), ("cf", b"q", 9)]


def test_delete_from_family_removes_the_family_and_keeps_the_others():
    cells, _ = cells_after([set_cell(10), set_cell(10, family="meta", tiebreaker=1),
                            delete_family(11)])

    assert sorted(cells) == [("meta", b"q", 1)]


def test_a_cell_written_after_a_delete_survives_it():
    cells, _ = cells_after([delete_family(10), set_cell(11, value=b"new")])

    assert cells == {("cf", b"q", 1): b"new"}


def test_a_late_set_cell_older_than_a_delete_applied_before_stays_deleted():
    _, first = cells_after([set_cell(10), delete_family(20)])
    tombstones = {tuple(t[:4]): tuple(t[4:]) for t in first.tombstones_written}

    cells, second = cells_after([set_cell(15, value=b"late")], tombstones=tombstones)

    assert cells == {} and second.superseded == 1


def test_a_late_delete_older_than_a_cell_applied_before_leaves_the_cell():
    before = {("cf", b"q", 1): (b"kept", seq(20), 20)}

    cells, _ = cells_after([delete_column(15)], before=before)

    assert cells == {("cf", b"q", 1): b"kept"}


def test_garbage_collection_is_ignored_in_the_targets_when_apply_gc_is_off():
    cells, outcome = cells_after([set_cell(10), delete_column(11, gc=True)], apply_gc=False)

    assert cells == {("cf", b"q", 1): b"v"} and outcome.ignored_gc == 1


def test_latest_changes_name_the_newest_version_per_column():
    before = {("cf", b"q", 1): (b"old", seq(5), 5)}

    _, outcome = cells_after([set_cell(10, ts=7, value=b"new")], before=before)

    assert [(c[0], c[1], c[2], c[3]) for c in outcome.latest_written] == [("cf", b"q", 7, b"new")]
