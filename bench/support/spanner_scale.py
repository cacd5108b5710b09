"""A Spanner change stream history of millions of changes over a thousand partitions, made on
demand: what ``bench/scale.py`` serves through the real emulator server.

:func:`airflow_cdc_emulators.spanner.generate_history` keeps every transaction, row image and
version in memory, which does not fit millions of changes. :class:`ScaleHistory` answers the same server
(:class:`~airflow_cdc_emulators.spanner.server.SpannerEmulator`, its query validation,
wire encoding and batching unchanged) from a few integers: a partition's records are built
when it is queried, in commit order, and dropped once sent. The Spanner client, the source's
reader and the Spark jobs see an ordinary change stream.

The shape, per partition (all ``partitions`` live over the whole history, no splits):

* ``units`` commits, evenly spaced (each partition with its own phase, so partitions
  interleave), in a repeating cycle of 20: 10 single-row writes (one record, one mod),
  7 batch writes of ``BLOCK`` neighbouring rows of one table (one record of ``BLOCK`` mods,
  as Spanner groups a transaction's rows of one table, mod type and column set in one
  partition), and 3 transactions that also write one row in the next partition (two
  records of one mod, ``number_of_records_in_transaction`` 2, the same commit timestamp):
  3.6 changes per commit;
* every row (or block) is revisited round-robin, about ``VISITS`` times over the history,
  following one of three op cycles (insert, then ``UUDI``, ``UUUU`` or ``UDIU`` repeated),
  so there are updates, deletes and re-inserts; an update writes one to three columns;
* the three tables of the emulator's default schema (every Spanner type), keys unique per
  partition; the value capture type changes every quarter of the history, through all four.

:meth:`ScaleHistory.live_rows` is the truth a bench compares the target tables with: how
many rows of each table exist at the end.
"""

from __future__ import annotations

import base64
import hashlib
import math
import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import cached_property

from airflow_cdc_emulators.spanner.history import (
    DELETE,
    INSERT,
    NEW_VALUES,
    OLD_AND_NEW_VALUES,
    UPDATE,
    VALUE_CAPTURE_TYPES,
    DataChangeRecord,
    RowChange,
)
from airflow_cdc_emulators.spanner.partition_lineage import KEYSPACE, Partition
from airflow_cdc_emulators.spanner.schema import DEFAULT_TABLES, Table, generate_value
from airflow_cdc_emulators.spanner.timeline import to_datetime, to_micros

BLOCK = 8  # rows of one batch write
VISITS = 4  # how often a row is written over the history, about
# The cycle of commit kinds in every partition (s single row, b batch, x two partitions).
CYCLE = "sbsbsxsbsbsxsbsbsxsb"
CHANGES_PER_CYCLE = CYCLE.count("s") + BLOCK * CYCLE.count("b") + 2 * CYCLE.count("x")
# Op cycles after the first insert: every row follows one of them, by its number.
OP_CYCLES = ("UUDI", "UUUU", "UDIU")
_OPS = {"I": INSERT, "U": UPDATE, "D": DELETE}
KINDS = ("s", "b", "x", "g")  # g: the row a neighbour's two-partition commit writes here
_TAGS = {"s": "app=bench,kind=single", "b": "app=bench,kind=batch"}


@dataclass(frozen=True)
class _Entity:
    """One row (or block of rows) of one table in one partition and its visits."""

    table: Table
    first_index: int  # key pool index of its first row
    rows: int
    cycle: str


