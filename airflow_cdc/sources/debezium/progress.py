"""Debezium's own incremental snapshots, followed window by window: per table, how far the
snapshot a signal started has read, and whether it completed.

An incremental snapshot (an ``execute-snapshot`` signal, :mod:`.signals`) shows in the sink in
two ways, and a window's progress is made of both:

* **READ events** whose ``source.snapshot`` is ``incremental`` on the table's own topic: the
  rows themselves. The read path counts them per source table (``rows``; events read from the
  window's files, a redelivered one counted again).
* **Notifications** (``notification.enabled.channels=sink``, ``notification.sink.topic.name``;
  the stream's ``notification_topic``), one JSON value per line like every topic
  (:class:`Notification`): ``id`` (the ``execute-snapshot`` signal's id), ``aggregate_type``
  (``Incremental Snapshot``), ``type`` and ``additional_data`` (a map of strings), and on
  Debezium 2.4+ ``timestamp`` (milliseconds). What each type says, as Debezium's
  ``IncrementalSnapshotNotificationService`` writes it (table lists are joined by ``,``):

  ======================  ====================================================================
  STARTED                 ``data_collections``: the tables the signal snapshots, queued
  PAUSED, RESUMED         ``data_collections``: the snapshot stopped reading / reads again
  IN_PROGRESS             one chunk read: ``current_collection_in_progress``, ``maximum_key``
                          (the key the table's scan ends at), ``last_processed_key`` (the
                          chunk's end), ``data_collections``
  TABLE_SCAN_COMPLETED    ``scanned_collection``, ``total_rows_scanned``, ``status``:
                          ``SUCCEEDED`` or ``EMPTY`` (read whole); ``NO_PRIMARY_KEY``,
                          ``SKIPPED``, ``SQL_EXCEPTION``, ``UNKNOWN_SCHEMA`` (not read)
  COMPLETED               every table of the signal was read (names no table)
  ABORTED                 stopped: the tables in ``data_collections``, or (without it) all
  ======================  ====================================================================

  ``Initial Snapshot`` notifications (the connector's initial snapshot) are counted and not
  followed here: their ids are not a signal's.

A window's progress (:class:`WindowSnapshotProgress`) is what its lines say, in two count
entries the window's summary and its state-store record carry:

* ``incremental_snapshots``: per table (``public.orders``), the progress in the window
  (``rows``, ``chunks``: IN_PROGRESS notifications) and its state after the window as the
  window's lines tell it (``status`` started, in_progress, paused, completed or aborted;
  ``signal_id``, ``last_processed_key``, ``maximum_key``, ``total_rows_scanned``,
  ``scan_status``, ``at``: the time of the last notification about it);
* ``incremental_snapshot_signals``: per signal id, its ``status``, the ``tables`` the window
  knows it snapshots, ``at``. A COMPLETED names no table: when the window does not know the
  signal's tables (its STARTED was read by an earlier window), the signal's entry carries the
  news, and :func:`stream_snapshot_state` gives it to the tables earlier windows knew.

A notification is read by the window whose end its ``timestamp`` precedes (the source stops the
topic there, as it does the transaction topic): the connector sent it after the READ events it
reports, so when a window says a table's scan completed, every READ event of that scan is in
this window or an earlier one (the heartbeat evidence), and applied once the window is.

Summed counts cannot hold a table's entry, so the read path hands the rows as flat numbers
(:func:`table_rows_count`), the driver reads the notifications once per window
(:meth:`.source.DebeziumSource.window_progress_counts`), and :meth:`.source.DebeziumSource.window_counts`
joins both (:func:`join_window_counts`). Readers of the stream (``airflow-cdc status``, the
snapshot sensor) fold the windows in order (:func:`stream_snapshot_state`,
:func:`table_completion`).

Only the standard library and the model: this is the sources layer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

from airflow_cdc.model import format_ts
from airflow_cdc.sources.debezium.records import decode_value
from airflow_cdc.sources.debezium.errors import MalformedEventError

INCREMENTAL_SNAPSHOT = "Incremental Snapshot"
INITIAL_SNAPSHOT = "Initial Snapshot"
# Count names: flat numbers summed over partitions, then the window's entries.
ROWS_COUNT = "incremental_snapshot_rows"
TABLES_COUNT = "incremental_snapshots"
SIGNALS_COUNT = "incremental_snapshot_signals"
# Table statuses; the last two end a table's snapshot.
STARTED, IN_PROGRESS, PAUSED, COMPLETED, ABORTED = (
    "started", "in_progress", "paused", "completed", "aborted")
TERMINAL = (COMPLETED, ABORTED)
# TABLE_SCAN_COMPLETED statuses that mean the table was read whole.
SCANNED = ("SUCCEEDED", "EMPTY")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


# --- one line of the notification topic ---------------------------------------------------------
@dataclass(frozen=True)
class Notification:
    """One Debezium notification (``io.debezium.connector.common.Notification``)."""

    id: str
    aggregate_type: str
    type: str
    additional_data: Mapping[str, str] = field(default_factory=dict)
    timestamp_ms: int | None = None

    @property
    def incremental(self) -> bool:
        return self.aggregate_type == INCREMENTAL_SNAPSHOT

    @property
    def data_collections(self) -> tuple[str, ...]:
        """The tables named in ``data_collections`` (``,``-joined; older releases add spaces)."""
        text = self.additional_data.get("data_collections") or ""
        return tuple(name.strip() for name in text.split(",") if name.strip())

    @property
    def at(self) -> str | None:
        if self.timestamp_ms is None:
            return None
        return format_ts(_EPOCH + timedelta(milliseconds=self.timestamp_ms))


def parse_notification(line: str | bytes) -> Notification:
    """The notification of one line of the notification topic (with or without the schema
    part); :class:`MalformedEventError` naming what is wrong for anything else."""
    decoded = decode_value(line)
    if decoded is None:
        raise MalformedEventError(
            "line is null: the notification topic holds notifications, never tombstones")
    _, value = decoded
    texts = {}
    for name in ("id", "aggregate_type", "type"):
        text = value.get(name)
        if not isinstance(text, str) or not text:
            raise MalformedEventError(
                f"notification has no {name} (a non-empty string), got {text!r}; fields "
                f"{sorted(value)}: a Debezium notification has id, aggregate_type, type and "
                f"additional_data")
        texts[name] = text
    extra = value.get("additional_data")
    if extra is None:
        extra = {}
    if not isinstance(extra, dict) or not all(isinstance(v, str) for v in extra.values()):
        raise MalformedEventError(
            f"notification {texts['id']!r} ({texts['type']}): additional_data {extra!r} is not "
            f"a map of strings")
    return Notification(texts["id"], texts["aggregate_type"], texts["type"], dict(extra),
                        _timestamp(texts["id"], value.get("timestamp")))


def _timestamp(notification_id: str, value: object) -> int | None:
    """Milliseconds: an integer (the sink channel's INT64) or its digits (as the docs show it)."""
    if value is None:
        return None
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise MalformedEventError(
        f"notification {notification_id!r}: timestamp {value!r} is not milliseconds since the epoch")


# --- per table, per signal ------------------------------------------------------------------------
@dataclass(frozen=True)
class TableProgress:
    """One table's incremental snapshot: progress (``rows``, ``chunks``) and state."""

    status: str
    signal_id: str | None = None
    rows: int = 0
    chunks: int = 0
    last_processed_key: str | None = None
    maximum_key: str | None = None
    total_rows_scanned: int | None = None
    scan_status: str | None = None
    at: str | None = None

    def to_json(self) -> dict:
        return {name: value for name, value in self.__dict__.items() if value is not None}

    @classmethod
    def from_json(cls, data: Mapping) -> TableProgress:
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**{"status": IN_PROGRESS, **known})

    def followed_by(self, later: TableProgress) -> TableProgress:
        """This state, then a later window's entry: a new signal (or rows after the end of
        the last snapshot) starts afresh; the same snapshot adds up its rows and chunks.

        READ events carry no signal id: a window whose rows arrived before any notification
        about them has an entry without one. A running entry without a signal id is the
        snapshot the next notifications name, so its rows are added to that signal's, never
        dropped: the rows shown are those read over the whole snapshot."""
        unnamed_running = self.signal_id is None and self.status not in TERMINAL
        new_signal = (later.signal_id is not None and later.signal_id != self.signal_id
                      and not unnamed_running)
        restarted = later.signal_id is None and self.status in TERMINAL and later.status not in TERMINAL
        if new_signal or restarted:
            return later
        kept = {name: value for name, value in later.to_json().items() if name not in ("rows", "chunks")}
        return replace(self, **kept, rows=self.rows + later.rows, chunks=self.chunks + later.chunks)


