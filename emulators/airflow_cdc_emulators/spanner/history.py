"""A deterministic change history of one change stream: tables, transactions, records, truth.

:func:`generate_history` (or ``History(HistoryConfig(...))``) builds, from a seed alone:

* rows of typed tables changed by transactions (single-row writes, two-row transfers, batches
  over several tables, and TTL-like *system* transactions), each with one commit timestamp and
  ``server_transaction_id``, most of them tagged;
* the partition lineage (:mod:`.partition_lineage`), which routes every row change to the partition that
  owns its key at commit time;
* the data change records as Spanner groups them: the changes of ONE transaction in ONE
  partition for ONE table, ONE mod type and one column set form a record; ``record_sequence``
  grows across all records of the transaction, whatever their partition;
* the value capture type in force at each commit: the stream starts with the first type of
  ``value_capture_types`` and is altered (``ALTER CHANGE STREAM ... SET OPTIONS``) to the next
  ones at equal intervals, so one stream shows all four types;
* the true content of every table at any instant (:meth:`History.state_at`).

Records are kept per partition in ``(commit_timestamp, server_transaction_id,
record_sequence)`` order with their commit times in a parallel list, so a query is two bisects.
"""

from __future__ import annotations

import hashlib
import random
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_cdc_emulators.common import EmulatorError, ensure_utc, validate_identifier

from .partition_lineage import Lineage, Partition, key_position, plan_lineage
from .schema import DEFAULT_TABLES, Table, generate_value
from .timeline import to_datetime, to_micros

OLD_AND_NEW_VALUES = "OLD_AND_NEW_VALUES"
NEW_VALUES = "NEW_VALUES"
NEW_ROW = "NEW_ROW"
NEW_ROW_AND_OLD_VALUES = "NEW_ROW_AND_OLD_VALUES"
VALUE_CAPTURE_TYPES = (OLD_AND_NEW_VALUES, NEW_ROW, NEW_ROW_AND_OLD_VALUES, NEW_VALUES)
INSERT, UPDATE, DELETE = "INSERT", "UPDATE", "DELETE"

DEFAULT_START = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
DEFAULT_STREAM = "AllChanges"

# Transaction kinds: (kind, weight). Mean changes per transaction follow from the sizes below.
_KINDS = (("single", 0.55), ("transfer", 0.15), ("batch", 0.30))
_BATCH_SIZES = (3, 8)
_MEAN_CHANGES = 0.55 * 1 + 0.15 * 2 + 0.30 * sum(_BATCH_SIZES) / 2
_SINGLE_TAGS = ("", "app=api,action=save", "app=api,action=save", "app=admin,action=edit")
_BATCH_TAGS = ("", "app=batch,job=sync", "app=batch,job=reconcile")
_TRANSFER_TAG = "app=banking,env=prod,action=transfer"
_DELETE_SHARE = 0.12
_SHARED_COMMIT_SHARE = 0.01


class HistoryConfigError(EmulatorError, ValueError):
    """A history parameter is out of its allowed range."""


