"""A multi-version store of Spanner tables: every row's versions by commit timestamp.

:class:`VersionedDatabase` is what the emulator serves and what tests ask for the truth. A
commit (:meth:`VersionedDatabase.commit`, also used by the gRPC Commit) goes like this:

1. Apply the mutations in order to a draft of the latest rows, the commit timestamp still
   pending: rows must (not) exist as the operation says, NOT NULL columns get values, an
   interleaved child needs its parent, ON DELETE CASCADE deletes children, ON DELETE NO ACTION
   refuses to leave children without their parent.
2. Pick the commit timestamp: later than the last commit of every row the draft touches; with
   ``at`` given, exactly ``at`` (it may equal another commit's on other rows); otherwise "now",
   moved past the last automatic commit and the latest strong read, and the clock follows (a
   settable clock is bumped by the few microseconds needed, a wall clock is waited for).
3. Apply the mutations again with the timestamp in place of ``spanner.commit_timestamp()``
   (key columns included); refuse a user-written commit timestamp column value in the future.
4. Append a version to every touched row and record the commit.

A read at ``T`` sees, for every row, its last version committed at or before ``T``.
Everything happens under one lock: commits are serialised, reads see whole commits.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..clock import EmulatorClock
from ..history import DEFAULT_START
from ..schema import GOOGLESQL
from ..timeline import format_micros, to_datetime, to_micros
from .ddl import schema_after
from .definition import (
    DEFAULT_VERSION_RETENTION_PERIOD,
    DatabaseSchema,
    TableSpec,
    retention_micros,
    retention_text,
)
from .mutations import Delete, KeyRange, KeySet, Mutation, Write
from .status import SpannerStatusError, failed_precondition, invalid
from .values import PENDING, has_pending, key_sort, python_value

INSERT, UPDATE, DELETE = "INSERT", "UPDATE", "DELETE"


@dataclass(frozen=True)
class CommittedChange:
    """One row's change in one commit (``new_row`` None: a hard delete)."""

    table: str
    key: tuple
    mod_type: str
    old_row: dict | None
    new_row: dict | None
    commit_us: int

    @property
    def commit_timestamp(self) -> datetime:
        return to_datetime(self.commit_us)


@dataclass(frozen=True)
class CommitRecord:
    """A committed transaction: its timestamp, its place in commit order, its changes."""

    commit_us: int
    sequence: int
    changes: tuple[CommittedChange, ...]

    @property
    def commit_timestamp(self) -> datetime:
        return to_datetime(self.commit_us)


@dataclass(slots=True)
class _Versions:
    times: list[int] = field(default_factory=list)
    rows: list[dict | None] = field(default_factory=list)
    sequences: list[int] = field(default_factory=list)


def format_key(key: tuple) -> str:
    """A key as Spanner's messages print it: ``[1,2]``."""
    parts = []
    for part in key:
        if isinstance(part, datetime):
            parts.append(format_micros(to_micros(part)))
        else:
            parts.append("NULL" if part is None else str(part))
    return "[" + ",".join(parts) + "]"


class RowView:
    """The latest committed rows with a transaction's own writes on top.

    A commit builds one as its draft; a read-write transaction keeps one so its DML and
    queries see its earlier writes. Deleted rows are kept as None.
    """

    def __init__(self, database: VersionedDatabase) -> None:
        self._database = database
        self.changed: dict[tuple[str, tuple], dict | None] = {}
        self.no_action_parents: set[tuple[str, tuple]] = set()

    def get(self, table: str, key: tuple) -> dict | None:
        found = self.changed.get((table, key), self)
        return self._database._current[table].get(key) if found is self else found

    def put(self, table: str, key: tuple, row: dict | None) -> None:
        self.changed[(table, key)] = row

    def keys(self, table: str) -> list[tuple]:
        with self._database._lock:
            keys = set(self._database._current[table])
        for (name, key), row in self.changed.items():
            if name == table:
                if row is None:
                    keys.discard(key)
                else:
                    keys.add(key)
        return sorted(keys, key=key_sort)

    def rows(self, table: str) -> list[tuple[tuple, dict]]:
        return [(key, self.get(table, key)) for key in self.keys(table)]

    def keys_with_prefix(self, table: str, prefix: tuple) -> list[tuple]:
        size = len(prefix)
        return [key for key in self.keys(table) if key[:size] == prefix]


