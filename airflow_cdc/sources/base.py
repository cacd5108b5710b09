"""The small interface every change source implements (ARCHITECTURE.md, "The sources").

An adapter plans where a stream's first window starts, reads one partition for one window
(yielding change rows and the progress evidence the gate needs), and describes its ordering
key. Nothing outside ``airflow_cdc/sources/<source>/`` knows a source's wire format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from airflow_cdc.model import ChangeRow, PartitionOutcome, PartitionPosition, Window


@dataclass(frozen=True)
class TransactionTally:
    """Records of one source transaction seen in one partition read.

    ``expected_records`` is what the source says the whole transaction holds across all
    partitions; ``record_ids`` are the records this read returned. Summed over all partitions
    of a window, the ids must reach the expected count, or the window is incomplete.
    """

    transaction_id: str
    expected_records: int
    record_ids: frozenset[str]


@dataclass(frozen=True)
class PartitionRead:
    """What reading one partition over one window returned."""

    rows: tuple[ChangeRow, ...]
    outcome: PartitionOutcome
    transactions: tuple[TransactionTally, ...] = field(default=())


class ChangeSource(Protocol):
    """A change source as the window protocol sees it."""

    kind: str
    ordering_key_parts: tuple[str, ...]

    def initial_positions(self, window: Window) -> list[PartitionPosition]:
        """Where the stream's first window starts reading."""
        ...

    def read_partition(self, window: Window, position: PartitionPosition) -> PartitionRead:
        """Read one partition from ``position`` to the window's end."""
        ...
