"""What apply did in one window: counts and snapshot ids per source table, and for the window."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field


@dataclass
class TableResult:
    """What apply did to one source table's target in this window."""

    source_table: str | None
    target_table: str | None
    changes: int = 0
    upserts: int = 0
    patches: int = 0
    deletes: int = 0
    superseded_changes: int = 0
    dead_letter_rows: int = 0
    dead_keys: int = 0
    clashing_keys: int = 0
    added_columns: list[str] = field(default_factory=list)
    widened_columns: list[str] = field(default_factory=list)
    target_snapshot_id: int | None = None
    tombstone_snapshot_id: int | None = None
    history_snapshot_id: int | None = None
    already_applied: bool = False
    truncates: int = 0  # truncate rows of the table in the window
    truncated_rows: int = 0  # target rows the window's truncate removed
    compacted_tables: list[str] = field(default_factory=list)  # merge-on-read tables compacted after the commits
    compaction_errors: list[str] = field(default_factory=list)  # compactions that failed (the window stays applied)


@dataclass
class ApplyResult:
    stream: str
    window_id: str
    status: str  # "applied" or "failed" (dead letters under the fail policy)
    dead_letter_table: str
    dead_letter_rows: int = 0
    dead_letter_snapshot_id: int | None = None
    tables: list[TableResult] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def table(self, source_table: str) -> TableResult:
        for table in self.tables:
            if table.source_table == source_table:
                return table
        raise KeyError(f"source table {source_table!r} was not in window {self.window_id!r}")
