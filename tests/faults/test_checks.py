"""The matrix's checks can fail: each kind of damage is reported under its own name."""

from __future__ import annotations

from tests.faults.matrix import compare_rows


def test_a_missing_key_a_changed_value_and_a_resurrected_key_count_as_lost():
    expected = {1: {"v": "a"}, 2: {"v": "b"}}
    actual = [{"k": 2, "v": "B"}, {"k": 3, "v": "c"}]

    check = compare_rows("t", expected, actual, lambda r: r["k"])

    assert sorted(check.lost) == sorted([
        "t: key 1 missing", "t: key 2 differs {'v': ('b', 'B')}",
        "t: key 3 present though deleted or never written"])
    assert check.duplicated == []


def test_a_key_twice_in_a_target_counts_as_duplicated():
    check = compare_rows("t", {1: {"v": "a"}}, [{"k": 1, "v": "a"}, {"k": 1, "v": "a"}], lambda r: r["k"])

    assert check.duplicated == ["t: key 1 twice"] and check.lost == []


def test_a_spanner_world_whose_windows_never_ran_reports_every_change_lost(tmp_path):
    from tests.faults.worlds import SpannerWorld

    with SpannerWorld(tmp_path) as world:
        end = world.window_ends(1)[0]
        check = world.check(end, [end])

    assert check.lost and any("changelog holds 0 changes" in problem for problem in check.lost)
