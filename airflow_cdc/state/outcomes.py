"""Checks a window's partition outcomes against its plan and the partition lineage.

Pure: it reads the stored partitions it is given and says what the commit must write, so the
store's commit transaction only executes the answer. A child with several parents (a Spanner
merge) becomes READY only when every parent has reported it, across windows; a child born in a
window may be read in that same window, but only once all its parents reported it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from airflow_cdc.model import (
    ChildPartition,
    PartitionOutcome,
    PartitionState,
    Window,
    all_parents_reported,
    child_resume_position,
    parent_handovers,
    format_ts,
)
from airflow_cdc.state.errors import OutcomeError, WatermarkRegressionError
from airflow_cdc.state.records import PartitionRecord, window_name


@dataclass(frozen=True)
class ChildChange:
    """A child reported in the window: inserted (``existing_state`` None) or updated."""

    child: ChildPartition
    reported_by: tuple[str, ...]
    existing_state: PartitionState | None
    new_state: PartitionState
    resume_position: str | None = None  # the parents' hand-overs so far


@dataclass(frozen=True)
class OutcomeChange:
    outcome: PartitionOutcome
    previous_state: PartitionState
    previous_watermark: datetime
    planned: bool  # False for a child born in the window and read in it


@dataclass(frozen=True)
class CommitChanges:
    children: tuple[ChildChange, ...]
    outcomes: tuple[OutcomeChange, ...]
    counts: dict


def resolve_commit(
    window: Window,
    planned_ids: frozenset[str],
    stored: Mapping[str, PartitionRecord],
    outcomes: Sequence[PartitionOutcome],
    extra_counts: Mapping[str, object],
) -> CommitChanges:
    """What committing ``outcomes`` writes; raises if they do not fit the plan or lineage.

    ``stored`` holds the stream's stored rows of every planned, reported or reporting partition.

    1. Every partition has at most one outcome and every planned partition has one.
    2. Each reported child lists its reporter among its parents, and all reports of one child
       (in this window and before) agree on its parents.
    3. A child's reporters are those stored plus this window's; with all of them it is READY.
    4. An outcome for a partition outside the plan is accepted only for a child reported in
       this window whose parents have all reported it, and that was never read before.
    5. No watermark moves backwards.
    6. Counts: records, partitions, finished and children, plus the caller's own keys.
    """
    name = window_name(window.stream_id, window.start, window.end)
    _require_one_outcome_each(name, planned_ids, outcomes)
    reports = _child_reports(name, stored, outcomes)
    children = [_child_change(reports[pid], stored.get(pid)) for pid in sorted(reports)]
    changes = []
    for outcome in outcomes:
        previous_state, previous_watermark = _read_from(name, planned_ids, stored, reports, outcome)
        _require_forward(name, window, outcome, previous_watermark)
        planned = outcome.partition_id in planned_ids
        changes.append(OutcomeChange(outcome, previous_state, previous_watermark, planned))
    counts = _counts(name, outcomes, reports, extra_counts)
    return CommitChanges(tuple(children), tuple(changes), counts)


@dataclass
class _ChildReport:
    """One child as this window's outcomes report it, and which partitions reported it."""

    child: ChildPartition
    reporters: set[str] = field(default_factory=set)
    handovers: dict[str, str | None] = field(default_factory=dict)

    def resume_position(self, row: PartitionRecord | None) -> str | None:
        """The child's resume position: the hand-overs stored before and this window's."""
        stored = parent_handovers(row.resume_position) if row is not None else None
        return child_resume_position({**(stored or {}), **self.handovers})

    def reported_by(self, row: PartitionRecord | None) -> set[str]:
        """The parents that reported the child, in this window or before."""
        return self.reporters | (set(row.reported_by) if row is not None else set())

    def complete(self, row: PartitionRecord | None) -> bool:
        """Whether every parent reported the child (the protocol's one child rule)."""
        return all_parents_reported(self.child.parent_ids, self.reported_by(row))

    def waiting_for(self, row: PartitionRecord | None) -> list[str]:
        """The parents that have not reported the child yet (for messages)."""
        return sorted(set(self.child.parent_ids) - self.reported_by(row))


# 1. one outcome per partition, and one for every planned partition
def _require_one_outcome_each(
    name: str, planned_ids: frozenset[str], outcomes: Sequence[PartitionOutcome]
) -> None:
    seen: set[str] = set()
    for outcome in outcomes:
        if not isinstance(outcome, PartitionOutcome):
            raise TypeError(
                f"outcomes of {name} must be PartitionOutcome values, "
                f"got {type(outcome).__name__}: {outcome!r}"
            )
        if outcome.partition_id in seen:
            raise OutcomeError(
                f"partition {outcome.partition_id!r} has two outcomes in {name}: a "
                f"partition is read once per window, so the extract must report it once"
            )
        seen.add(outcome.partition_id)
    missing = sorted(planned_ids - seen)
    if missing:
        raise OutcomeError(
            f"{name} planned partitions {missing} but has no outcome for them: every "
            f"planned partition must report an outcome (finished, or continuing with a "
            f"watermark), or the window must be extracted again"
        )


