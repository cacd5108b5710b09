"""Local checkpoints freed when a job is done with them, not at a later JVM GC.

A local checkpoint (``DataFrame.localCheckpoint``) keeps its blocks on the executors until the
checkpointed RDD is garbage collected; a warm driver that runs window after window in one
session would carry them into the next window. The extract's read frames
(``extract.read_partitions``) and apply's folded frames (``apply/table_fold.release``) are freed here.
"""

from __future__ import annotations


def release_checkpoint(frame) -> None:
    """Free ``frame``'s blocks now when it is a local checkpoint; any other frame is left as is."""
    plan = frame._jdf.queryExecution().logical()
    if plan.getClass().getSimpleName() == "LogicalRDD":
        plan.rdd().unpersist(False)
