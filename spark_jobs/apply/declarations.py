"""Declarations: plan the window's tables from the record its changelog commit keeps, or from
an aggregate of its rows when that record cannot be trusted.

Saves the aggregate of the window's rows that planning otherwise reads: one Spark job over
the whole window (bench/window.py).

Interface: :func:`fold_from_declarations`. The record is trusted only when

* the window's changelog commit exists and records its declarations (``changelog.py``), and no
  commit since could have changed the window's rows: every later commit is an append of
  another window or a compaction (:func:`recorded_declarations`);
* then, per table, the fold counts as many rows as the record says, and the record would not
  dead-letter the table whole (no fold reads those rows to check them).

Otherwise every table is planned and folded again from an aggregate of the rows
(``changelog.window_declarations``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from pyspark.sql import DataFrame, SparkSession

from airflow_cdc.model import WINDOW_SNAPSHOT_PROPERTY
from airflow_cdc.spark_jobs.apply.schema import Declaration
from airflow_cdc.spark_jobs.changelog import recorded_declarations as read_record
from airflow_cdc.spark_jobs.changelog import window_declarations
from airflow_cdc.spark_jobs.commits import window_commit_and_since


class Checked(Protocol):
    declarations_disagree: bool  # the table's rows are not what the record says


W = TypeVar("W", bound=Checked)


def fold_from_declarations(
    spark: SparkSession,
    changelog: str,
    window_id: str,
    rows: DataFrame,
    fold_tables: Callable[[list[Declaration], bool], list[W]],
    release: Callable[[W], None],
) -> list[W]:
    """``fold_tables(declarations, check)`` from the window's recorded declarations, checked
    (``check=True``); again from an aggregate of ``rows`` when there is no trusted record or a
    table's fold disagrees with it. ``release`` frees a discarded table's frames."""
    recorded = recorded_declarations(spark, changelog, window_id)
    if recorded is not None:
        works = fold_tables(recorded, True)
        if not any(work.declarations_disagree for work in works):
            return works
        for work in works:  # the record does not describe the rows: aggregate them instead
            release(work)
    return fold_tables(window_declarations(rows), False)


def recorded_declarations(spark: SparkSession, changelog: str, window_id: str) -> list[Declaration] | None:
    """The declarations the window's changelog commit records (see ``changelog.py``), or None.

    They stand for an aggregate of the window's rows because the window's rows are the rows
    of that one commit (the extract's protocol: one tagged commit per window, and nothing
    else writes the window's rows), the record accounts for every row the commit added, and
    no commit since has deleted or rewritten rows (compactions and appends do not change the
    window's rows; a DELETE, UPDATE or MERGE on the changelog does). Each fold then checks its
    table's row count against them (``table_fold.fold_planned_table``).
    """
    found = window_commit_and_since(spark, changelog, window_id)
    if found is None:
        return None
    commit, since = found
    for snapshot in since:
        summary = snapshot.get("summary") or {}
        # Appends of other windows and compactions (replace) leave the window's rows as they
        # are; a second commit of the window (a racing extract) or any other operation may not.
        if summary.get("operation") not in ("append", "replace") or summary.get(WINDOW_SNAPSHOT_PROPERTY) == window_id:
            return None
    return read_record(commit.summary)