@dataclass(frozen=True)
class SignalProgress:
    """One signal's snapshot as a window saw it: its status and the tables it knows of."""

    status: str
    tables: tuple[str, ...] = ()
    at: str | None = None

    def to_json(self) -> dict:
        return {"status": self.status, "tables": list(self.tables),
                **({"at": self.at} if self.at else {})}

    @classmethod
    def from_json(cls, data: Mapping) -> SignalProgress:
        return cls(data.get("status") or STARTED, tuple(data.get("tables") or ()), data.get("at"))


# --- one window ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class WindowSnapshotProgress:
    """What one window's lines say of the incremental snapshots (module docstring)."""

    tables: Mapping[str, TableProgress] = field(default_factory=dict)
    signals: Mapping[str, SignalProgress] = field(default_factory=dict)

    @classmethod
    def of_notifications(cls, notifications: Iterable[Notification]) -> WindowSnapshotProgress:
        """The window's progress from its notifications, in the order Debezium sent them."""
        tables: dict[str, TableProgress] = {}
        signals: dict[str, SignalProgress] = {}
        for note in notifications:
            if note.incremental:
                _follow(note, tables, signals)
        return cls(tables, signals)

    def with_rows(self, rows: Mapping[str, int]) -> WindowSnapshotProgress:
        """The progress with the window's READ rows per table; a table with rows and no
        notification in the window is being read."""
        tables = dict(self.tables)
        for table, count in rows.items():
            entry = tables.get(table) or TableProgress(IN_PROGRESS)
            status = IN_PROGRESS if entry.status == STARTED else entry.status
            tables[table] = replace(entry, status=status, rows=entry.rows + int(count))
        return replace(self, tables=tables)

    def to_counts(self) -> dict:
        """The window's count entries (none when it saw nothing of a snapshot)."""
        counts = {}
        if self.tables:
            counts[TABLES_COUNT] = {t: p.to_json() for t, p in sorted(self.tables.items())}
        if self.signals:
            counts[SIGNALS_COUNT] = {s: p.to_json() for s, p in sorted(self.signals.items())}
        return counts

    @classmethod
    def from_counts(cls, counts: Mapping | None) -> WindowSnapshotProgress:
        counts = counts or {}
        return cls({t: TableProgress.from_json(p) for t, p in (counts.get(TABLES_COUNT) or {}).items()},
                   {s: SignalProgress.from_json(p) for s, p in (counts.get(SIGNALS_COUNT) or {}).items()})