# 2. children and their reporters, every report agreeing on the child's parents
def _child_reports(
    name: str, stored: Mapping[str, PartitionRecord], outcomes: Sequence[PartitionOutcome]
) -> dict[str, _ChildReport]:
    reports: dict[str, _ChildReport] = {}
    for outcome in outcomes:
        for child in outcome.children:
            if outcome.partition_id not in child.parent_ids:
                raise OutcomeError(
                    f"partition {outcome.partition_id!r} reported child {child.partition_id!r} "
                    f"in {name}, but the child's parents are {list(child.parent_ids)}: a "
                    f"child record must list the partition that reported it among its parents"
                )
            known = reports.get(child.partition_id)
            parents = set(child.parent_ids)
            if known is not None and set(known.child.parent_ids) != parents:
                raise OutcomeError(
                    f"child {child.partition_id!r} is reported in {name} with parents "
                    f"{sorted(known.child.parent_ids)} and with parents {sorted(parents)}: all "
                    f"reports of one child must agree on its parents"
                )
            row = stored.get(child.partition_id)
            if row is not None and set(row.parent_ids) != parents:
                raise OutcomeError(
                    f"child {child.partition_id!r} is reported in {name} with parents "
                    f"{sorted(parents)}, but it was recorded with parents "
                    f"{sorted(row.parent_ids)}: all reports of one child must agree on its parents"
                )
            report = reports.setdefault(child.partition_id, _ChildReport(child))
            report.reporters.add(outcome.partition_id)
            report.handovers[outcome.partition_id] = child.handover
    return reports


# 3. a child with all its parents' reports is READY
def _child_change(report: _ChildReport, row: PartitionRecord | None) -> ChildChange:
    reported_by = report.reported_by(row)
    if row is None or row.state == PartitionState.CREATED:
        new_state = PartitionState.READY if report.complete(row) else PartitionState.CREATED
    else:
        new_state = row.state  # already READY, read or finished: a repeated report
    created = row is None or row.state in (PartitionState.CREATED, PartitionState.READY)
    return ChildChange(
        child=report.child,
        reported_by=tuple(sorted(reported_by)),
        existing_state=None if row is None else row.state,
        new_state=new_state,
        resume_position=report.resume_position(row) if created else row.resume_position,
    )


# 4. where the partition was read from: its plan, or a child born and fully reported here
def _read_from(
    name: str,
    planned_ids: frozenset[str],
    stored: Mapping[str, PartitionRecord],
    reports: Mapping[str, _ChildReport],
    outcome: PartitionOutcome,
) -> tuple[PartitionState, datetime]:
    pid = outcome.partition_id
    row = stored.get(pid)
    if pid in planned_ids:
        if row is None or row.state not in (PartitionState.READY, PartitionState.RUNNING):
            state = "missing" if row is None else row.state.value
            raise OutcomeError(
                f"planned partition {pid!r} of {name} is {state} in the state store, "
                f"not READY or RUNNING: the stream was changed while the window ran; reset "
                f"the stream if its state was edited by hand"
            )
        return row.state, row.watermark
    if pid not in reports:
        raise OutcomeError(
            f"partition {pid!r} has an outcome in {name}, but the window did not "
            f"plan it and no partition read in it reported it as a child: an extract "
            f"reads only its plan and the children born in the window"
        )
    report = reports[pid]
    if not report.complete(row):
        raise OutcomeError(
            f"child {pid!r} was read in {name} before all its parents reported "
            f"it (still waiting for {report.waiting_for(row)}): a child with several parents is read "
            f"once, after every parent reported it"
        )
    if row is not None and row.state not in (PartitionState.CREATED, PartitionState.READY):
        raise OutcomeError(
            f"child {pid!r} was read in {name} but is already {row.state.value}: "
            f"a child is read from its start only once"
        )
    # Step 3 made it READY in this same commit, whatever it was before.
    return PartitionState.READY, row.watermark if row is not None else report.child.start


# 5. watermarks only move forward
def _require_forward(
    name: str, window: Window, outcome: PartitionOutcome, previous_watermark: datetime
) -> None:
    if outcome.watermark < previous_watermark:
        raise WatermarkRegressionError(
            f"partition {outcome.partition_id!r} of stream {window.stream_id!r} would "
            f"move its watermark backwards in {name}, from "
            f"{format_ts(previous_watermark)} to {format_ts(outcome.watermark)}: watermarks "
            f"only move forward, so the outcome is stale or the source adapter reported an "
            f"older progress mark; extract the window again"
        )


# 6. the window's counts: the store's own, and the caller's keys that agree with them
def _counts(
    name: str,
    outcomes: Sequence[PartitionOutcome],
    reports: Mapping[str, _ChildReport],
    extra_counts: Mapping[str, object],
) -> dict:
    counts = {
        "records": sum(o.records for o in outcomes),
        "partitions": len(outcomes),
        "finished": sum(1 for o in outcomes if o.finished),
        "children": len(reports),
    }
    for key, value in extra_counts.items():
        if key in counts and counts[key] != value:
            raise OutcomeError(
                f"counts[{key!r}] = {value!r} for {name} disagrees with the outcomes, "
                f"which give {counts[key]!r}: leave {key!r} out (the store computes it) or "
                f"pass the same value"
            )
    return {**extra_counts, **counts}
