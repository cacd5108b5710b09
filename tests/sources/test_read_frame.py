"""The read frame (``spark_jobs/sources/read_frame.py``): what a read task hands to Spark in Arrow.
Pure Python and pyarrow: no Spark session."""

from __future__ import annotations

import pickle
from datetime import datetime, timezone

from airflow_cdc.model import PartitionOutcome
from airflow_cdc.sources.base import TransactionTally
from airflow_cdc.spark_jobs.sources.read_frame import (
    CHANGELOG_NAMES,
    KIND,
    OUTCOME,
    REASON,
    RECORD,
    bad_row_dead_letter,
    key_batch,
    partition_batches,
)

COMMIT = datetime(2025, 1, 6, 8, tzinfo=timezone.utc)


def changelog_row(event_id: str) -> tuple:
    values = {"stream": "s", "window_id": "w", "source_table": "Users", "op": "INSERT", "image": "FULL",
              "keys": {"UserId": "1"}, "new_values": {"Name": "ann"}, "old_values": None,
              "column_types_json": "{}", "commit_ts": COMMIT, "ordering_key": b"\x01",
              "transaction_id": "t1", "event_id": event_id, "partition_id": "p", "source_metadata_json": "{}"}
    return tuple(values[name] for name in CHANGELOG_NAMES)


def batches_of(rows, tallies=()):
    outcome = PartitionOutcome("p", False, COMMIT, records=len(rows))
    return list(partition_batches(outcome, tallies, rows, [], {"reads": 1},
                                  lambda row, error: bad_row_dead_letter("s", "w", row, error)))


def test_a_partition_read_leaves_as_rows_tallies_and_one_summary_with_its_counts():
    rows = [changelog_row(f"t1/{n}/0") for n in range(3)]
    batches = batches_of(rows, [TransactionTally("t1", 5, frozenset({"0", "1", "2"}), COMMIT)])
    kinds = [b.column(KIND).to_pylist()[0] for b in batches]
    assert kinds == ["row", "tally", "outcome"]
    assert batches[0].column("event_id").to_pylist() == ["t1/0/0", "t1/1/0", "t1/2/0"]
    assert batches[1].column("_record").to_pylist() == ["0", "1", "2"]
    outcome, counts, row_count, tally_count, dead_count, whole = pickle.loads(batches[2].column(OUTCOME)[0].as_py())
    assert (outcome.partition_id, counts, row_count, tally_count, dead_count, whole) == ("p", {"reads": 1}, 3, 3, 0, 0)


def test_a_transaction_the_read_holds_whole_is_counted_and_leaves_no_tally_records():
    rows = [changelog_row(f"t{n}/0/0") for n in (1, 2, 3)]
    batches = batches_of(rows, [TransactionTally("t1", 1, frozenset({"0"}), COMMIT),
                                TransactionTally("t2", 2, frozenset({"0"}), COMMIT),
                                TransactionTally("t3", 1, frozenset({"0"}), COMMIT)])
    by_kind = {b.column(KIND).to_pylist()[0]: b for b in batches}
    assert by_kind["tally"].column("transaction_id").to_pylist() == ["t2"]
    assert pickle.loads(by_kind["outcome"].column(OUTCOME)[0].as_py())[3:] == (1, 0, 2)


def test_a_row_arrow_cannot_hold_becomes_a_dead_letter_naming_its_event_and_the_others_go_on():
    rows = [changelog_row("t1/0/0"), changelog_row("t1/\udc80/0"), changelog_row("t1/2/0")]
    batches = batches_of(rows)
    by_kind = {b.column(KIND).to_pylist()[0]: b for b in batches}
    assert by_kind["row"].column("event_id").to_pylist() == ["t1/0/0", "t1/2/0"]
    [reason] = by_kind["dead"].column(REASON).to_pylist()
    assert "cannot be handed to Spark" in reason and "t1/\\udc80/0" in reason
    assert pickle.loads(by_kind["outcome"].column(OUTCOME)[0].as_py())[2:] == (2, 0, 1, 0)


def test_the_keys_a_reconciliation_read_found_leave_with_their_table_and_key_text():
    batch = key_batch("Orders", ['{"OrderId":"1"}', '{"OrderId":"2"}'])
    assert batch.column(KIND).to_pylist() == ["key", "key"]
    assert batch.column("partition_id").to_pylist() == ["Orders", "Orders"]
    assert batch.column(RECORD).to_pylist() == ['{"OrderId":"1"}', '{"OrderId":"2"}']
    assert batch.column("event_id").null_count == 2