def _follow(note: Notification, tables: dict[str, TableProgress], signals: dict[str, SignalProgress]) -> None:
    """One incremental-snapshot notification into the window's tables and signals."""
    extra, sid = note.additional_data, note.id

    def update(table: str, **changes) -> None:
        entry = tables.get(table)
        if entry is None or entry.signal_id != sid:
            entry = TableProgress(STARTED, sid)
        tables[table] = replace(entry, signal_id=sid, at=note.at or entry.at, **changes)

    def of_signal(*statuses: str) -> list[str]:
        return [t for t, p in tables.items() if p.signal_id == sid and (not statuses or p.status in statuses)]

    known = signals.get(sid) or SignalProgress(STARTED)
    status = known.status
    if note.type == "STARTED":
        status = STARTED
        for table in note.data_collections:
            if table not in of_signal():  # a STARTED delivered again changes nothing
                update(table, status=STARTED)
    elif note.type == "PAUSED":
        status = PAUSED
        for table in of_signal(STARTED, IN_PROGRESS):
            update(table, status=PAUSED)
    elif note.type == "RESUMED":
        status = IN_PROGRESS
        for table in of_signal(PAUSED):
            update(table, status=IN_PROGRESS)
    elif note.type == "IN_PROGRESS":
        status = IN_PROGRESS
        table = extra.get("current_collection_in_progress")
        if table:
            chunks = tables[table].chunks if table in of_signal() else 0
            update(table, status=IN_PROGRESS, chunks=chunks + 1,
                   last_processed_key=extra.get("last_processed_key"),
                   maximum_key=extra.get("maximum_key"))
    elif note.type == "TABLE_SCAN_COMPLETED":
        status = known.status if known.status in TERMINAL + (PAUSED,) else IN_PROGRESS
        table = extra.get("scanned_collection")
        if table:
            scan = extra.get("status")
            update(table, status=COMPLETED if scan in SCANNED else ABORTED,
                   total_rows_scanned=_int_or_none(extra.get("total_rows_scanned")), scan_status=scan)
    elif note.type == "COMPLETED":
        status = COMPLETED
        for table in of_signal(STARTED, IN_PROGRESS, PAUSED):
            update(table, status=COMPLETED)
    elif note.type == "ABORTED":
        stopped = note.data_collections  # a stop-snapshot of some tables; none: all of them
        for table in stopped or of_signal(STARTED, IN_PROGRESS, PAUSED):
            update(table, status=ABORTED)
        if not stopped:
            status = ABORTED
    else:
        return  # a type this release does not follow: counted, nothing more
    listed = tuple(dict.fromkeys(known.tables + note.data_collections + tuple(of_signal())))
    signals[sid] = SignalProgress(status, listed, note.at or known.at)


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


