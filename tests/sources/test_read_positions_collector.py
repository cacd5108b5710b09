"""A read task keeps Python's cycle collector off while it reads a partition and hands its rows
on, and turns it on again after each partition, failed or not (``airflow_cdc.spark_jobs.extract``'s
``cycle_collector_paused``, a performance strategy)."""

from __future__ import annotations

import gc
from datetime import datetime, timezone

import pytest

from airflow_cdc.model import (
    ChangeRow,
    Image,
    Op,
    PartitionOutcome,
    PartitionPosition,
    Window,
    encode_ordering_key,
)
from airflow_cdc.pipeline.files import WindowPlanFile, position_to_json
from airflow_cdc.sources.base import ChangeSource, PartitionRead

WINDOW = Window("s", datetime(2024, 5, 1, 10, tzinfo=timezone.utc), datetime(2024, 5, 1, 11, tzinfo=timezone.utc))
POSITIONS = [PartitionPosition(name, WINDOW.start) for name in ("p0", "p1")]


class WatchingSource(ChangeSource):
    """Notes whether the collector is on when each partition is read; ``failing``: the
    partition whose read raises."""

    kind = "watching"

    def __init__(self, seen: list, failing: str | None = None) -> None:
        super().__init__({})
        self.seen, self.failing = seen, failing

    def read_partition(self, window, position) -> PartitionRead:
        self.seen.append(("read", position.partition_id, gc.isenabled()))
        if position.partition_id == self.failing:
            raise ConnectionError(f"partition {position.partition_id} broke off")
        row = ChangeRow(
            stream=window.stream_id, window_id=window.window_id, source_table="orders", op=Op.INSERT,
            image=Image.FULL, keys={"id": 1}, new_values={"id": 1}, old_values=None,
            column_types={"id": "INT64"}, commit_ts=window.start,
            ordering_key=encode_ordering_key(window.start, 0), event_id=f"{position.partition_id}/0",
            partition_id=position.partition_id,
        )
        return PartitionRead(rows=(row,), outcome=PartitionOutcome(position.partition_id, finished=False,
                                                                      watermark=window.end, records=1))


def read_both(monkeypatch, source: WatchingSource) -> None:
    """The read task of both positions, as a round's ``mapInArrow`` runs it; notes whether the
    collector is on at each batch it hands on."""
    import pyarrow as pa

    from airflow_cdc.spark_jobs import extract

    monkeypatch.setattr(extract, "_executor_source", lambda plan: source)
    plan = WindowPlanFile(WINDOW, tuple(POSITIONS), (), {"kind": "watching"}, "lake.cdc.changelog")
    indexes = pa.record_batch([pa.array([0, 1])], names=["index"])
    for batch in extract.read_positions(plan.to_json(), [position_to_json(p) for p in POSITIONS], [indexes]):
        source.seen.append(("batch", batch.num_rows, gc.isenabled()))


def test_the_cycle_collector_is_off_while_each_partition_is_read_and_handed_on_and_on_after(monkeypatch):
    seen: list = []
    read_both(monkeypatch, WatchingSource(seen))
    assert {on for *_, on in seen} == {False}
    assert [(step, name) for step, name, _ in seen if step == "read"] == [("read", "p0"), ("read", "p1")]
    assert gc.isenabled()


def test_the_cycle_collector_is_on_again_after_a_partition_read_that_fails(monkeypatch):
    seen: list = []
    with pytest.raises(ConnectionError, match="p1 broke off"):
        read_both(monkeypatch, WatchingSource(seen, failing="p1"))
    assert gc.isenabled()
