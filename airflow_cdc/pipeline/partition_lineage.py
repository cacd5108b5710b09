"""Partition lineage inside one window: which partitions are read, in which round.

Rules (seed 000, "query workflow"; ARCHITECTURE.md, "extract"):
1. Round 1 reads every partition the plan recorded, from its recorded position.
2. A partition that ends reports its children. A child is read in the window that births it,
   but only once every one of its parents has reported it: then records of a key are read in
   commit timestamp order across the split or merge.
3. A child with several parents is read once, whichever parent reports it last.
4. Children some of whose parents are still live at the window end stay pending; the next
   window's plan carries them with the parents that already reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from airflow_cdc.model import (
    CdcError,
    ChildPartition,
    PartitionOutcome,
    PartitionPosition,
    Window,
    all_parents_reported,
    child_resume_position,
)
from airflow_cdc.sources.base import TransactionTally


class LineageError(CdcError):
    """The source reported something the lineage rules do not allow."""


class IncompleteTransactionError(CdcError):
    """A transaction's records across partitions do not add up to what the source promised."""


@dataclass
class PendingChild:
    partition_id: str
    start: object
    parent_ids: tuple[str, ...]
    reported_by: set[str] = field(default_factory=set)
    handovers: dict[str, str | None] = field(default_factory=dict)  # by reporting parent

    @property
    def ready(self) -> bool:
        return all_parents_reported(self.parent_ids, self.reported_by)


class WindowLineage:
    """Tracks reports within one window and hands out the partitions to read next."""

    def __init__(
        self,
        planned: Iterable[PartitionPosition],
        pending: Iterable[PendingChild] = (),
        resolve_child: Callable | None = None,
    ) -> None:
        """``resolve_child(child, reporter, live, pending)`` is the source's
        :meth:`~airflow_cdc.sources.base.ChangeSource.resolve_child`: a child as its parent
        reported it -> the child with all its parents (None: as reported)."""
        self._resolve_child = resolve_child
        self._queue: list[PartitionPosition] = list(planned)
        self._scheduled: set[str] = {p.partition_id for p in self._queue}
        if len(self._scheduled) != len(self._queue):
            raise LineageError("the plan lists a partition twice")
        self._pending: dict[str, PendingChild] = {c.partition_id: c for c in pending}
        self.outcomes: dict[str, PartitionOutcome] = {}
        self.rounds = 0

    def next_round(self) -> list[PartitionPosition]:
        """Partitions to read now (empty when the window is done)."""
        batch, self._queue = self._queue, []
        if batch:
            self.rounds += 1
        return batch

    def report(self, outcome: PartitionOutcome) -> None:
        """Record one partition's outcome; children whose parents all reported get queued."""
        self.report_round([outcome])

    def report_round(self, outcomes: Sequence[PartitionOutcome]) -> None:
        """Record a round's outcomes, then their children (resolved by the source, knowing
        every outcome of the round: which partitions ended, and into which children)."""
        for outcome in outcomes:
            if outcome.partition_id not in self._scheduled:
                raise LineageError(f"outcome for partition {outcome.partition_id!r}, never scheduled")
            if outcome.partition_id in self.outcomes:
                raise LineageError(f"partition {outcome.partition_id!r} reported twice in a window")
            if outcome.children and not outcome.finished:
                raise LineageError(
                    f"partition {outcome.partition_id!r} reported children but did not finish"
                )
            self.outcomes[outcome.partition_id] = outcome
        for outcome in outcomes:
            if self._resolve_child is not None and outcome.children:
                known = self._known_partitions()
                outcome = replace(outcome, children=tuple(
                    self._resolve_child(child, outcome.partition_id, known, dict(self._pending))
                    for child in outcome.children
                ))
                self.outcomes[outcome.partition_id] = outcome
            for child in outcome.children:
                self._add_report(child, outcome.partition_id)

    def _known_partitions(self) -> dict[str, tuple[str, ...] | None]:
        """Every partition this window knows, by id: None while it is live, else the ids of
        the children it ended into (as reported)."""
        known: dict[str, tuple[str, ...] | None] = dict.fromkeys(self._scheduled)
        known.update(dict.fromkeys(self._pending))
        for outcome in self.outcomes.values():
            for child in outcome.children:
                known.setdefault(child.partition_id, None)
        for pid, outcome in self.outcomes.items():
            if outcome.finished:
                known[pid] = tuple(c.partition_id for c in outcome.children)
        return known

    def _add_report(self, child: ChildPartition, parent_id: str) -> None:
        pending = self._pending.get(child.partition_id)
        if pending is None:
            pending = PendingChild(child.partition_id, child.start, tuple(child.parent_ids))
            self._pending[child.partition_id] = pending
        elif pending.start != child.start or set(pending.parent_ids) != set(child.parent_ids):
            raise LineageError(
                f"child {child.partition_id!r} was reported with different starts or parents: "
                f"{pending.start}/{pending.parent_ids} and {child.start}/{child.parent_ids}"
            )
        if parent_id not in pending.parent_ids:
            raise LineageError(
                f"partition {parent_id!r} reported child {child.partition_id!r}, whose parents "
                f"are {list(pending.parent_ids)}"
            )
        pending.reported_by.add(parent_id)
        pending.handovers[parent_id] = child.handover
        if pending.ready and child.partition_id not in self._scheduled:
            self._scheduled.add(child.partition_id)
            del self._pending[child.partition_id]
            self._queue.append(
                PartitionPosition(
                    partition_id=child.partition_id,
                    start=child.start,
                    resume_position=child_resume_position(pending.handovers),
                    parent_ids=pending.parent_ids,
                )
            )

    @property
    def still_pending(self) -> list[PendingChild]:
        """Children waiting for parents that are still live at the window end."""
        return sorted(self._pending.values(), key=lambda c: c.partition_id)