# --- flat numbers through the extract's summed counts ---------------------------------------------
def table_rows_count(table: str) -> str:
    """The summed count of ``table``'s READ rows (``incremental_snapshot_rows[public.orders]``):
    per-partition counts are summed by name, so a table's rows travel as their own number."""
    return f"{ROWS_COUNT}[{table}]"


def join_window_counts(counts: Mapping) -> dict:
    """The window's counts with its per-table rows (flat numbers from the reads) joined to the
    notifications' entries (from :meth:`.source.DebeziumSource.window_progress_counts`)."""
    joined, rows = {}, {}
    prefix = ROWS_COUNT + "["
    for name, value in counts.items():
        if name.startswith(prefix) and name.endswith("]"):
            rows[name[len(prefix):-1]] = value
        else:
            joined[name] = value
    progress = WindowSnapshotProgress.from_counts(joined).with_rows(rows)
    joined.pop(TABLES_COUNT, None)
    joined.pop(SIGNALS_COUNT, None)
    return {**joined, **progress.to_counts()}


# --- the stream: windows in order -------------------------------------------------------------------
def stream_snapshot_state(window_counts: Iterable[Mapping]) -> dict[str, TableProgress]:
    """Each table's latest known snapshot state from windows' counts, oldest window first;
    ``rows`` and ``chunks`` add up over the windows of the table's latest snapshot."""
    state: dict[str, TableProgress] = {}
    for counts in window_counts:
        _fold(state, WindowSnapshotProgress.from_counts(counts))
    return state


def _fold(state: dict[str, TableProgress], window: WindowSnapshotProgress) -> None:
    for table, entry in window.tables.items():
        state[table] = state[table].followed_by(entry) if table in state else entry
    # A signal's news for the tables earlier windows knew (a COMPLETED names no table).
    for sid, signal in window.signals.items():
        touched = {COMPLETED: (STARTED, IN_PROGRESS, PAUSED), ABORTED: (STARTED, IN_PROGRESS, PAUSED),
                   PAUSED: (STARTED, IN_PROGRESS), IN_PROGRESS: (PAUSED,)}.get(signal.status, ())
        for table, entry in state.items():
            if entry.signal_id == sid and entry.status in touched:
                state[table] = replace(entry, status=signal.status, at=signal.at or entry.at)


