"""Datastream's plan and commit steps (Airflow-free; the operators call them).

Plan: every settled event file not yet known to the state store becomes a partition of the
window, in the same transaction that opens it, next to the one progress partition. The plan
file carries when it was made (the idle decision uses that instant, so a re-run decides the
same way), the allowed lateness, the idle timeout, the dead-letter table and the primary keys
looked up in the source database (:mod:`.keys`): found when the window is first planned and
kept by every re-plan, so a re-run keys its events as the first run did.

Commit: as the generic commit, but the window's counts keep what only this job knows
(events, duplicates, dead letters, files, and ``idle_declared`` when completeness was
declared by the idle timeout rather than proven by events).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

from airflow_cdc.model import PartitionPosition, Window, WindowState, format_ts
from airflow_cdc.pipeline.files import WindowPlanFile, write_private
from airflow_cdc.pipeline.protocol import StreamConfig
from airflow_cdc.sources.datastream import PROGRESS_PARTITION
from airflow_cdc.sources.datastream.discovery import EventFile, file_partitions
from airflow_cdc.sources.datastream.keys import SOURCE_PRIMARY_KEYS_OPTION


def plan_datastream_window(
    store,
    config: StreamConfig,
    window: Window,
    owner: str,
    lease_seconds: float,
    files: list[EventFile],
    planned_at: datetime,
    catalog_name: str,
    allowed_lateness: timedelta,
    idle_timeout: timedelta | None,
    source_primary_keys: Callable[[], Mapping[str, Sequence[str]]] | None = None,
) -> WindowPlanFile:
    """Open the window with the new files as partitions; write (or keep) its plan file.

    ``source_primary_keys`` looks up {table identifier: key columns} in the source database;
    it is called only when the window has no plan file yet.
    """
    store.register_stream(config.stream_id, config.source_kind, config.fingerprint)
    plan = store.plan_window(
        window,
        owner,
        lease_seconds,
        [PartitionPosition(PROGRESS_PARTITION, window.start)],
        new_partitions=file_partitions(files, window.start),
    )
    path = config.plan_path(window)
    if path.exists() and plan.window.state is not WindowState.PLANNED:
        return WindowPlanFile.from_json(path.read_text())
    kept = WindowPlanFile.from_json(path.read_text()) if path.exists() else None
    options = {
        "planned_at": (kept.options.get("planned_at") if kept else None) or format_ts(planned_at),
        "allowed_lateness_seconds": allowed_lateness.total_seconds(),
        "idle_timeout_seconds": None if idle_timeout is None else idle_timeout.total_seconds(),
        "dead_letter_table": f"{catalog_name}.{config.dead_letter_table}",
    }
    if kept is not None:
        keys = kept.options.get(SOURCE_PRIMARY_KEYS_OPTION)
    else:
        keys = None if source_primary_keys is None else source_primary_keys()
    if keys:
        options[SOURCE_PRIMARY_KEYS_OPTION] = {t: list(c) for t, c in sorted(keys.items())}
    plan_file = WindowPlanFile(
        window=window,
        positions=tuple(plan.positions),
        pending_children=(),
        source=config.source_spec,
        changelog_table=f"{catalog_name}.{config.changelog_table}",
        attempt=plan.window.attempt,
        options=options,
    )
    write_private(path, plan_file.to_json())
    return plan_file

