"""A change source's Spark side: what the extract and apply jobs ask of a source beyond its
wire format, where DataFrames are built and taken.

The wire format (parsing records, planning partitions, reading one partition into change
rows) lives in ``airflow_cdc/sources/<kind>/`` and imports no pyspark; a source whose window
needs more of Spark has a :class:`SparkSide` subclass here, in ``spark_jobs/sources/<kind>.py``,
found by the source's kind (:func:`airflow_cdc.spark_jobs.sources.spark_side`). The hooks, in
the order the extract job (``spark_jobs/extract.py``) calls them:

====================  =====================================================================
:meth:`read_window`   the whole window read at once, for a source that
                      :attr:`~airflow_cdc.sources.base.ChangeSource.reads_whole_windows`
:meth:`native_rows`   rows Spark reads natively beside the partitions (Debezium's staged
                      snapshot batches)
:meth:`drop_repeats`  the window without the events the changelog holds already, for a source
                      that delivers at least once (:mod:`.dedup`)
:meth:`check_window`  completeness only the whole window can prove (Debezium's transactions)
:meth:`apply_window`  a source's own apply (Bigtable's cells), for a source that
                      :attr:`~airflow_cdc.sources.base.ChangeSource.applies_own_changes`
====================  =====================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

# Spark tasks per core that read a window's partitions (the extract job's rounds, the
# partitioned queries of a commit-timestamp window): a few tasks per core balance partitions
# of unequal size without paying a Spark task's fixed cost once per partition.
READ_TASKS_PER_CORE = 4


@dataclass
class WindowRead:
    """What reading a window returned, on the driver.

    ``rows`` are the window's change rows: a DataFrame of the changelog's columns, or, when
    the read tasks wrote the changelog's files themselves, those files
    (``airflow_cdc.spark_jobs.changelog_files.ChangelogFiles``). ``dead_letters``: a DataFrame
    of the changelog's columns and ``reason``, or None. ``counts`` are the source's own counts
    of the window (they reach the state store and XCom as the job reports them). ``kept`` are
    the local checkpoints (read frames) the rows come from, freed by the extract job once the
    window is committed.
    """

    rows: Any
    outcomes: list
    counts: dict = field(default_factory=dict)
    dead_letters: Any = None
    pending_children: tuple = ()  # children a later window reads (their parents not all read)
    kept: tuple = ()  # local checkpoints the extract job frees once the window is committed


class SparkSide:
    """The plain Spark side: partitions read by the extract job, every row kept as read."""

    #: True when every row the read tasks make reaches the changelog unchanged: the Spark side
    #: adds none (:meth:`native_rows`), drops none (:meth:`drop_repeats`) and checks none as a
    #: whole (:meth:`check_window`). Only then may the read tasks write the changelog's files
    #: themselves (``airflow_cdc.spark_jobs.changelog_files.changelog_writer``).
    rows_pass_through: ClassVar[bool] = True

    def __init__(self, source) -> None:
        self.source = source

    def read_window(self, spark, plan) -> WindowRead:
        """The window read whole (a source that reads whole windows overrides it)."""
        raise NotImplementedError(f"source {self.source.kind!r} reads partitions (read_partition)")

    def native_rows(self, spark, plan):
        """Change rows of the window that Spark reads natively beside the partitions' reads
        (a DataFrame of the changelog's columns, ``window_id`` set), or None."""
        return None

    def drop_repeats(self, spark, plan, frame):
        """The window's changelog frame without rows the changelog already holds (a source
        that delivers at least once); the plain side keeps every row."""
        return frame

    def check_window(self, spark, plan, frame) -> dict:
        """Raise when the window's changes (``frame``: its changelog rows after
        :meth:`drop_repeats`) prove it incomplete, naming what is missing, so it stays
        uncommitted; return counts for the window's summary. The plain side checks nothing."""
        return {}

    def apply_window(self, spark, config, data, tables) -> list[dict]:
        """Apply the window (a source whose changes are not row images overrides it):
        ``config`` is the apply job's parsed config, ``data`` its JSON, ``tables`` the
        window's tagged commits; returns one dict of ``TableResult`` fields per source table."""
        raise NotImplementedError(f"source {self.source.kind!r} is applied by the apply engine")
