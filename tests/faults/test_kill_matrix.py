"""The reliability matrix in the suite: a representative cell (``make test-long``), and the
whole matrix behind its marker (``make faults`` prints it; ``pytest -m faults_matrix`` asserts it)."""

from __future__ import annotations

import pytest

from airflow_cdc.faults import POINTS


def assert_clean(results) -> None:
    for result in results:
        assert result.check.lost == [], result.line()
        assert result.check.duplicated == [], result.line()
        assert result.check.failed == [], result.line()


@pytest.mark.long  # make test-long (CI runs it)
def test_a_spark_submit_killed_after_the_changelog_commit_loses_and_doubles_nothing(airflow_db, tmp_path):
    # The exactly-once hazard of extract: the changelog commit is made, the outcome file is
    # not; the re-run must find the window's commit, restore its outcome and write nothing.
    from tests.faults.matrix import run_world
    from tests.faults.worlds import SpannerWorld

    with SpannerWorld(tmp_path / "spanner") as world:
        results = run_world(world, ["extract.after_changelog_commit"], say=lambda line: None)

    assert [r.crash for r in results] == ["failed", "none"]  # the job died, the task failed
    assert_clean(results)


@pytest.mark.faults_matrix
@pytest.mark.parametrize("source", ["spanner_change_stream", "datastream", "bigtable_change_stream",
                                    "debezium", "spanner_commit_ts"])
def test_every_crash_point_of_a_source_loses_and_doubles_nothing(airflow_db, tmp_path, source):
    from tests.faults.matrix import run_world
    from tests.faults.worlds import WORLDS

    with WORLDS[source](tmp_path / source) as world:
        results = run_world(world, list(POINTS), say=print)

    assert [r.point for r in results][: len(POINTS)] == list(POINTS)
    assert all(r.crash in ("killed", "failed") for r in results if r.point)
    assert_clean(results)
