"""The split-once source: everything the window protocol needs, and nothing else."""

from __future__ import annotations

import json
from datetime import datetime

from airflow_cdc.model import (
    ChangeRow,
    ChildPartition,
    Image,
    Op,
    PartitionOutcome,
    PartitionPosition,
    encode_ordering_key,
    parse_ts,
)
from airflow_cdc.sources.base import ChangeSource, DeadLetter, PartitionRead

ROOT, CHILDREN = "root", ("even", "odd")


def partition_of(change: dict, split_at: datetime) -> str:
    if parse_ts(change["ts"]) < split_at:
        return ROOT
    return CHILDREN[change["id"] % 2]


class SplitOnceSource(ChangeSource):
    kind = "split_once"
    ordering_key_parts = ("ts", "sequence")
    partitions_split = True

    @classmethod
    def validate_spec(cls, stream_id: str, spec) -> dict:
        if not spec.get("log"):
            raise ValueError(f"split_once stream {stream_id!r} has no log: give spec={{'log': <path>}}")
        return {"log": str(spec["log"])}

    def initial_positions(self, window):
        return [PartitionPosition(ROOT, window.start)]

    def read_partition(self, window, position) -> PartitionRead:
        with open(self.spec["log"]) as log:
            data = json.load(log)
        split_at = parse_ts(data["split_at"])
        finished = position.partition_id == ROOT and split_at < window.end
        end = split_at if finished else window.end
        rows, dead = [], []
        for sequence, change in enumerate(data["changes"]):
            ts = parse_ts(change["ts"])
            if partition_of(change, split_at) != position.partition_id or not position.start <= ts < end:
                continue
            if change["op"] not in ("INSERT", "UPDATE", "DELETE"):
                dead.append(DeadLetter(position.partition_id, json.dumps(change),
                                       f"op {change['op']!r} is not INSERT, UPDATE or DELETE",
                                       change["table"], f"{change['ts']}/{sequence}"))
                continue
            op = Op(change["op"])
            rows.append(ChangeRow(
                stream=window.stream_id, window_id=window.window_id, source_table=change["table"],
                op=op, image=Image.FULL, keys={"id": change["id"]},
                new_values=None if op is Op.DELETE else {"id": change["id"], **change["values"]},
                old_values=None, column_types={"id": "INT64", "name": "STRING", "qty": "INT64"},
                commit_ts=ts, ordering_key=encode_ordering_key(ts, sequence),
                transaction_id=f"t{sequence}", event_id=f"{change['ts']}/{sequence}",
                partition_id=position.partition_id, source_metadata={"sequence": sequence},
            ))
        children = tuple(ChildPartition(c, split_at, (ROOT,)) for c in CHILDREN) if finished else ()
        return PartitionRead(
            rows=tuple(rows),
            outcome=PartitionOutcome(position.partition_id, finished=finished, watermark=end,
                                     records=len(rows) + len(dead), children=children,
                                     resume_position=None if finished else position.partition_id),
            dead_letters=tuple(dead),
        )
