"""The hand-over files between Airflow tasks and Spark jobs: the plan and the outcome.

Only Airflow tasks write the state store; Spark jobs read their plan from a file and write
their partition outcomes to a file referenced by the window's changelog commit
(ARCHITECTURE.md, "State tables" and "extract"). Both files are JSON, written atomically.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from airflow_cdc.model import (
    ChildPartition,
    PartitionOutcome,
    PartitionPosition,
    Window,
    format_ts,
    parse_ts,
)
from airflow_cdc.pipeline.partition_lineage import PendingChild
from airflow_cdc.work_root import work_path, write_text

PLAN_VERSION = 1


def position_to_json(position: PartitionPosition) -> dict:
    return {
        "partition_id": position.partition_id,
        "start": format_ts(position.start),
        "resume_position": position.resume_position,
        "parent_ids": list(position.parent_ids),
    }


def position_from_json(data: dict) -> PartitionPosition:
    return PartitionPosition(
        partition_id=data["partition_id"],
        start=parse_ts(data["start"]),
        resume_position=data.get("resume_position"),
        parent_ids=tuple(data.get("parent_ids") or ()),
    )


def outcome_to_json(outcome: PartitionOutcome) -> dict:
    return {
        "partition_id": outcome.partition_id,
        "finished": outcome.finished,
        "watermark": format_ts(outcome.watermark),
        "records": outcome.records,
        "resume_position": outcome.resume_position,
        "children": [
            {
                "partition_id": c.partition_id,
                "start": format_ts(c.start),
                "parent_ids": list(c.parent_ids),
                **({"handover": c.handover} if c.handover is not None else {}),
            }
            for c in outcome.children
        ],
    }


def outcome_from_json(data: dict) -> PartitionOutcome:
    return PartitionOutcome(
        partition_id=data["partition_id"],
        finished=bool(data["finished"]),
        watermark=parse_ts(data["watermark"]),
        records=int(data.get("records", 0)),
        resume_position=data.get("resume_position"),
        children=tuple(
            ChildPartition(
                partition_id=c["partition_id"],
                start=parse_ts(c["start"]),
                parent_ids=tuple(c["parent_ids"]),
                handover=c.get("handover"),
            )
            for c in data.get("children") or ()
        ),
    )


def pending_to_json(child: PendingChild) -> dict:
    return {
        "partition_id": child.partition_id,
        "start": format_ts(child.start),
        "parent_ids": list(child.parent_ids),
        "reported_by": sorted(child.reported_by),
        "handovers": dict(sorted(child.handovers.items())),
    }


def pending_from_json(data: dict) -> PendingChild:
    return PendingChild(
        partition_id=data["partition_id"],
        start=parse_ts(data["start"]),
        parent_ids=tuple(data["parent_ids"]),
        reported_by=set(data.get("reported_by") or ()),
        handovers=dict(data.get("handovers") or {}),
    )


@dataclass(frozen=True)
class WindowPlanFile:
    """Everything an extract job needs, and nothing secret except inside ``source``."""

    window: Window
    positions: tuple[PartitionPosition, ...]
    pending_children: tuple[PendingChild, ...]
    source: dict
    changelog_table: str
    attempt: int = 1
    options: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": PLAN_VERSION,
                "stream_id": self.window.stream_id,
                "window_start": format_ts(self.window.start),
                "window_end": format_ts(self.window.end),
                "positions": [position_to_json(p) for p in self.positions],
                "pending_children": [pending_to_json(c) for c in self.pending_children],
                "source": self.source,
                "changelog_table": self.changelog_table,
                "attempt": self.attempt,
                "options": self.options,
            },
            indent=1,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> WindowPlanFile:
        data = json.loads(text)
        if data.get("version") != PLAN_VERSION:
            raise ValueError(
                f"plan file version {data.get('version')!r} is not {PLAN_VERSION}: the plan was "
                f"written by another airflow-cdc version; clear the window's plan task"
            )
        return cls(
            window=Window(
                data["stream_id"], parse_ts(data["window_start"]), parse_ts(data["window_end"])
            ),
            positions=tuple(position_from_json(p) for p in data["positions"]),
            pending_children=tuple(pending_from_json(c) for c in data["pending_children"]),
            source=data["source"],
            changelog_table=data["changelog_table"],
            attempt=int(data.get("attempt", 1)),
            options=data.get("options") or {},
        )


@dataclass(frozen=True)
class WindowOutcomeFile:
    """What an extract job found: partition outcomes, still-pending children, counts."""

    window_id: str
    outcomes: tuple[PartitionOutcome, ...]
    pending_children: tuple[PendingChild, ...]
    counts: dict

    def to_json(self) -> str:
        return json.dumps(
            {
                "window_id": self.window_id,
                "outcomes": [outcome_to_json(o) for o in self.outcomes],
                "pending_children": [pending_to_json(c) for c in self.pending_children],
                "counts": self.counts,
            },
            indent=1,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> WindowOutcomeFile:
        data = json.loads(text)
        return cls(
            window_id=data["window_id"],
            outcomes=tuple(outcome_from_json(o) for o in data["outcomes"]),
            pending_children=tuple(pending_from_json(c) for c in data["pending_children"]),
            counts=data.get("counts") or {},
        )


def with_source_overrides(plan: WindowPlanFile, overrides: dict) -> WindowPlanFile:
    """The plan with ``overrides`` (short-lived secrets, never in a plan file) merged into its
    source spec, one level deep: what the window's source is read with."""
    from dataclasses import replace

    source = dict(plan.source)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(source.get(key), dict):
            source[key] = {**source[key], **value}
        else:
            source[key] = value
    return replace(plan, source=source)


def write_private(path, text: str) -> None:
    """Write ``text`` whole, readable by the owner only (plan files may carry a token): a
    local file atomically with mode 0600; under a URI work root, one object upload."""
    write_text(path, text, private=True)


def window_dir(work_root: str | Path, window: Window):
    """Deterministic per-window folder: a re-run of the window finds the same files (a Path,
    or an ObjectPath under a URI work root: :mod:`airflow_cdc.work_root`)."""
    start = format_ts(window.start).replace(":", "").replace("-", "")
    end = format_ts(window.end).replace(":", "").replace("-", "")
    return work_path(work_root, window.stream_id, f"{start}_{end}")
