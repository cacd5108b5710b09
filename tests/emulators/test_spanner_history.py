"""The generated history: deterministic from its seed, and big enough for the demo by default."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from spanner_reading import SMALL_HISTORY

from airflow_cdc_emulators.spanner import History, HistoryConfig

ROOT = Path(__file__).resolve().parents[2]


def fingerprint(history: History) -> list:
    return [
        (
            t.commit_us,
            t.server_transaction_id,
            t.transaction_tag,
            t.value_capture_type,
            [(c.table.name, c.key, c.mod_type, c.new_row, c.partition_token) for c in t.changes],
        )
        for t in history.transactions
    ] + [(p.token, p.start_us, p.end_us, p.low, p.high, p.parents) for p in history.partitions]


def test_same_seed_gives_the_same_history():
    assert fingerprint(History(SMALL_HISTORY)) == fingerprint(History(SMALL_HISTORY))


def test_another_seed_gives_another_history():
    other = History(replace(SMALL_HISTORY, seed=SMALL_HISTORY.seed + 1))

    assert fingerprint(other) != fingerprint(History(SMALL_HISTORY))


_DIGEST = """
import hashlib, sys
sys.path.insert(0, sys.argv[1])
from datetime import timedelta
from airflow_cdc_emulators.spanner import generate_history
h = generate_history(
    seed=3, duration=timedelta(minutes=10), changes_per_second=2.0, splits=2, merges=1,
    three_way_merges=0, quiet_periods=1, quiet_period=timedelta(minutes=1),
)
text = repr([
    (t.commit_us, t.server_transaction_id, [(c.key, c.new_row, c.partition_token) for c in t.changes])
    for t in h.transactions
])
print(hashlib.sha256(text.encode()).hexdigest())
"""


def test_history_does_not_depend_on_python_hash_randomization():
    digests = {
        subprocess.run(
            [sys.executable, "-c", _DIGEST, str(ROOT)],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2")
    }

    assert len(digests) == 1 and len(next(iter(digests))) == 64


def test_default_history_is_big_enough_for_the_demo():
    summary = History(HistoryConfig()).summary()

    assert summary["hours"] >= 2
    assert summary["splits"] >= 3 and summary["merges"] >= 2
    assert set(summary["merge_parent_counts"]) == {2, 3}
    assert summary["changes"] >= 50_000
    assert len(summary["changes_by_table"]) == 3
    assert set(summary["changes_by_value_capture_type"]) == {
        "OLD_AND_NEW_VALUES",
        "NEW_VALUES",
        "NEW_ROW",
        "NEW_ROW_AND_OLD_VALUES",
    }
    assert set(summary["changes_by_mod_type"]) == {"INSERT", "UPDATE", "DELETE"}
    assert summary["multi_partition_transactions"] > 1000 and summary["system_transactions"] > 5


def test_each_row_changes_in_the_partition_owning_its_key_at_commit_time(history):
    from airflow_cdc_emulators.spanner.partition_lineage import key_position

    for transaction in history.transactions:
        for change in transaction.changes:
            partition = history.partition(change.partition_token)
            assert partition.live_at(transaction.commit_us)
            assert partition.low <= key_position(change.table.name, change.key) < partition.high


def test_true_state_follows_each_change(history):
    for transaction, change in history.changes():
        after = history.row_at(change.table.name, change.key, transaction.commit_us)
        before = history.row_at(change.table.name, change.key, transaction.commit_us - 1)
        assert after == change.new_row and before == change.old_row
