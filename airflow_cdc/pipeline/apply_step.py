"""Step 4 of the window protocol: what the apply task decides around its Spark job.

Whether the window may be applied (committed, every earlier window applied), whether there is
anything to fold (an empty window has no changelog commit), whether the extract's Spark
application applied it already (a fused apply), the job's configuration, and recording the
target snapshots. The Airflow side builds the job spec and runs it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_cdc.faults import crash_point
from airflow_cdc.model import Window, WindowState, format_ts
from airflow_cdc.pipeline.protocol import StreamConfig, require_earlier_windows_applied
from airflow_cdc.pipeline.step_errors import StepFailure

# The fused job's record of its apply (spark_jobs/extract.py --apply-result), in the window folder.
FUSED_APPLY_RESULT = "fused-apply-result.json"
# How long deletes are remembered by default (I3): a week.
DEFAULT_TOMBSTONE_HORIZON_SECONDS = 7 * 24 * 3600


@dataclass(frozen=True)
class ApplySettings:
    """What the apply job is told besides the window. The apply task and a fused extract
    build the same job config from it.

    :param targets: the apply job's ``targets`` object: ``namespace`` for target tables,
        ``mapping`` from source table to target name, ``history`` (SCD type 2), ``write_mode``
        and ``compact_delete_files`` (see :class:`~airflow_cdc.operators.apply.CdcApplyOperator`).
    :param on_dead_letter: ``fail`` (the window fails and names the bad rows) or ``continue``.
    :param tombstone_horizon_seconds: how long deletes are remembered (I3).
    """

    targets: Mapping[str, Any] | None = None
    on_dead_letter: str = "fail"
    tombstone_horizon_seconds: int = DEFAULT_TOMBSTONE_HORIZON_SECONDS

    def job_config(self, config: StreamConfig, catalog_name: str, window: Window) -> dict:
        """The apply job's ``--job-config`` object for ``window`` (``spark_jobs/apply/config.py``)."""
        from airflow_cdc.sources.registry import class_of_spec

        targets = {"namespace": "current", **dict(self.targets or {})}
        targets.setdefault("dead_letter_table", config.dead_letter_table)
        # A source with its own apply (Bigtable's cells) is named for the apply job.
        source_applies = class_of_spec(config.source_spec).applies_own_changes
        return {
            "catalog": catalog_name,
            "stream": config.stream_id,
            "window_id": window.window_id,
            "window_end": format_ts(window.end),
            "changelog_table": config.changelog_table,
            "targets": targets,
            **({"source": config.source_spec} if source_applies else {}),
            "policies": {
                "on_dead_letter": self.on_dead_letter,
                "tombstone_horizon_seconds": int(self.tombstone_horizon_seconds),
            },
        }


def window_to_apply(store, window: Window):
    """The window's record when apply must fold it; raises StepFailure for a window not
    committed yet. A COMPLETE window is returned as it is (nothing to apply: the caller
    skips). Windows apply in order: a COMMITTED window waits until every earlier window of
    the stream is applied (:func:`~airflow_cdc.pipeline.protocol.require_earlier_windows_applied`).
    """
    record = store.get_window(window.stream_id, window.start)
    if record is None or not record.committed:
        state = "never planned" if record is None else record.state.value
        raise StepFailure(
            f"window {window.window_id} of {window.stream_id} is {state}: apply runs after "
            f"commit; clear the window's commit task"
        )
    if record.state is WindowState.COMMITTED:
        require_earlier_windows_applied(store, window)
    return record


def fused_apply_result(folder, changelog_snapshot_id: int, log=None) -> dict | None:
    """The apply result a fused extract job left for the window (``folder``), when it applied
    the window's changelog commit ``changelog_snapshot_id``; None otherwise (no fused apply,
    or it did not apply: dead letters under ``fail``, an error), and the apply task runs the
    apply job itself, which reports why."""
    path = folder / FUSED_APPLY_RESULT
    if not path.exists():
        return None
    fused = json.loads(path.read_text())
    applied = fused.get("apply") or {}
    if fused.get("changelog_snapshot_id") != changelog_snapshot_id or applied.get("status") != "applied":
        if log is not None:
            log.info("the extract job did not apply the window (%s): running the apply job",
                     fused.get("error") or applied.get("status") or "another changelog commit")
        return None
    if log is not None:
        log.info("the extract job applied the window in the same Spark application: "
                 "recording it, no Spark job")
    return applied


def recorded_apply_result(record, window: Window, folder, log=None) -> dict | None:
    """The apply result already there for the window, or None when the apply job must run.

    An empty window (no changelog commit, :mod:`airflow_cdc.pipeline.empty_window`) has
    nothing to fold; a fused extract may have applied the window already.
    """
    if record.changelog_snapshot_id is None:
        if log is not None:
            log.info("window %s is empty: nothing to apply, no Spark job", window.window_id)
        return {"tables": [], "dead_letter_rows": 0}
    return fused_apply_result(folder, record.changelog_snapshot_id, log)


def dead_letter_failure(result_path, window: Window, error) -> StepFailure | None:
    """The failure to raise when a failed apply job stopped for the dead-letter policy (a retry
    cannot help), or None when it failed otherwise (a lost driver, a failed commit: the
    task's retries run the job again, I1)."""
    result = json.loads(result_path.read_text()) if result_path.exists() else {}
    if result.get("status") != "failed":
        return None
    return StepFailure(
        f"apply of window {window.window_id} failed: "
        f"{result.get('dead_letter_rows')} change rows went to the dead-letter "
        f"table {result.get('dead_letter_table')} under on_dead_letter='fail'\n{error}"
    )


def warn_failed_compactions(log, window_id: str, result: Mapping) -> int:
    """Log a warning per compaction that failed after the window's commits (the apply result's
    ``compaction_errors``): the window is applied, the next window tries again. Returns how
    many there were."""
    errors = [error for table in result.get("tables", []) for error in table.get("compaction_errors") or []]
    for error in errors:
        log.warning("window %s is applied, but a compaction after it failed (the next window "
                    "tries again): %s", window_id, error)
    return len(errors)


def record_apply(store, window: Window, owner: str, result: Mapping, log=None):
    """Record the target snapshots the apply committed (the window becomes APPLIED); the
    window's new record and the tables applied."""
    crash_point("apply.before_state_update")
    if log is not None:
        warn_failed_compactions(log, window.window_id, result)
    snapshot_ids = {
        table["target_table"]: int(table["target_snapshot_id"])
        for table in result.get("tables", [])
        if table.get("target_table") and table.get("target_snapshot_id") is not None
    }
    return store.mark_applied(window, owner, snapshot_ids), sorted(snapshot_ids)


def apply_counts(result: Mapping) -> dict:
    """The apply summary's own part: dead letters, and each source table's changes."""
    return {
        "dead_letter_rows": result.get("dead_letter_rows", 0),
        "tables": {
            t["source_table"]: {k: t[k] for k in ("changes", "upserts", "deletes")}
            for t in result.get("tables", [])
            if t.get("source_table")
        },
    }