class ScaleHistory:
    """The history's few numbers, and its records on demand (see the module docstring).

    ``changes`` is the wanted number of row changes: whole cycles per partition are
    generated, so :attr:`change_count` is the smallest count that fits and is not below it
    (at most one cycle per partition more).
    """

    def __init__(
        self,
        changes: int,
        partitions: int = 1000,
        *,
        start: datetime = datetime.fromisoformat("2025-01-06T08:00:00+00:00"),
        duration: timedelta = timedelta(hours=1),
        seed: int = 26,
        stream_name: str = "ScaleChanges",
        retention: timedelta = timedelta(days=7),
    ) -> None:
        if partitions < 2:
            raise ValueError(f"partitions {partitions} must be at least 2 (commits span two)")
        cycles = max(1, math.ceil(changes / (partitions * CHANGES_PER_CYCLE)))
        self.partition_count = partitions
        self.units = cycles * len(CYCLE)  # commits per partition
        self.seed = seed
        self.stream_name = stream_name
        self.created_us = to_micros(start)
        self.end_us = self.created_us + int(duration.total_seconds() * 1_000_000)
        self.retention_us = int(retention.total_seconds() * 1_000_000)
        pool = self.units * BLOCK + 64
        # Keys unique per partition and kind: a pool of ``pool`` rows each.
        self.tables: tuple[Table, ...] = tuple(
            replace(t, key_count=partitions * len(KINDS) * pool) for t in DEFAULT_TABLES
        )
        self._pool = pool
        self._count = {kind: CYCLE.count(kind) * cycles for kind in "sbx"}
        self._count["g"] = self._count["x"]  # the rows written by the previous partition
        # A kind's rows are revisited round-robin: this many rows (or blocks) of each.
        self._entities = {kind: max(1, count // VISITS) for kind, count in self._count.items()}
        share = (self.end_us - self.created_us) // len(VALUE_CAPTURE_TYPES)
        self._capture = [(self.created_us + i * share, c) for i, c in enumerate(VALUE_CAPTURE_TYPES)]

    # --- what the emulator's server asks of a history ------------------------------------
    @property
    def created_at(self) -> datetime:
        return to_datetime(self.created_us)

    @property
    def end(self) -> datetime:
        return to_datetime(self.end_us)

    @cached_property
    def _partitions(self) -> dict[str, Partition]:
        found = {}
        for index in range(self.partition_count):
            low = KEYSPACE * index // self.partition_count
            high = KEYSPACE * (index + 1) // self.partition_count
            token = self.token(index)
            found[token] = Partition(token, self.created_us, None, low, high, (), ())
        return found

    @cached_property
    def _index(self) -> dict[str, int]:
        return {self.token(i): i for i in range(self.partition_count)}

    @property
    def partitions(self) -> tuple[Partition, ...]:
        return tuple(self._partitions.values())

    @property
    def lineage(self):  # the server reads children's parents only; there are no children
        return self

    def partition(self, token: str) -> Partition | None:
        return self._partitions.get(token)

    def partitions_live_at(self, at_us: int) -> list[Partition]:
        return list(self._partitions.values()) if self.created_us <= at_us else []

    def value_capture_type_at(self, at) -> str:
        at_us = at if isinstance(at, int) else to_micros(at)
        return [c for t, c in self._capture if t <= at_us][-1] if at_us >= self.created_us else self._capture[0][1]

    def token(self, index: int) -> str:
        digest = hashlib.blake2b(f"scale/{self.seed}/{self.stream_name}/{index}".encode(), digest_size=24)
        return base64.urlsafe_b64encode(digest.digest()).decode("ascii")

    def records_between(self, token: str, start_us: int, end_us: int) -> list[DataChangeRecord]:
        """The partition's records with ``start_us <= commit <= end_us``, in stream order."""
        index = self._index[token]
        found = [r for r in self._records(index) if start_us <= r.commit_us <= end_us]
        found.sort(key=lambda r: (r.commit_us, r.server_transaction_id, r.record_sequence))
        return found

    # --- counts and truth -----------------------------------------------------------------
    @property
    def change_count(self) -> int:
        return self.partition_count * (self.units // len(CYCLE)) * CHANGES_PER_CYCLE

    @property
    def record_count(self) -> int:
        per_cycle = CYCLE.count("s") + CYCLE.count("b") + 2 * CYCLE.count("x")
        return self.partition_count * (self.units // len(CYCLE)) * per_cycle

    def live_rows(self) -> dict[str, int]:
        """Rows of each table that exist at the end of the history."""
        live = {t.name: 0 for t in self.tables}
        for partition in range(self.partition_count):
            for kind in KINDS:
                visits = self._count[kind]
                entities = self._entities[kind]
                for number in range(entities):
                    done = visits // entities + (1 if number < visits % entities else 0)
                    if done == 0:
                        continue
                    entity = self._entity(partition, kind, number)
                    if _op(entity.cycle, done - 1) != DELETE:
                        live[entity.table.name] += entity.rows
        return live

    # --- generation -------------------------------------------------------------------------
    def _entity(self, partition: int, kind: str, number: int) -> _Entity:
        table = self.tables[(partition * 7 + number * 3 + KINDS.index(kind)) % len(self.tables)]
        rows = BLOCK if kind == "b" else 1
        first = ((partition * len(KINDS) + KINDS.index(kind)) * self._pool) + number * rows
        return _Entity(table, first, rows, OP_CYCLES[(number + partition) % len(OP_CYCLES)])

    def _unit_time(self, partition: int, unit: int) -> int:
        span = self.end_us - self.created_us
        phase = (partition * 0.6180339887) % 1.0
        return self.created_us + int((unit + phase) * span / self.units)

    def _records(self, partition: int) -> list[DataChangeRecord]:
        """Every record of ``partition``: its own commits, and the second rows of the previous
        partition's two-partition commits."""
        records = []
        token = self.token(partition)
        seen = {kind: 0 for kind in KINDS}
        rows: dict[tuple, dict | None] = {}  # entity row -> current image, while generating
        for unit in range(self.units):
            kind = CYCLE[unit % len(CYCLE)]
            at = self._unit_time(partition, unit)
            txn = f"{self.seed:02x}{partition:05x}{unit:07x}"
            records.append(self._record(partition, token, kind, seen, rows, at, txn, 0, kind == "x"))
        previous = (partition - 1) % self.partition_count
        for unit in range(self.units):
            if CYCLE[unit % len(CYCLE)] == "x":
                at = self._unit_time(previous, unit)
                txn = f"{self.seed:02x}{previous:05x}{unit:07x}"
                records.append(self._record(partition, token, "g", seen, rows, at, txn, 1, True))
        return records

    def _record(self, partition, token, kind, seen, rows, at, txn, sequence, shared) -> DataChangeRecord:
        visit_number = seen[kind]
        seen[kind] += 1
        entities = self._entities[kind]
        number, visit = visit_number % entities, visit_number // entities
        entity = self._entity(partition, kind, number)
        table = entity.table
        mod_type = _op(entity.cycle, visit)
        capture = self.value_capture_type_at(at)
        rng = random.Random((self.seed << 40) ^ (partition << 20) ^ (visit_number << 2) ^ KINDS.index(kind))
        values = table.value_columns
        if mod_type == UPDATE:
            chosen = rng.sample(range(len(values)), rng.randint(1, min(3, len(values))))
            written = tuple(c.name for i, c in enumerate(values) if i in chosen)
        elif mod_type == INSERT:
            written = tuple(c.name for c in values)
        else:
            written = ()
        when = to_datetime(at)
        changes = []
        for offset in range(entity.rows):
            key = table.key_for(entity.first_index + offset)
            old_row = rows.get((table.name, key))
            if mod_type == DELETE:
                new_row = None
            else:
                new_row = dict(old_row) if old_row else dict(zip((c.name for c in table.key_columns), key))
                for column in values:
                    if column.name in written:
                        new_row[column.name] = generate_value(rng, column, when)
            rows[(table.name, key)] = new_row
            changes.append(RowChange(table, key, mod_type, old_row, new_row, written, token))
        if mod_type == UPDATE and capture in (OLD_AND_NEW_VALUES, NEW_VALUES):
            names = tuple(c.name for c in table.columns if c.primary_key or c.name in written)
        else:
            names = tuple(c.name for c in table.columns)
        return DataChangeRecord(
            token, at, txn, f"{sequence:08d}", True, table, mod_type, capture, names,
            tuple(changes), 2 if shared else 1, 2 if shared else 1,
            _TAGS.get(kind, "app=bench,kind=pair"), False,
        )


def _op(cycle: str, visit: int) -> str:
    return INSERT if visit == 0 else _OPS[cycle[(visit - 1) % len(cycle)]]

