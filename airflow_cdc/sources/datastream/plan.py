"""What Datastream adds to the protocol's plan step: its files as partitions, its job's options.

The plan step itself is the generic one (:func:`airflow_cdc.pipeline.protocol.plan_window`):
every settled event file not yet known to the state store becomes a partition of the window,
in the same transaction that opens it, next to the one progress partition. The plan file
carries when it was made (the idle decision uses that instant, so a re-run decides the same
way), the allowed lateness, the idle timeout and the primary keys
looked up in the source database (:mod:`.keys`): found when the window is first planned and
kept by every re-plan, so a re-run keys its events as the first run did.

Commit is the generic commit: the window's counts keep what only this job knows (events,
duplicates, dead letters, files, and ``idle_declared`` when completeness was declared by the
idle timeout rather than proven by events).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

from airflow_cdc.model import format_ts
from airflow_cdc.sources.datastream.keys import SOURCE_PRIMARY_KEYS_OPTION


def plan_options(
    kept: Mapping | None,
    *,
    planned_at: datetime,
    allowed_lateness: timedelta,
    idle_timeout: timedelta | None,
    source_primary_keys: Callable[[], Mapping[str, Sequence[str]]] | None = None,
) -> dict:
    """The options Datastream's extract job reads from the plan file.

    ``kept`` are the options of the plan file an earlier attempt wrote (None for the first):
    its ``planned_at`` and primary keys are kept. ``source_primary_keys`` looks up {table
    identifier: key columns} in the source database; it is called only for the first plan.
    """
    options = {
        "planned_at": (kept.get("planned_at") if kept else None) or format_ts(planned_at),
        "allowed_lateness_seconds": allowed_lateness.total_seconds(),
        "idle_timeout_seconds": None if idle_timeout is None else idle_timeout.total_seconds(),
    }
    if kept is not None:
        keys = kept.get(SOURCE_PRIMARY_KEYS_OPTION)
    else:
        keys = None if source_primary_keys is None else source_primary_keys()
    if keys:
        options[SOURCE_PRIMARY_KEYS_OPTION] = {t: list(c) for t, c in sorted(keys.items())}
    return options
