"""Partition lineage inside one window: what is read, in which round, and what stays pending."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc.model import ChildPartition, PartitionOutcome, PartitionPosition
from airflow_cdc.pipeline.partition_lineage import (
    IncompleteTransactionError,
    LineageError,
    PendingChild,
    WindowLineage,
    check_transactions,
    run_rounds,
)
from airflow_cdc.sources.base import TransactionTally

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
END = T0 + timedelta(hours=1)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def child(token: str, minutes: int, *parents: str) -> ChildPartition:
    return ChildPartition(partition_id=token, start=at(minutes), parent_ids=parents)


class ScriptedSource:
    """Each partition's outcome is scripted; records the rounds in which partitions were read."""

    def __init__(self, script: dict[str, tuple[ChildPartition, ...]]):
        self.script = script
        self.rounds: list[list[str]] = []

    def read_round(self, batch: list[PartitionPosition]):
        self.rounds.append(sorted(p.partition_id for p in batch))
        results = []
        for position in batch:
            children = self.script.get(position.partition_id, ())
            end = children[0].start if children else END
            results.append(
                (
                    PartitionOutcome(
                        partition_id=position.partition_id,
                        finished=bool(children),
                        watermark=end,
                        children=children,
                    ),
                    (),
                )
            )
        return results


def planned(*tokens: str) -> list[PartitionPosition]:
    return [PartitionPosition(partition_id=t, start=T0) for t in tokens]


def test_split_children_are_read_in_the_window_that_births_them():
    source = ScriptedSource({"a": (child("a1", 10, "a"), child("a2", 10, "a"))})
    outcomes, _ = run_rounds(WindowLineage(planned("a")), source.read_round)
    assert source.rounds == [["a"], ["a1", "a2"]]
    assert {o.partition_id: o.finished for o in outcomes} == {"a": True, "a1": False, "a2": False}


def test_child_read_from_its_own_start_timestamp():
    source = ScriptedSource({"a": (child("a1", 10, "a"),)})
    starts = {}
    lineage = WindowLineage(planned("a"))
    while batch := lineage.next_round():
        for position in batch:
            starts[position.partition_id] = position.start
        for outcome, _ in source.read_round(batch):
            lineage.report(outcome)
    assert starts == {"a": T0, "a1": at(10)}


def test_merge_of_two_parents_reads_the_child_once_after_both_reported():
    merged = ("m", 20, "a", "b")
    source = ScriptedSource({"a": (child(*merged),), "b": (child(*merged),)})
    run_rounds(WindowLineage(planned("a", "b")), source.read_round)
    assert source.rounds == [["a", "b"], ["m"]]


def test_merge_of_three_parents_waits_for_the_parent_born_later_in_the_window():
    # c is itself a child of x, so it reports the merged child one round after a and b.
    merged = ("m", 30, "a", "b", "c")
    source = ScriptedSource(
        {
            "x": (child("c", 10, "x"),),
            "a": (child(*merged),),
            "b": (child(*merged),),
            "c": (child(*merged),),
        }
    )
    run_rounds(WindowLineage(planned("a", "b", "x")), source.read_round)
    assert source.rounds == [["a", "b", "x"], ["c"], ["m"]]


def test_split_and_merge_inside_one_window():
    source = ScriptedSource(
        {
            "a": (child("a1", 10, "a"), child("a2", 10, "a")),
            "a2": (child("m", 40, "a2", "b"),),
            "b": (child("m", 40, "a2", "b"),),
        }
    )
    outcomes, _ = run_rounds(WindowLineage(planned("a", "b")), source.read_round)
    assert source.rounds == [["a", "b"], ["a1", "a2"], ["m"]]
    live = sorted(o.partition_id for o in outcomes if not o.finished)
    assert live == ["a1", "m"]


def test_child_of_a_parent_still_live_at_window_end_stays_pending():
    # b does not end in this window, so the merged child waits for the next window.
    source = ScriptedSource({"a": (child("m", 40, "a", "b"),)})
    lineage = WindowLineage(planned("a", "b"))
    run_rounds(lineage, source.read_round)
    assert source.rounds == [["a", "b"]]
    assert [(c.partition_id, c.reported_by) for c in lineage.still_pending] == [("m", {"a"})]


def test_pending_child_from_an_earlier_window_is_read_when_its_last_parent_reports():
    pending = PendingChild("m", at(40), ("a", "b"), reported_by={"a"})
    source = ScriptedSource({"b": (child("m", 40, "a", "b"),)})
    run_rounds(WindowLineage(planned("b"), [pending]), source.read_round)
    assert source.rounds == [["b"], ["m"]]


def test_a_parent_reporting_a_child_that_does_not_name_it_is_refused():
    lineage = WindowLineage(planned("a"))
    lineage.next_round()
    outcome = PartitionOutcome("a", True, at(10), children=(child("m", 10, "z"),))
    with pytest.raises(LineageError, match="partition 'a' reported child 'm', whose parents are"):
        lineage.report(outcome)


def test_children_from_an_unfinished_partition_are_refused():
    lineage = WindowLineage(planned("a"))
    lineage.next_round()
    outcome = PartitionOutcome("a", False, END, children=(child("a1", 10, "a"),))
    with pytest.raises(LineageError, match="reported children but did not finish"):
        lineage.report(outcome)


def test_transaction_complete_across_partitions_passes():
    tallies = [
        TransactionTally("tx1", 3, frozenset({"0", "1"})),
        TransactionTally("tx1", 3, frozenset({"2"})),
    ]
    assert check_transactions(tallies) == {"tx1": 3}


def test_transaction_missing_a_record_fails_naming_it():
    tallies = [
        TransactionTally("tx1", 3, frozenset({"0"})),
        TransactionTally("tx1", 3, frozenset({"2"})),
    ]
    with pytest.raises(IncompleteTransactionError, match="transaction tx1 has 2 of its 3"):
        check_transactions(tallies)