class VersionedDatabase:
    """Tables with every version of every row; see the module docstring.

    ``now`` (a datetime) starts a settable clock (default: the creation time); ``clock="wall"``
    makes "now" real time; an :class:`EmulatorClock` is shared as it is.
    ``version_retention_period`` is Spanner's text (``'1h'``, ``'3d'``) or a timedelta.
    """

    def __init__(
        self,
        schema: DatabaseSchema,
        *,
        created_at: datetime = DEFAULT_START,
        version_retention_period: str | timedelta = DEFAULT_VERSION_RETENTION_PERIOD,
        now: datetime | None = None,
        clock: EmulatorClock | str | None = None,
    ) -> None:
        self.schema = schema
        self.created_us = to_micros(created_at)
        self.version_retention_period = retention_text(version_retention_period)
        self.retention_us = retention_micros(self.version_retention_period)
        if isinstance(clock, EmulatorClock):
            self.clock = clock
            if now is not None:
                clock.set(to_micros(now))
        elif clock == "wall":
            if now is not None:
                raise ValueError("now cannot be given with clock='wall': now is real time")
            self.clock = EmulatorClock.wall_time()
        elif clock in (None, "manual"):
            self.clock = EmulatorClock(self.created_us if now is None else to_micros(now))
        else:
            raise ValueError(f"clock {clock!r}: use 'manual', 'wall' or an EmulatorClock")
        self._lock = threading.RLock()
        self._versions: dict[str, dict[tuple, _Versions]] = {t.name: {} for t in schema.tables}
        self._current: dict[str, dict[tuple, dict]] = {t.name: {} for t in schema.tables}
        self._commits: list[CommitRecord] = []
        self._commit_order: list[tuple[int, int]] = []
        self._sequence = 0
        self._max_read_us = 0
        self._last_automatic_us = 0
        self.seeded_facts: dict = {}  # what a generator wants summary() to report

    # --- time ---------------------------------------------------------------------------
    @property
    def created_at(self) -> datetime:
        return to_datetime(self.created_us)

    @property
    def now(self) -> datetime:
        return to_datetime(self.clock.now_us)

    @now.setter
    def now(self, value: datetime) -> None:
        self.clock.set(to_micros(value))

    def earliest_version_us(self, now_us: int | None = None) -> int:
        """Spanner's earliest_version_time: max(creation, now - version_retention_period)."""
        now_us = self.clock.now_us if now_us is None else now_us
        return max(self.created_us, now_us - self.retention_us)

    @property
    def earliest_version_time(self) -> datetime:
        return to_datetime(self.earliest_version_us())

    def note_read(self, at_us: int) -> None:
        """A read happened at ``at_us``: later automatic commits must come after it."""
        with self._lock:
            self._max_read_us = max(self._max_read_us, at_us)

    @property
    def commit_sequence(self) -> int:
        """How many commits there have been (a read-write transaction's begin mark)."""
        return self._sequence

    # --- schema -------------------------------------------------------------------------
    def apply_ddl(self, statements, dialect: str = GOOGLESQL) -> None:
        """Apply DDL statements (``UpdateDatabaseDdl``): all of them, or none when one is
        refused (:mod:`.ddl` says which kinds are applied). A created table starts empty; a
        dropped table's rows go with it; commits already made stay in the commit log."""
        with self._lock:
            schema, retention = schema_after(self.schema, list(statements), dialect,
                                             self.version_retention_period)
            before = {t.name: t for t in self.schema.tables}
            versions, current = {}, {}
            for table in schema.tables:  # a table dropped and created again starts empty
                same = before.get(table.name) is table
                versions[table.name] = self._versions[table.name] if same else {}
                current[table.name] = self._current[table.name] if same else {}
            self._versions, self._current = versions, current
            self.schema = schema
            self.version_retention_period = retention
            self.retention_us = retention_micros(retention)

    # --- writing ------------------------------------------------------------------------
    def commit(self, mutations, at: datetime | int | None = None) -> datetime:
        """Commit ``mutations`` atomically; returns the commit timestamp.

        ``at`` places the commit exactly (tests: two commits sharing a timestamp, a row on a
        window boundary); it must be after the last commit of every row touched, at or after
        the creation time and not after now.
        """
        at_us = None if at is None else (at if isinstance(at, int) else to_micros(at))
        return to_datetime(self.commit_us(mutations, at_us))

    def commit_us(
        self, mutations, at_us: int | None = None, *, begin_sequence: int | None = None
    ) -> int:
        mutations = list(mutations)
        with self._lock:
            draft = RowView(self)
            for mutation in mutations:
                self.apply(draft, mutation)
            self._check_references(draft)
            touched = [k for k in draft.changed if not has_pending(k[1])]
            if begin_sequence is not None:
                self._check_no_conflict(touched, begin_sequence)
            lasts = [last for t, k in touched if (last := self._last_commit_us(t, k)) is not None]
            floor = max(lasts, default=None)
            if at_us is None:
                commit_us = max(
                    self.clock.now_us,
                    self.created_us,
                    self._max_read_us + 1,
                    self._last_automatic_us + 1,
                    -1 if floor is None else floor + 1,
                )
            else:
                self._check_placed_commit(at_us, floor, touched)
                commit_us = at_us
            for _attempt in range(4):
                final = RowView(self)
                for mutation in mutations:
                    self.apply(final, mutation, commit_us)
                self._check_references(final)
                late = [
                    last
                    for t, k in final.changed
                    if (last := self._last_commit_us(t, k)) is not None and last >= commit_us
                ]
                if not late:
                    break
                if at_us is not None:
                    raise failed_precondition(
                        f"Commit at {format_micros(at_us)} writes a row last committed at "
                        f"{format_micros(max(late))}: a commit must come after the last commit "
                        f"of every row it writes"
                    )
                commit_us = max(late) + 1
            else:  # pragma: no cover - keys that keep moving with the timestamp
                raise SpannerStatusError("INTERNAL", "could not settle a commit timestamp")
            if at_us is None:
                self.clock.reach(commit_us)
                self._last_automatic_us = commit_us
            self._record(final, commit_us)
            return commit_us

    def _check_placed_commit(self, at_us: int, floor: int | None, touched: list) -> None:
        now_us = self.clock.now_us
        if at_us < self.created_us:
            raise failed_precondition(
                f"Commit at {format_micros(at_us)} is before the database's creation at "
                f"{format_micros(self.created_us)}"
            )
        if at_us > now_us:
            raise failed_precondition(
                f"Commit at {format_micros(at_us)} is after the emulator's clock "
                f"{format_micros(now_us)}: commit timestamps are never in the future; move now "
                f"first (database.now = ...)"
            )
        if floor is not None and at_us <= floor:
            table, key = next((t, k) for t, k in touched if self._last_commit_us(t, k) == floor)
            raise failed_precondition(
                f"Commit at {format_micros(at_us)} is not after the last commit "
                f"{format_micros(floor)} of row {format_key(key)} in table {table}: transactions "
                f"writing the same row get increasing commit timestamps"
            )

    def _check_no_conflict(self, touched: list, begin_sequence: int) -> None:
        for table, key in touched:
            versions = self._versions[table].get(key)
            if versions and versions.sequences[-1] > begin_sequence:
                raise SpannerStatusError(
                    "ABORTED",
                    f"Transaction was aborted: row {format_key(key)} in table {table} was "
                    f"committed by another transaction after this one began. Retry it.",
                )

    def _last_commit_us(self, table: str, key: tuple) -> int | None:
        versions = self._versions[table].get(key)
        return versions.times[-1] if versions else None

    def _record(self, final: RowView, commit_us: int) -> None:
        self._sequence += 1
        changes = []
        for (table, key), row in final.changed.items():
            old = self._current[table].get(key)
            if old is None and row is None:
                continue
            versions = self._versions[table].get(key)
            if versions is None:
                versions = self._versions[table][key] = _Versions()
            versions.times.append(commit_us)
            versions.rows.append(row)
            versions.sequences.append(self._sequence)
            if row is None:
                del self._current[table][key]
            else:
                self._current[table][key] = row
            mod_type = INSERT if old is None else DELETE if row is None else UPDATE
            changes.append(CommittedChange(table, key, mod_type, old, row, commit_us))
        order = (commit_us, self._sequence)
        index = bisect_right(self._commit_order, order)
        self._commit_order.insert(index, order)
        self._commits.insert(index, CommitRecord(commit_us, self._sequence, tuple(changes)))

    # --- applying mutations -------------------------------------------------------------
    def table(self, name: str) -> TableSpec:
        table = self.schema.table(name)
        if table is None:
            raise SpannerStatusError("NOT_FOUND", f"Table not found: {name}")
        return table

    def apply(self, view: RowView, mutation: Mutation, commit_us: int | None = None) -> None:
        """Apply one mutation to ``view``; ``commit_us`` None keeps commit timestamps pending."""
        table = self.table(mutation.table)
        if isinstance(mutation, Delete):
            self._apply_delete(view, table, mutation.key_set)
        else:
            self._apply_write(view, table, mutation, commit_us)

    def _apply_write(self, view: RowView, table: TableSpec, write: Write, commit_us) -> None:
        columns = []
        for name in write.columns:
            column = table.column(name)
            if column is None:
                raise SpannerStatusError(
                    "NOT_FOUND", f"Column not found in table {table.name}: {name}"
                )
            if column in columns:
                raise invalid(
                    f"Column {column.name} is written twice in a mutation on {table.name}"
                )
            columns.append(column)
        missing = [k for k in table.primary_key if k not in {c.name for c in columns}]
        if missing:
            raise invalid(
                f"A {write.operation} mutation on table {table.name} does not specify key column "
                f"{', '.join(missing)}: every write names all primary key columns"
            )
        committed = None if commit_us is None else to_datetime(commit_us)
        for values in write.values:
            if len(values) != len(columns):
                raise invalid(
                    f"A {write.operation} mutation on table {table.name} has {len(values)} values "
                    f"for {len(columns)} columns"
                )
            written = {}
            for column, value in zip(columns, values):
                where = f"{table.name}.{column.name}"
                converted = python_value(column.type, value, where)
                if converted is PENDING:
                    if not column.allow_commit_timestamp:
                        raise failed_precondition(
                            f"Cannot write commit timestamp because the allow_commit_timestamp "
                            f"column option is not set to true for column {where}"
                        )
                    if committed is not None:
                        converted = committed
                elif (
                    column.allow_commit_timestamp
                    and committed is not None
                    and converted is not None
                    and converted > committed
                ):
                    raise failed_precondition(
                        f"Cannot write timestamps in the future: {where} = "
                        f"{format_micros(to_micros(converted))} is after the commit timestamp "
                        f"{format_micros(commit_us)}. A commit timestamp column "
                        f"(allow_commit_timestamp=true) takes spanner.commit_timestamp() "
                        f"(PENDING_COMMIT_TIMESTAMP() in DML) or a time in the past."
                    )
                written[column.name] = converted
            key = table.key_of(written)
            existing = view.get(table.name, key)
            operation = write.operation
            if operation == "insert" and existing is not None:
                raise SpannerStatusError(
                    "ALREADY_EXISTS", f"Row {format_key(key)} in table {table.name} already exists"
                )
            if operation == "update" and existing is None:
                raise SpannerStatusError(
                    "NOT_FOUND",
                    f"Row {format_key(key)} in table {table.name} is missing. Row cannot be "
                    f"updated.",
                )
            if operation == "replace" and existing is not None:
                self._delete_row(view, table, key)
                existing = None
            if existing is None:
                row = {c.name: None for c in table.columns} | written
                nulls = [c.name for c in table.columns if not c.nullable and row[c.name] is None]
                if nulls:
                    raise failed_precondition(
                        f"A new row in table {table.name} does not specify a non-null value for "
                        f"these NOT NULL columns: {', '.join(nulls)}"
                    )
            else:
                row = existing | written
                for column in table.columns:
                    if not column.nullable and row[column.name] is None:
                        raise failed_precondition(
                            f"Cannot specify a null value for column: {table.name}."
                            f"{column.name} in table: {table.name} referenced by key: "
                            f"{format_key(key)}"
                        )
            view.put(table.name, key, row)

    def _apply_delete(self, view: RowView, table: TableSpec, key_set: KeySet) -> None:
        key_set = self._typed_key_set(table, key_set)
        if key_set.ranges or key_set.all:
            keys = [k for k in view.keys(table.name) if key_set.contains(k)]
        else:
            keys = list(key_set.keys)
        for key in keys:
            if view.get(table.name, key) is not None:
                self._delete_row(view, table, key)

    def _typed_key_set(self, table: TableSpec, key_set: KeySet) -> KeySet:
        def typed(parts, whole: bool) -> tuple:
            parts = tuple(parts)
            size = len(table.key_columns)
            if len(parts) > size or (whole and len(parts) != size):
                raise invalid(
                    f"Wrong number of key parts in {list(parts)} for table {table.name}: its key "
                    f"is ({', '.join(table.primary_key)})"
                )
            return tuple(
                python_value(c.type, v, f"{table.name}.{c.name}")
                for c, v in zip(table.key_columns, parts)
            )

        return KeySet(
            tuple(typed(k, True) for k in key_set.keys),
            tuple(
                KeyRange(typed(r.start, False), typed(r.end, False), r.start_closed, r.end_closed)
                for r in key_set.ranges
            ),
            key_set.all,
        )

    def _delete_row(self, view: RowView, table: TableSpec, key: tuple) -> None:
        for child in self.schema.children(table.name):
            if child.on_delete == "CASCADE":
                for child_key in view.keys_with_prefix(child.name, key):
                    self._delete_row(view, child, child_key)
            else:
                view.no_action_parents.add((table.name, key))
        view.put(table.name, key, None)

    def _check_references(self, view: RowView) -> None:
        for table_name, key in view.no_action_parents:
            if view.get(table_name, key) is not None:
                continue
            for child in self.schema.children(table_name):
                if child.on_delete != "NO ACTION":
                    continue
                remaining = view.keys_with_prefix(child.name, key)
                if remaining:
                    raise failed_precondition(
                        f"Integrity constraint violation during DELETE/REPLACE. Found child row "
                        f"{format_key(remaining[0])} in table {child.name} (INTERLEAVE IN PARENT "
                        f"{table_name} ON DELETE NO ACTION) under row {format_key(key)} of "
                        f"{table_name}: delete the child rows first"
                    )
        for (table_name, key), row in view.changed.items():
            table = self.schema.table(table_name)
            if row is None or table.parent is None:
                continue
            parent = self.schema.table(table.parent)
            if view.get(parent.name, key[: len(parent.primary_key)]) is None:
                raise SpannerStatusError(
                    "NOT_FOUND",
                    f"Parent row for row {format_key(key)} in table {table_name} is missing. "
                    f"Row cannot be written.",
                )

    # --- reading ------------------------------------------------------------------------
    def rows_at(self, table: str, at: datetime | int) -> list[tuple[tuple, dict]]:
        """``(key, row)`` of every row present at ``at``, in primary key order."""
        at_us = _micros(at)
        name = self.table(table).name
        out = []
        with self._lock:
            for key, versions in self._versions[name].items():
                index = bisect_right(versions.times, at_us) - 1
                if index >= 0 and versions.rows[index] is not None:
                    out.append((key, versions.rows[index]))
        out.sort(key=lambda pair: key_sort(pair[0]))
        return out

    def row_at(self, table: str, key: tuple, at: datetime | int) -> dict | None:
        name = self.table(table).name
        with self._lock:
            versions = self._versions[name].get(tuple(key))
            if versions is None:
                return None
            index = bisect_right(versions.times, _micros(at)) - 1
            row = versions.rows[index] if index >= 0 else None
        return None if row is None else dict(row)

    def state_at(self, at: datetime | int) -> dict[str, dict[tuple, dict]]:
        """Every table's rows after every commit at or before ``at``: {table: {key: row}}."""
        return {
            t.name: {key: dict(row) for key, row in self.rows_at(t.name, at)}
            for t in self.schema.tables
        }

    def latest_rows(self, table: str) -> list[tuple[tuple, dict]]:
        """The rows after the last commit, in key order (what a read-write transaction sees)."""
        return RowView(self).rows(self.table(table).name)

    # --- the commit log -----------------------------------------------------------------
    @property
    def commits(self) -> tuple[CommitRecord, ...]:
        """Every commit in (timestamp, commit order) order."""
        with self._lock:
            return tuple(self._commits)

    def commits_between(self, start: datetime | int, end: datetime | int) -> list[CommitRecord]:
        """Commits with ``start <= commit timestamp < end``, as a window ``[start, end)``."""
        with self._lock:
            low = bisect_left(self._commit_order, (_micros(start), -1))
            high = bisect_left(self._commit_order, (_micros(end), -1))
            return self._commits[low:high]

    def changes_between(
        self, table: str | None, start: datetime | int, end: datetime | int
    ) -> list[CommittedChange]:
        """Row changes of ``table`` (None: every table) committed in ``[start, end)``."""
        name = None if table is None else self.table(table).name
        return [
            change
            for record in self.commits_between(start, end)
            for change in record.changes
            if name is None or change.table == name
        ]

    def hard_deletes_between(
        self, start: datetime | int, end: datetime | int, table: str | None = None
    ) -> list[CommittedChange]:
        """Rows deleted (not soft-deleted: gone) in ``[start, end)``."""
        return [c for c in self.changes_between(table, start, end) if c.mod_type == DELETE]

    def shared_commit_timestamps(self) -> list[datetime]:
        """Commit timestamps that two or more commits (on disjoint rows) share."""
        counts = Counter(record.commit_us for record in self.commits)
        return [to_datetime(us) for us, count in sorted(counts.items()) if count > 1]

    def summary(self) -> dict:
        """Counts a demo or a test reports."""
        commits = self.commits
        changes = [c for r in commits for c in r.changes]
        now_us = self.clock.now_us
        return {
            "created_at": self.created_at.isoformat(),
            "now": to_datetime(now_us).isoformat(),
            "clock": "wall" if self.clock.wall else "settable",
            "version_retention_period": self.version_retention_period,
            "earliest_version_time": to_datetime(self.earliest_version_us(now_us)).isoformat(),
            "first_commit": commits[0].commit_timestamp.isoformat() if commits else None,
            "last_commit": commits[-1].commit_timestamp.isoformat() if commits else None,
            "commits": len(commits),
            "changes": len(changes),
            "changes_by_table": dict(sorted(Counter(c.table for c in changes).items())),
            "changes_by_mod_type": dict(sorted(Counter(c.mod_type for c in changes).items())),
            "hard_deletes": sum(1 for c in changes if c.mod_type == DELETE),
            "shared_commit_timestamps": len(self.shared_commit_timestamps()),
            "rows_now": {t.name: len(self.rows_at(t.name, now_us)) for t in self.schema.tables},
            **self.seeded_facts,
        }


def _micros(at: datetime | int) -> int:
    return at if isinstance(at, int) else to_micros(at)