def run_rounds(
    lineage: WindowLineage,
    read_round: Callable[[list[PartitionPosition]], list[tuple[PartitionOutcome, tuple]]],
) -> tuple[list[PartitionOutcome], list[TransactionTally]]:
    """Read round after round until no partition is left; return outcomes and tallies."""
    tallies: list[TransactionTally] = []
    while batch := lineage.next_round():
        results = read_round(batch)
        lineage.report_round([outcome for outcome, _ in results])
        for _, batch_tallies in results:
            tallies.extend(batch_tallies)
    return list(lineage.outcomes.values()), tallies


def check_transactions(
    tallies: Iterable[TransactionTally],
    window: Window | None = None,
    outcomes: Sequence[PartitionOutcome] = (),
) -> dict[str, int]:
    """Every transaction must be complete across the window's partitions.

    Returns records per transaction; raises naming the first incomplete transaction. Two
    transactions may be incomplete by design, when their commit time is known: one committed
    at or after the progress of a partition whose evidence stopped short of the window end
    (its part comes with that partition's next read, while the gate holds the window), and
    one committed before ``window`` (the rest of it came in the window before, when a
    partition's evidence stopped short there).
    """
    short = min((o.watermark for o in outcomes
                 if window is not None and not o.finished and o.watermark < window.end),
                default=None)
    seen: dict[str, set[str]] = {}
    expected: dict[str, int] = {}
    committed: dict[str, object] = {}
    for tally in tallies:
        seen.setdefault(tally.transaction_id, set()).update(tally.record_ids)
        if tally.commit_ts is not None:
            committed[tally.transaction_id] = tally.commit_ts
        previous = expected.setdefault(tally.transaction_id, tally.expected_records)
        if previous != tally.expected_records:
            raise IncompleteTransactionError(
                f"transaction {tally.transaction_id} reports {previous} and "
                f"{tally.expected_records} records in different partitions"
            )
    for txn, ids in sorted(seen.items()):
        commit_ts = committed.get(txn)
        split = commit_ts is not None and window is not None and (
            commit_ts < window.start or (short is not None and commit_ts >= short))
        if len(ids) != expected[txn] and not split:
            raise IncompleteTransactionError(
                f"transaction {txn} has {len(ids)} of its {expected[txn]} data change records "
                f"in this window: the window is incomplete (a partition was not read, or read "
                f"over the wrong range); it stays uncommitted"
            )
    return {txn: len(ids) for txn, ids in seen.items()}
