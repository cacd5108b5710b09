"""The empty-window rule: a window its source proves empty is extracted and applied without Spark.

A performance strategy. Saves both Spark applications of an empty window (each a
JVM, a SparkSession and the Iceberg catalog); ``bench/window.py``'s empty window shows it
(figures in docs/performance.md).

Most windows of a quiet stream hold no change at all, yet each paid two Spark applications
to learn it. The extract task (:class:`~airflow_cdc.operators.extract.CdcExtractOperator`)
may instead read the window's partitions itself, in the Airflow worker, and stop at the
first change:

1. *When.* Only for a source that says its partitions can be read there
   (:attr:`~airflow_cdc.sources.base.ChangeSource.proves_empty_windows`: Spanner), only when
   the stream's previous window recorded at most ``limit`` changes (:func:`worth_probing`: a
   busy stream is not read twice; a stream's first window is never probed), and only while
   no Spark extract of this window was ever submitted (:func:`spark_extract_started`: the
   extract task leaves a marker in the window folder before it submits one).
2. *Read* (:func:`probe_empty_window`): round after round as the extract job reads them
   (:class:`~airflow_cdc.pipeline.partition_lineage.WindowLineage`), one partition at a
   time; the first partition that returns a change row or a dead letter ends the probe (the
   window is not empty: the Spark job reads it). Then the same checks as the job's
   (children of a source that does not split, transactions, ``check_partitions``).
3. *The rule.* A window whose every partition was read to its outcome with no change row and
   no dead letter has no changelog commit: its extract writes the outcome file and records
   the window as extracted with no changelog snapshot (``changelog_snapshot_id`` None); the
   commit task records the outcomes as for any window; apply has nothing to fold and marks
   the window applied with no target snapshot.

Why exactly-once (I1) still holds without the changelog commit tagged with the window, which
is what makes a Spark extract's re-run write nothing: an empty window writes no table, so a
re-run has nothing to find and nothing to write twice. A re-run before the window is
recorded as extracted reads it again and writes its outcome file again; once recorded, the
window is not read again (its outcome file stands), and only the commit task's one
transaction records outcomes. The marker of step 1 keeps the rule off for a window a
Spark extract may already have committed rows for, whatever the source answers later.
"""

from __future__ import annotations

from airflow_cdc.pipeline.files import WindowOutcomeFile, WindowPlanFile
from airflow_cdc.pipeline.partition_lineage import WindowLineage, check_transactions, run_rounds

# Written in the window folder before a Spark extract of the window is submitted.
SPARK_EXTRACT_MARKER = "spark-extract-submitted"
# The previous window's changes up to which a window is probed (PipelineOptions.empty_window_probe_limit).
DEFAULT_PROBE_LIMIT = 10_000


class _NotEmpty(Exception):
    """A partition returned a change row or a dead letter: the probe stops there."""


def worth_probing(store, window, limit: int) -> bool:
    """Whether the stream's window before ``window`` recorded at most ``limit`` changes (a
    first window, or a previous one not committed, is not probed)."""
    if limit < 0:
        return False
    earlier = [w for w in store.list_windows(window.stream_id) if w.start < window.start]
    if not earlier or not earlier[-1].committed:
        return False
    return int((earlier[-1].counts or {}).get("changes", limit + 1)) <= limit


def spark_extract_started(folder) -> bool:
    """Whether a Spark extract of the window whose folder is ``folder`` was ever submitted."""
    return (folder / SPARK_EXTRACT_MARKER).exists()


def mark_spark_extract(folder) -> None:
    """Record, before submitting it, that a Spark extract of the window runs (step 1)."""
    from airflow_cdc.work_root import write_text

    write_text(folder / SPARK_EXTRACT_MARKER, "")


def probe_empty_window(source, plan: WindowPlanFile) -> WindowOutcomeFile | None:
    """Step 2: the window's outcome when reading ``plan`` in this process finds no change, or
    None when a partition returned a change or a dead letter (or reported children the source
    does not declare: the Spark job then fails naming it). Raises as the extract job would
    when the window is incomplete (a transaction missing records)."""
    window = plan.window
    lineage = WindowLineage(plan.positions, plan.pending_children, source.resolve_child)
    source_counts: dict[str, int] = {}

    def read_round(batch):
        results = []
        for position in batch:
            read = source.read_partition(window, position)
            if read.rows or read.dead_letters:
                raise _NotEmpty
            for name, value in read.counts.items():
                source_counts[name] = source_counts.get(name, 0) + value
            results.append((read.outcome, read.transactions))
        return results

    try:
        outcomes, tallies = run_rounds(lineage, read_round)
    except _NotEmpty:
        return None
    if not source.partitions_split and any(o.children for o in outcomes):
        return None
    transactions = check_transactions(tallies, window, outcomes)
    source.check_partitions(outcomes, lineage.still_pending)
    counts = {
        "records": sum(o.records for o in outcomes),
        "partitions": len(outcomes),
        "children": len({c.partition_id for o in outcomes for c in o.children}),
        "finished": sum(1 for o in outcomes if o.finished),
        "transactions": len(transactions),
        "rounds": lineage.rounds,
        **source_counts,
    }
    return WindowOutcomeFile(
        window_id=window.window_id,
        outcomes=tuple(sorted(outcomes, key=lambda o: o.partition_id)),
        pending_children=tuple(lineage.still_pending),
        counts=source.window_counts(counts, 0),
    )
