"""Step 2 of the window protocol: what the extract task decides around its Spark job.

Whether the window needs reading at all (already committed, or proven empty before), the
empty-window rule (:mod:`airflow_cdc.pipeline.empty_window`), whether the same Spark
application applies the window too, the job's arguments, and recording its result. The
Airflow side builds the job spec and runs it; each decision here is safe to take again (I1).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_cdc.model import Window, WindowState
from airflow_cdc.pipeline.apply_step import FUSED_APPLY_RESULT
from airflow_cdc.pipeline.empty_window import (
    mark_spark_extract,
    probe_empty_window,
    spark_extract_started,
    worth_probing,
)
from airflow_cdc.pipeline.files import WindowPlanFile, with_source_overrides, write_private
from airflow_cdc.pipeline.lease import kept_lease
from airflow_cdc.pipeline.protocol import StreamConfig, committed_window
from airflow_cdc.pipeline.step_errors import StepFailure
from airflow_cdc.sources.registry import build_source


@dataclass(frozen=True)
class ExtractSkip:
    """Why the window is not read again: ``committed`` (its outcomes are recorded; ``record``
    is the window's record) or ``proven-empty`` (extracted by the empty-window rule)."""

    reason: str
    record: Any = None


def extract_skip(store, window: Window, folder) -> ExtractSkip | None:
    """Whether the extract must not read the window again, and why; None when it reads.

    A committed window is never read again (I1). A window the empty-window rule extracted
    (EXTRACTED with no changelog snapshot and its outcome file written) is not read again
    either: a second read could differ from the outcome already written.
    """
    record = committed_window(store, window)
    if record is not None:
        return ExtractSkip("committed", record)
    record = store.get_window(window.stream_id, window.start)
    if (record is not None and record.state is WindowState.EXTRACTED
            and record.changelog_snapshot_id is None and (folder / "outcome.json").exists()):
        return ExtractSkip("proven-empty", record)
    return None


def extract_if_empty(store, config: StreamConfig, window: Window, owner: str, *, source,
                     probe_limit: int, overrides: Callable[[], dict], lease_seconds: float,
                     log=None) -> dict | None:
    """The empty-window rule: when it applies and reading the window here finds no change,
    the window is recorded as extracted with no changelog snapshot and its counts returned;
    otherwise None (the Spark job reads it).

    It applies only to a source that proves empty windows, while no Spark extract of the
    window was ever submitted, and when the previous window was small enough
    (:func:`~airflow_cdc.pipeline.empty_window.worth_probing`). ``overrides`` gives the
    source's short-lived secrets, asked only when the window is probed.
    """
    folder = config.window_dir(window)
    if (not source.proves_empty_windows or spark_extract_started(folder)
            or not worth_probing(store, window, probe_limit)):
        return None
    plan = WindowPlanFile.from_json(config.plan_path(window).read_text())
    secrets = overrides()
    if secrets:
        plan = with_source_overrides(plan, secrets)
    with kept_lease(store, window, owner, lease_seconds, log=log):
        outcome = probe_empty_window(build_source(plan.source, plan.options), plan)
    if outcome is None:
        if log is not None:
            log.info("window %s has changes: the Spark job reads it", window.window_id)
        return None
    if log is not None:
        log.info("window %s is empty (every partition read, no change): no Spark job",
                 window.window_id)
    write_private(config.outcome_path(window), outcome.to_json())
    store.mark_extracted(window, owner, None)
    return dict(outcome.counts)


def fused_apply_args(store, window: Window, folder, job_config: Callable[[], dict] | None,
                     log=None) -> list[str]:
    """The extract job's arguments to apply the window too (empty when it must not): only
    with a fused apply (``job_config`` builds its apply job config), and only when every
    earlier window of the stream is applied (windows apply in order; otherwise the apply
    task runs its own job, in order)."""
    if job_config is None:
        return []
    pending = [w for w in store.list_windows(window.stream_id, states=[WindowState.COMMITTED])
               if w.start < window.start]
    if pending:
        if log is not None:
            log.info("window %s: an earlier window is not applied yet, so the apply task "
                     "applies this one", window.window_id)
        return []
    config_path = folder / "apply.json"
    write_private(config_path, json.dumps(job_config(), indent=1))
    return ["--apply-config", str(config_path),
            "--apply-result", str(folder / FUSED_APPLY_RESULT)]


def extract_job_args(config: StreamConfig, window: Window, folder) -> list[str]:
    """The extract job's arguments (``spark_jobs/extract.py``), after marking the window's
    Spark extract as submitted: from then on only the changelog's window tag decides (I1)."""
    mark_spark_extract(folder)
    return [
        "--plan", str(config.plan_path(window)),
        "--outcome", str(config.outcome_path(window)),
        "--result", str(folder / "extract-result.json"),
    ]


def record_extract(store, window: Window, owner: str, folder) -> dict:
    """Record the job's changelog snapshot (the window becomes EXTRACTED); the step's summary.

    A job that found its changelog commit but not its snapshot cannot prove the outcome: no
    retry can mend that (StepFailure), the stream must be reset.
    """
    result = json.loads((folder / "extract-result.json").read_text())
    if result.get("snapshot_id") is None:
        raise StepFailure(
            f"extract of window {window.window_id} found its changelog commit but not its "
            f"snapshot (expired?): the outcome cannot be proven; reset the stream"
        )
    store.mark_extracted(window, owner, int(result["snapshot_id"]))
    return {
        "window_id": window.window_id,
        "changelog_snapshot_id": int(result["snapshot_id"]),
        "skipped": bool(result.get("skipped")),
        **result.get("counts", {}),
    }


def with_rerun_hint(error, window: Window):
    """``error`` (a failed extract job's error, same type and fields) with what it left: the
    window stays PLANNED and is read again by a re-run, which writes each change once (I1).

    The job may have died anywhere (a killed driver writes no error line): before its
    changelog commit nothing of the window is kept; after it, the re-run finds the commit
    tagged with the window and writes nothing, so a re-run is always safe.
    """
    error.args = (
        f"{error}\nwindow {window.window_id} of {window.stream_id!r} stays PLANNED: its extract "
        f"recorded nothing in the state store. Re-run it: the task's retries do, or clear this "
        f"extract task (its downstream tasks follow); a changelog commit the job made before it "
        f"ended is found by its window tag and not written twice.",
    )
    return error