@dataclass(frozen=True)
class HistoryConfig:
    """Everything a history depends on; the defaults satisfy the demo (2 h, 50k+ changes).

    ``changes_per_second`` is the mean rate of row changes outside quiet periods. Quiet periods
    (no commits at all) make partitions idle so readers see heartbeats. ``retention`` is the
    stream's retention period (Spanner allows 1 to 30 days; any positive value is accepted
    here so tests can reach its limit inside a short history).
    """

    seed: int = 7
    start: datetime = DEFAULT_START
    duration: timedelta = timedelta(hours=2)
    changes_per_second: float = 9.0
    splits: int = 4
    merges: int = 3
    three_way_merges: int = 1
    initial_partitions: int = 2
    tables: tuple[Table, ...] = DEFAULT_TABLES
    stream_name: str = DEFAULT_STREAM
    retention: timedelta = timedelta(days=7)
    value_capture_types: tuple[str, ...] = VALUE_CAPTURE_TYPES
    quiet_periods: int = 3
    quiet_period: timedelta | None = None  # 4 minutes, shorter in short histories
    system_transaction_interval: timedelta = timedelta(minutes=7)

    def __post_init__(self) -> None:
        validate_identifier("change stream name", self.stream_name)
        object.__setattr__(self, "start", ensure_utc("history start", self.start))
        object.__setattr__(self, "tables", tuple(self.tables))
        object.__setattr__(self, "value_capture_types", tuple(self.value_capture_types))
        if self.duration <= timedelta(0):
            raise HistoryConfigError(f"history duration {self.duration} must be positive")
        if self.changes_per_second <= 0:
            raise HistoryConfigError(
                f"changes_per_second {self.changes_per_second} must be positive"
            )
        if self.retention <= timedelta(0):
            raise HistoryConfigError(f"retention {self.retention} must be positive")
        if not self.tables:
            raise HistoryConfigError("a history needs at least one table")
        names = [t.name.lower() for t in self.tables]
        if len(set(names)) != len(names):
            raise HistoryConfigError(f"table names must be unique: {[t.name for t in self.tables]}")
        unknown = [v for v in self.value_capture_types if v not in VALUE_CAPTURE_TYPES]
        if unknown or not self.value_capture_types:
            raise HistoryConfigError(
                f"value_capture_types {list(self.value_capture_types)} must be a non-empty "
                f"sequence of {', '.join(VALUE_CAPTURE_TYPES)}"
            )
        if self.quiet_period is None:
            fitting = self.duration / (4 * max(self.quiet_periods, 1))
            object.__setattr__(self, "quiet_period", min(timedelta(minutes=4), fitting))
        if self.quiet_periods < 0 or self.quiet_periods * self.quiet_period * 2 > self.duration:
            raise HistoryConfigError(
                f"{self.quiet_periods} quiet periods of {self.quiet_period} must fit in half "
                f"of the history ({self.duration})"
            )
        if self.system_transaction_interval <= timedelta(0):
            raise HistoryConfigError("system_transaction_interval must be positive")


@dataclass(slots=True)
class RowChange:
    """One row's change in one transaction. Rows are full dicts (key columns included).

    ``written`` names the non-key columns the write set (all of them for an INSERT, none for
    a DELETE): Spanner reports a column of an UPDATE as modified when it was written.
    """

    table: Table
    key: tuple
    mod_type: str
    old_row: dict | None
    new_row: dict | None
    written: tuple[str, ...]
    partition_token: str


@dataclass(slots=True)
class DataChangeRecord:
    """One data_change_record: changes of one transaction, partition, table and mod type."""

    partition_token: str
    commit_us: int
    server_transaction_id: str
    record_sequence: str
    is_last_record_in_transaction_in_partition: bool
    table: Table
    mod_type: str
    value_capture_type: str
    column_names: tuple[str, ...]
    changes: tuple[RowChange, ...]
    number_of_records_in_transaction: int
    number_of_partitions_in_transaction: int
    transaction_tag: str
    is_system_transaction: bool

    @property
    def commit_timestamp(self) -> datetime:
        return to_datetime(self.commit_us)

    @property
    def table_name(self) -> str:
        return self.table.name

    def mods(self) -> list[dict]:
        """``keys``/``new_values``/``old_values`` in change stream JSON form, per capture type."""
        table, capture, mod_type = self.table, self.value_capture_type, self.mod_type
        columns = {c.name: c for c in table.columns}
        value_names = [c.name for c in table.value_columns]
        out = []
        for change in self.changes:
            keys = {c.name: c.type.encode(v) for c, v in zip(table.key_columns, change.key)}
            new_values: dict = {}
            old_values: dict = {}
            if mod_type == INSERT:
                new_values = _encode(columns, change.new_row, value_names)
            elif mod_type == UPDATE:
                full_new = capture in (NEW_ROW, NEW_ROW_AND_OLD_VALUES)
                new_values = _encode(
                    columns, change.new_row, value_names if full_new else change.written
                )
                if capture in (OLD_AND_NEW_VALUES, NEW_ROW_AND_OLD_VALUES):
                    old_values = _encode(columns, change.old_row, change.written)
            elif capture in (OLD_AND_NEW_VALUES, NEW_ROW_AND_OLD_VALUES):  # DELETE
                old_values = _encode(columns, change.old_row, value_names)
            out.append({"keys": keys, "new_values": new_values, "old_values": old_values})
        return out


def _encode(columns: dict, row: Any, names) -> dict:
    return {name: columns[name].type.encode(row[name]) for name in names}


@dataclass(slots=True)
class Transaction:
    """A committed transaction: its changes and the records it produced in the stream.

    Like :class:`RowChange` and :class:`DataChangeRecord`, treat it as immutable (they are
    not frozen only because frozen dataclasses are slow to build by the tens of thousands).
    """

    commit_us: int
    server_transaction_id: str
    transaction_tag: str
    is_system_transaction: bool
    value_capture_type: str
    changes: tuple[RowChange, ...]
    records: tuple[DataChangeRecord, ...]

    @property
    def commit_timestamp(self) -> datetime:
        return to_datetime(self.commit_us)

    @property
    def partition_tokens(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.partition_token for r in self.records))