@dataclass(frozen=True)
class Completion:
    """Whether a table's incremental snapshot is done: ``completed``, ``aborted``,
    ``missing`` (its signal completed without it) or ``waiting``; ``reason`` says why."""

    state: str
    reason: str
    progress: TableProgress | None = None

    @property
    def done(self) -> bool:
        return self.state != "waiting"


def table_completion(window_counts: Iterable[Mapping], table: str,
                     signal_id: str | None = None) -> Completion:
    """The snapshot of ``table`` as the windows (oldest first) tell it: the one ``signal_id``
    started, or without it the table's latest."""
    state: dict[str, TableProgress] = {}
    signal_tables: set[str] = set()
    for counts in window_counts:
        window = WindowSnapshotProgress.from_counts(counts)
        _fold(state, window)
        if signal_id is None:
            continue
        signal_tables.update(t for t, p in state.items() if p.signal_id == signal_id)
        signal_tables.update(window.signals.get(signal_id, SignalProgress(STARTED)).tables)
        entry = state.get(table)
        if entry is not None and entry.signal_id == signal_id and entry.status in TERMINAL:
            return _verdict(table, entry, signal_id)
        signal = window.signals.get(signal_id)
        if signal is not None and signal.status in TERMINAL and table not in signal_tables:
            return Completion(
                "missing" if signal.status == COMPLETED else ABORTED,
                f"snapshot signal {signal_id!r} {signal.status} without table {table!r} (its "
                f"tables: {sorted(signal_tables) or 'none seen'}): check the table's name "
                f"(schema.table, as the signal's data-collections name it)")
    entry = state.get(table)
    if signal_id is not None:
        seen = "" if entry is None else f"; its latest snapshot is {entry.signal_id!r}, {entry.status}"
        return Completion("waiting", f"no complete window shows the snapshot {signal_id!r} of "
                                     f"table {table!r} ended{seen}", entry)
    if entry is not None and entry.status in TERMINAL:
        return _verdict(table, entry, None)
    if entry is None:
        return Completion("waiting", f"no complete window shows an incremental snapshot of "
                                     f"table {table!r} yet")
    return Completion("waiting", f"the incremental snapshot of table {table!r} is "
                                 f"{describe(entry)}", entry)


def _verdict(table: str, entry: TableProgress, signal_id: str | None) -> Completion:
    which = f"signal {entry.signal_id!r}" if entry.signal_id else "an unknown signal"
    if entry.status == COMPLETED:
        return Completion(COMPLETED, f"the incremental snapshot of table {table!r} ({which}) "
                                     f"completed: {describe(entry)}", entry)
    why = (f"its scan ended {entry.scan_status}" if entry.scan_status
           else "the snapshot was stopped or failed (see the connector's log)")
    return Completion(ABORTED, f"the incremental snapshot of table {table!r} ({which}) was "
                               f"aborted: {why}; send a new execute-snapshot signal to read it again",
                      entry)


def describe(entry: TableProgress) -> str:
    """One line: status, rows, chunks, keys, when."""
    parts = [entry.status]
    if entry.signal_id:
        parts.append(f"signal {entry.signal_id}")
    parts.append(f"{entry.rows} rows in {entry.chunks} chunk(s)")
    if entry.last_processed_key is not None:
        parts.append(f"key {entry.last_processed_key} of {entry.maximum_key}")
    # The connector's total_rows_scanned counts from its last start only (a capture restarted
    # mid-snapshot forgets the rows before), so the rows shown are the READ events counted
    # over the windows; the connector's number is shown only where it says something else.
    if entry.total_rows_scanned is not None and entry.total_rows_scanned != entry.rows:
        parts.append(f"the connector counted {entry.total_rows_scanned} since its last start")
    if entry.scan_status:
        parts.append(f"scan {entry.scan_status}")
    if entry.at:
        parts.append(f"at {entry.at}")
    return ", ".join(parts)