@dataclass
class _Versions:
    """One row's successive images (None = absent) and their commit times."""

    times: list[int] = field(default_factory=list)
    rows: list[dict | None] = field(default_factory=list)


class History:
    """A generated change stream history; see the module docstring."""

    def __init__(self, config: HistoryConfig | None = None) -> None:
        self.config = config or HistoryConfig()
        cfg = self.config
        self.stream_name = cfg.stream_name
        self.tables = cfg.tables
        self.created_us = to_micros(cfg.start)
        self.end_us = self.created_us + _duration_us(cfg.duration)
        self.retention_us = _duration_us(cfg.retention)
        self.lineage: Lineage = plan_lineage(
            seed=cfg.seed,
            stream_name=cfg.stream_name,
            start_us=self.created_us,
            end_us=self.end_us,
            initial_partitions=cfg.initial_partitions,
            splits=cfg.splits,
            merges=cfg.merges,
            three_way_merges=cfg.three_way_merges,
        )
        share = (self.end_us - self.created_us) // len(cfg.value_capture_types)
        self.value_capture_changes: tuple[tuple[int, str], ...] = tuple(
            (self.created_us + i * share, capture)
            for i, capture in enumerate(cfg.value_capture_types)
        )
        self._capture_times = [t for t, _ in self.value_capture_changes]
        self.quiet_periods: tuple[tuple[int, int], ...] = self._plan_quiet_periods()
        generator = _Generator(self)
        self.transactions: tuple[Transaction, ...] = tuple(generator.run())
        self._versions: dict[tuple[str, tuple], _Versions] = generator.versions
        self._records: dict[str, list[DataChangeRecord]] = {t: [] for t in self.lineage.partitions}
        for transaction in self.transactions:
            for record in transaction.records:
                self._records[record.partition_token].append(record)
        self._commit_times: dict[str, list[int]] = {}
        for token, records in self._records.items():
            records.sort(key=lambda r: (r.commit_us, r.server_transaction_id, r.record_sequence))
            self._commit_times[token] = [r.commit_us for r in records]

    # --- time ---------------------------------------------------------------------------
    @property
    def created_at(self) -> datetime:
        """When the change stream was created: the history's start."""
        return to_datetime(self.created_us)

    @property
    def end(self) -> datetime:
        """The end of the history: the emulator's default "now"."""
        return to_datetime(self.end_us)

    def value_capture_type_at(self, at: datetime | int) -> str:
        at_us = at if isinstance(at, int) else to_micros(at)
        return self.value_capture_changes[max(bisect_right(self._capture_times, at_us) - 1, 0)][1]

    # --- partitions ---------------------------------------------------------------------
    @property
    def partitions(self) -> tuple[Partition, ...]:
        return tuple(self.lineage.partitions.values())

    def partition(self, token: str) -> Partition | None:
        return self.lineage.partitions.get(token)

    def partitions_live_at(self, at: datetime | int) -> list[Partition]:
        return self.lineage.live_at(at if isinstance(at, int) else to_micros(at))

    @property
    def splits(self):
        return self.lineage.splits

    @property
    def merges(self):
        return self.lineage.merges

    # --- records ------------------------------------------------------------------------
    def records(self, token: str) -> list[DataChangeRecord]:
        """All data change records of a partition, in the order a query returns them."""
        return list(self._records[token])

    def records_between(self, token: str, start_us: int, end_us: int) -> list[DataChangeRecord]:
        """Records of a partition with ``start_us <= commit <= end_us`` (both inclusive)."""
        times = self._commit_times[token]
        return self._records[token][bisect_left(times, start_us) : bisect_right(times, end_us)]

    def changes(self) -> list[tuple[Transaction, RowChange]]:
        """Every row change with its transaction, in commit order."""
        return [(t, c) for t in self.transactions for c in t.changes]

    @property
    def change_count(self) -> int:
        return sum(len(t.changes) for t in self.transactions)

    # --- truth --------------------------------------------------------------------------
    def row_at(
        self, table: str, key: tuple, at: datetime | int, *, as_json: bool = False
    ) -> dict | None:
        """The row right after every commit at or before ``at`` (None if absent then).

        ``key`` holds Python values in key column order; ``as_json`` encodes the row's values
        as change stream mods carry them.
        """
        versions = self._versions.get((table, tuple(key)))
        if versions is None:
            return None
        at_us = at if isinstance(at, int) else to_micros(at)
        index = bisect_right(versions.times, at_us) - 1
        row = None if index < 0 else versions.rows[index]
        if row is None or not as_json:
            return None if row is None else dict(row)
        columns = next(t for t in self.tables if t.name == table).columns
        return {c.name: c.type.encode(row[c.name]) for c in columns}

    def state_at(
        self, at: datetime | int, *, as_json: bool = False
    ) -> dict[str, dict[tuple, dict]]:
        """Every table's rows at ``at``: ``{table: {key tuple: {column: value}}}``.

        Values are Python values, or with ``as_json=True`` their change stream JSON form
        (keys included), the form a reader replaying the stream's mods ends up with.
        """
        at_us = at if isinstance(at, int) else to_micros(at)
        state: dict[str, dict[tuple, dict]] = {t.name: {} for t in self.tables}
        by_name = {t.name: t for t in self.tables}
        for (table_name, key), versions in self._versions.items():
            index = bisect_right(versions.times, at_us) - 1
            row = versions.rows[index] if index >= 0 else None
            if row is None:
                continue
            if as_json:
                table = by_name[table_name]
                key = tuple(c.type.encode(v) for c, v in zip(table.key_columns, key))
                row = {c.name: c.type.encode(row[c.name]) for c in table.columns}
            state[table_name][key] = dict(row)
        return state

    # --- reporting ----------------------------------------------------------------------
    def summary(self) -> dict:
        """Counts a demo or a test reports: partitions, splits, merges, changes by kind."""
        changes = [c for t in self.transactions for c in t.changes]
        records = [r for t in self.transactions for r in t.records]
        return {
            "stream": self.stream_name,
            "seed": self.config.seed,
            "start": to_datetime(self.created_us).isoformat(),
            "end": to_datetime(self.end_us).isoformat(),
            "hours": (self.end_us - self.created_us) / 3_600_000_000,
            "partitions": len(self.lineage.partitions),
            "initial_partitions": len(self.lineage.roots),
            "splits": len(self.lineage.splits),
            "merges": len(self.lineage.merges),
            "merge_parent_counts": [len(e.parents) for e in self.lineage.merges],
            "transactions": len(self.transactions),
            "changes": len(changes),
            "records": len(records),
            "changes_by_table": dict(sorted(Counter(c.table.name for c in changes).items())),
            "changes_by_mod_type": dict(sorted(Counter(c.mod_type for c in changes).items())),
            "changes_by_value_capture_type": dict(
                sorted(
                    Counter(
                        t.value_capture_type for t in self.transactions for _ in t.changes
                    ).items()
                )
            ),
            "multi_partition_transactions": sum(
                1 for t in self.transactions if len(t.partition_tokens) > 1
            ),
            "system_transactions": sum(1 for t in self.transactions if t.is_system_transaction),
            "tagged_transactions": sum(1 for t in self.transactions if t.transaction_tag),
        }

    def _plan_quiet_periods(self) -> tuple[tuple[int, int], ...]:
        cfg = self.config
        if not cfg.quiet_periods:
            return ()
        rng = random.Random(f"quiet/{cfg.seed}/{cfg.stream_name}")
        length = _duration_us(cfg.quiet_period)
        slot = (self.end_us - self.created_us) // cfg.quiet_periods
        periods = []
        for index in range(cfg.quiet_periods):
            begin = (
                self.created_us
                + index * slot
                + rng.randint(slot // 8, max(slot // 8, slot - length - slot // 8))
            )
            periods.append((begin, begin + length))
        return tuple(periods)


def generate_history(**overrides) -> History:
    """``History(HistoryConfig(**overrides))``: e.g. ``generate_history(seed=3, splits=5)``."""
    return History(HistoryConfig(**overrides))


def _duration_us(value: timedelta) -> int:
    return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds


class _Generator:
    """Writes the transactions of a history, in commit order, keeping the current rows."""

    def __init__(self, history: History) -> None:
        cfg = history.config
        self.history = history
        self.rng = random.Random(f"transactions/{cfg.seed}/{cfg.stream_name}")
        self.cursor = history.lineage.cursor()
        self.current: dict[str, dict[tuple, dict]] = {t.name: {} for t in cfg.tables}
        self.positions: dict[tuple[str, tuple], int] = {}
        self.table_weights = [t.weight for t in cfg.tables]
        self.id_prefix = f"{cfg.seed}/{cfg.stream_name}/"
        self.count = 0
        self.column_names: dict[tuple, tuple[str, ...]] = {}  # see _column_names
        self.versions: dict[tuple[str, tuple], _Versions] = {}  # every row's images, for the truth

    def run(self):
        history, rng, cfg = self.history, self.rng, self.history.config
        mean_gap = 1_000_000 * _MEAN_CHANGES / cfg.changes_per_second
        system_gap = _duration_us(cfg.system_transaction_interval)
        next_system = history.created_us + system_gap // 2
        quiet = list(history.quiet_periods)
        kinds = [k for k, _ in _KINDS]
        weights = [w for _, w in _KINDS]
        at = history.created_us
        previous_keys: set = set()
        while True:
            shared = self.count > 0 and rng.random() < _SHARED_COMMIT_SHARE
            if not shared:
                at += max(1, int(rng.expovariate(1.0 / mean_gap)))
            while quiet and at >= quiet[0][0]:
                if at < quiet[0][1]:
                    at = quiet[0][1] + rng.randint(1, 1_000_000)
                quiet.pop(0)
            if at >= history.end_us:
                return
            if next_system <= at and not shared:
                # A row-deletion (TTL) sweep commits just before this slot's transaction.
                system = self._transaction(at, "system", exclude=set())
                if system is not None:
                    yield system
                    at += 1
                next_system = at + system_gap + rng.randint(-system_gap // 4, system_gap // 4)
                if at >= history.end_us:
                    return
            kind = rng.choices(kinds, weights)[0]
            # Two transactions may share a commit timestamp when they touch different rows.
            transaction = self._transaction(at, kind, exclude=previous_keys if shared else set())
            if transaction is not None:
                previous_keys = {(c.table.name, c.key) for c in transaction.changes}
                yield transaction

    def _transaction(self, at: int, kind: str, exclude: set) -> Transaction | None:
        rng = self.rng
        self.cursor.advance(at)
        when = to_datetime(at)
        planned, tag = self._plan(kind, exclude)
        if not planned:
            return None
        capture = self.history.value_capture_type_at(at)
        changes = []
        for table, key, mod_type, written in planned:
            old_row = self.current[table.name].get(key)
            if mod_type == DELETE:
                new_row = None
                del self.current[table.name][key]
            else:
                new_row = (
                    dict(old_row)
                    if old_row
                    else dict(zip((c.name for c in table.key_columns), key))
                )
                for column in table.value_columns:
                    if column.name in written:
                        new_row[column.name] = generate_value(rng, column, when)
                self.current[table.name][key] = new_row
            versions = self.versions.get((table.name, key))
            if versions is None:
                versions = self.versions[(table.name, key)] = _Versions()
            versions.times.append(at)
            versions.rows.append(new_row)
            partition = self.cursor.locate(self._position(table.name, key))
            changes.append(
                RowChange(table, key, mod_type, old_row, new_row, written, partition.token)
            )
        self.count += 1
        digest = hashlib.blake2b(
            f"{self.id_prefix}{self.count}".encode(), digest_size=10
        ).hexdigest()
        return _with_records(
            at, digest, tag, kind == "system", capture, tuple(changes), self.column_names
        )

    def _plan(self, kind: str, exclude: set) -> tuple[list, str]:
        """The writes of one transaction of ``kind`` and its transaction tag."""
        rng, cfg = self.rng, self.history.config
        if kind == "transfer":
            planned = self._plan_transfer(exclude)
            if planned:
                return planned, _TRANSFER_TAG
            kind = "single"  # too few rows yet
        if kind == "system":
            return self._plan_ttl_deletes(exclude), ""  # system transactions carry no tag
        if kind == "single":
            tables, tags = rng.choices(cfg.tables, self.table_weights), _SINGLE_TAGS
        else:
            tables = rng.choices(cfg.tables, self.table_weights, k=rng.randint(*_BATCH_SIZES))
            tags = _BATCH_TAGS
        return self._plan_writes(tables, exclude), rng.choice(tags)

    def _plan_writes(self, tables, exclude: set) -> list:
        rng = self.rng
        planned, seen = [], set(exclude)
        for table in tables:
            for _ in range(4):  # a few tries to find a row not yet touched by this transaction
                key = table.key_for(rng.randrange(table.key_count))
                if (table.name, key) not in seen:
                    break
            else:
                continue
            seen.add((table.name, key))
            if key not in self.current[table.name]:
                planned.append((table, key, INSERT, tuple(c.name for c in table.value_columns)))
            elif rng.random() < _DELETE_SHARE:
                planned.append((table, key, DELETE, ()))
            else:
                values = table.value_columns
                chosen = set(_distinct(rng, len(values), rng.randint(1, min(3, len(values)))))
                planned.append(
                    (table, key, UPDATE, tuple(c.name for i, c in enumerate(values) if i in chosen))
                )
        return planned

    def _plan_transfer(self, exclude: set) -> list | None:
        """Two rows of the first table updated together, like a transfer between accounts."""
        table = self.history.config.tables[0]
        rows = self.current[table.name]
        if len(rows) < 2:
            return None
        picked = []
        for _ in range(8):
            key = table.key_for(self.rng.randrange(table.key_count))
            if key in rows and (table.name, key) not in exclude and key not in picked:
                picked.append(key)
            if len(picked) == 2:
                break
        if len(picked) < 2:
            return None
        # The same column set on both rows (a balance and its timestamp), as a transfer writes.
        numeric = [c for c in table.value_columns if c.type.code in ("NUMERIC", "FLOAT64", "INT64")]
        stamped = [c for c in table.value_columns if c.type.code == "TIMESTAMP"]
        written = tuple(c.name for c in table.value_columns if c in (numeric[:1] + stamped[:1]))
        written = written or (table.value_columns[0].name,)
        return [(table, key, UPDATE, written) for key in picked]

    def _plan_ttl_deletes(self, exclude: set) -> list:
        """A row-deletion policy sweeping expired rows of one table: a system transaction."""
        rng = self.rng
        table = rng.choice(self.history.config.tables)
        present = [k for k in sorted(self.current[table.name]) if (table.name, k) not in exclude]
        if not present:
            return []
        return [
            (table, key, DELETE, ())
            for key in rng.sample(present, min(len(present), rng.randint(1, 4)))
        ]

    def _position(self, table: str, key: tuple) -> int:
        position = self.positions.get((table, key))
        if position is None:
            position = self.positions[(table, key)] = key_position(table, key)
        return position


def _distinct(rng: random.Random, size: int, count: int) -> list[int]:
    """``count`` distinct indices below ``size`` (random.sample without its per-call overhead)."""
    indices = list(range(size))
    for i in range(count):
        j = rng.randrange(i, size)
        indices[i], indices[j] = indices[j], indices[i]
    return indices[:count]


def _with_records(
    at: int,
    server_transaction_id: str,
    tag: str,
    is_system: bool,
    capture: str,
    changes: tuple,
    names_cache: dict,
) -> Transaction:
    """Group a transaction's changes into data change records, as Spanner does."""
    groups: dict[tuple, list[RowChange]] = {}
    for change in changes:
        names = _column_names(names_cache, change.table, change.mod_type, capture, change.written)
        groups.setdefault(
            (change.partition_token, change.table.name, change.mod_type, names), []
        ).append(change)
    last_in_partition = {token: index for index, (token, *_rest) in enumerate(groups)}
    partitions, count = len(last_in_partition), len(groups)
    records = tuple(
        DataChangeRecord(
            token,
            at,
            server_transaction_id,
            f"{index:08d}",
            last_in_partition[token] == index,
            grouped[0].table,
            mod_type,
            capture,
            names,
            tuple(grouped),
            count,
            partitions,
            tag,
            is_system,
        )
        for index, ((token, _table, mod_type, names), grouped) in enumerate(groups.items())
    )
    return Transaction(at, server_transaction_id, tag, is_system, capture, changes, records)


def _column_names(
    cache: dict, table: Table, mod_type: str, capture: str, written: tuple[str, ...]
) -> tuple[str, ...]:
    """The columns a record describes in ``column_types``: all of them, or keys + written ones.

    OLD_AND_NEW_VALUES and NEW_VALUES describe an UPDATE by its written columns only; every
    other case (INSERT, DELETE, the NEW_ROW types) describes all tracked columns.
    """
    cache_key = (table.name, mod_type, capture, written)
    names = cache.get(cache_key)
    if names is None:
        if mod_type == UPDATE and capture in (OLD_AND_NEW_VALUES, NEW_VALUES):
            names = tuple(c.name for c in table.columns if c.primary_key or c.name in written)
        else:
            names = tuple(c.name for c in table.columns)
        cache[cache_key] = names
    return names
