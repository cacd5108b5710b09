"""The change stream itself: what the emulator holds, stream positions, tokens and watermarks.

:class:`ChangeStore` holds every commit (the seeded history plus writes through the client)
and, for each cluster a change stream can be read on, the commits in the order they become
VISIBLE there: own writes at their commit timestamp, the other cluster's after the
replication lag (or at a lag episode's ``hold_until``). The order key of a record is
``(visible, commit, tiebreaker, row key hex, seq)``, so a late replicated record with an
older commit timestamp is delivered after newer ones, as on a replicated instance.

**Positions.** A stream position is an order key: every record of the position's row range
with a key up to it has been delivered. A *time position* ``at(T)`` says "every record visible
before ``T``" (used by ``start_time``, heartbeats and partition ends).

**Tokens** are opaque to clients: urlsafe base64 of JSON ``{"t": table id, "r": [start hex,
end hex], "p": [[start hex, end hex, key], ...]}`` -- the token's partition and, for each piece
of it, a position (pieces differ only while a merged partition still catches up on its
parents' positions). A token stays valid after its partition ended, while within retention.

**Partitions.** A record belongs to the partition whose row range holds its key and whose
lifetime ``[birth, end)`` holds its *visible* time; a record replicated after a split is read
from the child. :class:`ChangeStreamRead` runs one ReadChangeStream call: records in order,
heartbeats when idle, a CloseStream OUT_OF_RANGE with the children's tokens when the
partition has ended, or OK once position and low watermark both passed ``end_time``.

**Low watermark** of a position: the least of its visible time, emulator-now, and the commit
timestamp of every record of the range not yet delivered. Every record delivered later by the
same stream has a commit timestamp at or after it.
"""

from __future__ import annotations

import base64
import binascii
import json
import random
import threading
import time
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from airflow_cdc_emulators.common import EmulatorError

from .history import BigtableHistory
from .mutations import Commit, Mutation, RowState, USER, row_delete, row_state, true_state
from .partitions import Partition, RowRange
from .timeline import Clock, format_micros

INF = 1 << 62
ROW_INF = "~"  # sorts after every hex row key
Key = tuple  # (visible_us, commit_us, tiebreaker, row_key_hex, seq)
POLL_SECONDS = 0.05
OUT_OF_RANGE, OK = "OUT_OF_RANGE", "OK"


class ServiceError(EmulatorError):
    """A request the service refuses: ``code`` is a gRPC status code name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def at(time_us: int) -> Key:
    """The time position "every record visible before ``time_us`` has been delivered"."""
    return (time_us - 1, INF, INF, ROW_INF, INF)


def frontier(position: Key) -> int:
    """The earliest visible time a record not yet delivered can have."""
    return position[0] + 1 if position[1] == INF else position[0]


# -- tokens --------------------------------------------------------------------------------
Pieces = list  # [(RowRange, Key)], sorted by range, adjacent and not overlapping


def encode_token(table_id: str, row_range: RowRange, pieces: Pieces) -> str:
    payload = {
        "t": table_id,
        "r": [row_range.start.hex(), row_range.end.hex()],
        "p": [[r.start.hex(), r.end.hex(), list(pos)] for r, pos in _normalized(pieces)],
    }
    text = json.dumps(payload, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode()


def decode_token(table_id: str, token: str) -> tuple[RowRange, Pieces]:
    try:
        payload = json.loads(base64.urlsafe_b64decode(token.encode()))
        row_range = RowRange(bytes.fromhex(payload["r"][0]), bytes.fromhex(payload["r"][1]))
        pieces = [
            (RowRange(bytes.fromhex(s), bytes.fromhex(e)), tuple(pos))
            for s, e, pos in payload["p"]
        ]
        table = payload["t"]
    except (ValueError, KeyError, TypeError, IndexError, binascii.Error) as error:
        raise ServiceError(
            "INVALID_ARGUMENT",
            f"continuation token {token[:40]!r}... is not a token of this emulator ({error}): "
            f"pass a token from a Heartbeat, DataChange or CloseStream of table {table_id!r}",
        ) from None
    if table != table_id:
        raise ServiceError(
            "INVALID_ARGUMENT",
            f"continuation token was issued for table {table!r}, not {table_id!r}: use tokens "
            f"of the table you read",
        )
    return row_range, pieces


def _normalized(pieces: Pieces) -> Pieces:
    """Sort pieces and merge adjacent ones at the same position."""
    out: Pieces = []
    for row_range, pos in sorted(pieces, key=lambda p: p[0]):
        if out and out[-1][1] == pos and out[-1][0].end == row_range.start and out[-1][0].end:
            out[-1] = (RowRange(out[-1][0].start, row_range.end), pos)
        else:
            out.append((row_range, tuple(pos)))
    return out


def check_cover(request: RowRange, ranges: list[RowRange], what: str) -> None:
    """Refuse unless ``ranges`` tile ``request`` exactly (no gap, no overlap)."""
    expected, unbounded = request.start, False
    for row_range in sorted(ranges):
        if unbounded or row_range.start < expected:
            raise ServiceError(
                "INVALID_ARGUMENT",
                f"{what} overlap at {row_range} (the requested partition is {request}): pass "
                f"each piece of the partition once",
            )
        if row_range.start > expected:
            raise ServiceError(
                "INVALID_ARGUMENT",
                f"{what} leave the gap {RowRange(expected, row_range.start)} in the requested "
                f"partition {request}: pass tokens whose partitions cover it exactly",
            )
        expected, unbounded = row_range.end, not row_range.end
    if request.end and (unbounded or expected > request.end):
        raise ServiceError(
            "INVALID_ARGUMENT",
            f"{what} reach beyond the requested partition {request}: pass only tokens of "
            f"pieces inside it",
        )
    if not unbounded and (not request.end or expected < request.end):
        raise ServiceError(
            "INVALID_ARGUMENT",
            f"{what} leave the gap {RowRange(expected, request.end)} in the requested "
            f"partition {request}: pass tokens whose partitions cover it exactly",
        )


# -- the store -----------------------------------------------------------------------------
class ChangeStore:
    """Every commit of the emulator, indexed per reading cluster; thread-safe.

    ``cond`` guards everything and is notified on each write and clock change, so waiting
    streams wake up at once.
    """

    def __init__(self, history: BigtableHistory, clock: Clock) -> None:
        self.history = history
        self.timeline = history.timeline
        self.clock = clock
        self.cond = threading.Condition()
        self.commits: list[Commit] = []
        self.rows: dict[bytes, list[Commit]] = {}
        self.clusters = tuple(history.config.clusters)
        self.lag_us = int(history.config.replication_lag.total_seconds() * 1_000_000)
        self.by_commit: list[tuple[int, int, int]] = []
        self.by_commit_commits: list[Commit] = []
        self.visible: dict[str, tuple[list[Key], list[Commit]]] = {
            c: ([], []) for c in self.clusters
        }
        self.keys: dict[str, dict[int, Key]] = {c: {} for c in self.clusters}
        self.delayed: dict[str, list[tuple[int, int, Commit]]] = {c: [] for c in self.clusters}
        self.delayed_max: dict[str, Key] = {c: (-1,) for c in self.clusters}
        self.next_seq = 0
        self.last_live_us = 0
        self.served_us = 0
        self._tiebreakers = random.Random(f"bigtable-live-{history.config.seed}")
        for commit in history.commits:
            self._index(commit, bulk=True)
        for cluster in self.clusters:
            keys, commits = self.visible[cluster]
            order = sorted(range(len(keys)), key=keys.__getitem__)
            self.visible[cluster] = ([keys[i] for i in order], [commits[i] for i in order])
            self.delayed[cluster].sort(key=lambda d: (d[0], d[1]))
        order = sorted(range(len(self.by_commit)), key=self.by_commit.__getitem__)
        self.by_commit = [self.by_commit[i] for i in order]
        self.by_commit_commits = [self.by_commit_commits[i] for i in order]

    # -- indexing ---------------------------------------------------------------------------
    def _index(self, commit: Commit, bulk: bool = False) -> None:
        self.commits.append(commit)
        self.rows.setdefault(commit.row_key, []).append(commit)
        self.next_seq = max(self.next_seq, commit.seq + 1)
        order = (commit.commit_us, commit.tiebreaker, commit.seq)
        row_hex = commit.row_key.hex()
        if bulk:
            self.by_commit.append(order)
            self.by_commit_commits.append(commit)
        else:
            i = bisect_right(self.by_commit, order)
            self.by_commit.insert(i, order)
            self.by_commit_commits.insert(i, commit)
        for cluster in self.clusters:
            visible = self.history.visible_us(commit, cluster)
            key = (visible, commit.commit_us, commit.tiebreaker, row_hex, commit.seq)
            self.keys[cluster][commit.seq] = key
            keys, commits = self.visible[cluster]
            if bulk:
                keys.append(key)
                commits.append(commit)
            else:
                i = bisect_right(keys, key)
                keys.insert(i, key)
                commits.insert(i, commit)
            if visible - commit.commit_us > self.lag_us:
                entry = (commit.commit_us, commit.seq, commit)
                if bulk:
                    self.delayed[cluster].append(entry)
                else:
                    insort(self.delayed[cluster], entry, key=lambda d: (d[0], d[1]))
                self.delayed_max[cluster] = max(self.delayed_max[cluster], key)

    # -- time -----------------------------------------------------------------------------------
    def now_us(self) -> int:
        return self.clock.now_us()

    def creation_us(self) -> int:
        return self.history.start_us

    def live_partitions(self) -> list[Partition]:
        return self.timeline.live_at(max(self.now_us(), self.creation_us()))

    # -- writes -----------------------------------------------------------------------------
    def _next_commit_us(self) -> int:
        commit_us = max(self.now_us(), self.last_live_us + 1, self.served_us + 1)
        self.last_live_us = commit_us
        return commit_us

    def _row_before(self, row_key: bytes, commit_us: int) -> RowState:
        return row_state(c for c in self.rows.get(row_key, ()) if c.commit_us < commit_us)

    def commit_row(
        self,
        row_key: bytes,
        cluster: str,
        build: Callable[[RowState, int], list[Mutation]],
    ) -> Commit | None:
        """Commit one row change now: ``build(row before, commit_us)`` returns its mutations.

        ``build`` may raise :class:`ServiceError`; then nothing is committed. No mutations:
        nothing is committed and None is returned.
        """
        with self.cond:
            commit_us = self._next_commit_us()
            mutations = build(self._row_before(row_key, commit_us), commit_us)
            if not mutations:
                return None
            commit = self._add(row_key, cluster, commit_us, mutations)
            self.cond.notify_all()
            return commit

    def _add(self, row_key: bytes, cluster: str, commit_us: int, mutations) -> Commit:
        commit = Commit(
            self.next_seq,
            row_key,
            cluster,
            commit_us,
            self._tiebreakers.randrange(1 << 31),
            USER,
            tuple(mutations),
        )
        self._index(commit)
        return commit

    def drop_row_range(self, prefix: bytes = b"") -> list[Commit]:
        """DropRowRange: one commit per row (with the prefix) holding data, at one commit time.

        Each is a USER commit on the first cluster with DeleteFromFamily per family holding
        data, as Bigtable records a dropped row in the change stream.
        """
        with self.cond:
            commit_us = self._next_commit_us()
            out = []
            for row_key in sorted(self.rows):
                if not row_key.startswith(prefix):
                    continue
                deletes = row_delete(self._row_before(row_key, commit_us))
                if deletes:
                    out.append(self._add(row_key, self.clusters[0], commit_us, deletes))
            self.cond.notify_all()
            return out

    def notify(self) -> None:
        with self.cond:
            self.cond.notify_all()

    # -- reads --------------------------------------------------------------------------------
    def true_state(self, at_us: int):
        with self.cond:
            commits = list(self.commits)
        return true_state(commits, at_us)

    def row_now(self, row_key: bytes) -> RowState:
        with self.cond:
            return self._row_before(row_key, self.now_us() + 1)

    # -- watermark ----------------------------------------------------------------------------
    def watermark(
        self, reader: str, row_range: RowRange, pieces: Pieces, cur: Key, now_us: int
    ) -> int:
        """Least of the position's time, now, and commit times of undelivered records in range."""
        low = min(frontier(cur), now_us)
        keys = self.keys[reader]

        def undelivered(commit: Commit) -> bool:
            if not row_range.contains(commit.row_key):
                return False
            key = keys[commit.seq]
            return key > cur and key > _piece_position(pieces, commit.row_key)

        i = bisect_left(self.by_commit, (low - self.lag_us,))
        while i < len(self.by_commit) and self.by_commit[i][0] < low:
            if undelivered(self.by_commit_commits[i]):
                low = self.by_commit[i][0]
                break
            i += 1
        if cur < self.delayed_max[reader]:
            for commit_us, _, commit in self.delayed[reader]:
                if commit_us >= low:
                    break
                if undelivered(commit):
                    low = commit_us
                    break
        return low


def _piece_position(pieces: Pieces, row_key: bytes) -> Key:
    for row_range, pos in pieces:
        if row_range.contains(row_key):
            return pos
    return (INF,)  # not in any piece: never delivered by this stream


# -- one ReadChangeStream call ---------------------------------------------------------------
@dataclass
class RecordEvent:
    commit: Commit
    token: str
    watermark_us: int


@dataclass
class HeartbeatEvent:
    token: str
    watermark_us: int


@dataclass
class CloseEvent:
    code: str  # OK or OUT_OF_RANGE
    message: str
    tokens: list[tuple[RowRange, str]]
    new_partitions: list[RowRange]


class ChangeStreamRead:
    """One ReadChangeStream call over ``row_range`` from ``pieces`` (positions per piece)."""

    def __init__(
        self,
        store: ChangeStore,
        *,
        reader: str,
        row_range: RowRange,
        pieces: Pieces,
        end_us: int | None,
        heartbeat_s: float,
        is_active: Callable[[], bool] = lambda: True,
    ) -> None:
        self.store = store
        self.table_id = store.history.table_id
        self.reader = reader
        self.row_range = row_range
        self.pieces = _normalized(pieces)
        self.end_us = end_us
        self.heartbeat_s = heartbeat_s
        self.is_active = is_active
        self.cur: Key = min(pos for _, pos in self.pieces)

    def _watermark(self, position: Key, now: int) -> int:
        return self.store.watermark(self.reader, self.row_range, self.pieces, position, now)

    def _token(self, row_range: RowRange, pieces: Pieces) -> str:
        return encode_token(self.table_id, row_range, pieces)

    def _position_token(self) -> str:
        pieces = [(r, max(pos, self.cur)) for r, pos in self.pieces]
        return self._token(self.row_range, pieces)

    def _handover(self, partitions: list[Partition], floor: Key) -> list[tuple[RowRange, str]]:
        """Tokens for the parts of ``partitions`` this stream's range covers."""
        tokens = []
        for partition in partitions:
            piece_range = self.row_range.intersect(partition.range)
            if piece_range is None:
                continue
            pieces = []
            for r, pos in self.pieces:
                inter = r.intersect(partition.range)
                if inter is not None:
                    pieces.append((inter, max(pos, self.cur, floor)))
            tokens.append((piece_range, self._token(piece_range, pieces)))
        return tokens

    def __iter__(self) -> Iterator[RecordEvent | HeartbeatEvent | CloseEvent]:
        store, timeline = self.store, self.store.timeline
        start = min(frontier(pos) for _, pos in self.pieces)
        partition = timeline.find(self.row_range, start)
        if partition is None:
            yield self._not_a_partition(start)
            return
        ends = partition.end_us
        end_time = self.end_us
        keys, commits = store.visible[self.reader]
        last_sent = time.monotonic()
        while self.is_active():
            event = None
            finished = None
            with store.cond:
                now = store.now_us()
                found = self._scan(keys, commits, now, ends)
                if found is not None:
                    key, commit = found
                    if end_time is not None and key[0] > end_time:
                        candidate = max(self.cur, at(end_time + 1))
                        wm = self._watermark(candidate, now)
                        if wm > end_time:
                            self.cur = candidate
                            finished = self._finish(wm)
                    if finished is None:
                        self.cur = key
                        wm = self._watermark(key, now)
                        event = RecordEvent(commit, self._position_token(), wm)
                        if end_time is not None and key[0] > end_time and wm > end_time:
                            finished = [event] + self._finish(wm)
                            event = None
                elif ends is not None and now >= ends:
                    finished = [self._partition_end(partition)]
                else:
                    self.cur = max(self.cur, at(now + 1))
                    store.served_us = max(store.served_us, now)
                    wm = self._watermark(self.cur, now)
                    if end_time is not None and now >= end_time and wm > end_time:
                        finished = self._finish(wm)
                    elif time.monotonic() - last_sent >= self.heartbeat_s:
                        event = HeartbeatEvent(self._position_token(), wm)
                    else:
                        remaining = self.heartbeat_s - (time.monotonic() - last_sent)
                        store.cond.wait(max(0.001, min(POLL_SECONDS, remaining)))
            if finished is not None:
                yield from finished
                return
            if event is not None:
                last_sent = time.monotonic()
                yield event

    def _scan(self, keys: list[Key], commits: list[Commit], now: int, ends: int | None):
        """The next record of this stream visible by ``now`` (advancing past others), or None."""
        i = bisect_right(keys, self.cur)
        row_range, pieces = self.row_range, self.pieces
        while i < len(keys):
            key = keys[i]
            if key[0] > now or (ends is not None and key[0] >= ends):
                return None
            commit = commits[i]
            if row_range.contains(commit.row_key) and key > _piece_position(pieces, commit.row_key):
                return key, commit
            self.cur = key
            i += 1
        return None

    def _finish(self, wm: int) -> list:
        """end_time reached: a last heartbeat (the position to resume from), then OK."""
        return [
            HeartbeatEvent(self._position_token(), wm),
            CloseEvent(OK, "", [], []),
        ]

    def _partition_end(self, partition: Partition) -> CloseEvent:
        children = self.store.timeline.children_of(partition)
        kind = "split into" if len(children) > 1 else "merged into"
        message = (
            f"partition {partition.range} ended at {format_micros(partition.end_us)}: {kind} "
            f"{', '.join(str(c.range) for c in children)}; continue with the tokens"
        )
        return CloseEvent(
            OUT_OF_RANGE,
            message,
            self._handover(children, at(partition.end_us)),
            [c.range for c in children],
        )

    def _not_a_partition(self, start: int) -> CloseEvent:
        live = [p for p in self.store.timeline.live_at(start) if p.range.overlaps(self.row_range)]
        message = (
            f"{self.row_range} is not a partition at {format_micros(start)}; the partitions "
            f"there are {', '.join(str(p.range) for p in live)}: read them with these tokens"
        )
        return CloseEvent(
            OUT_OF_RANGE, message, self._handover(live, (-INF,)), [p.range for p in live]
        )


def start_refused(piece_range: RowRange, start_us: int, earliest_us: int, why: str) -> ServiceError:
    """The refusal of a start (time or token position) the change stream no longer serves."""
    return ServiceError(
        OUT_OF_RANGE,
        f"partition {piece_range}: requested start {format_micros(start_us)} is {why}; "
        f"start at or after {format_micros(earliest_us)}",
    )


def open_read(
    store: ChangeStore,
    *,
    reader: str,
    row_range: RowRange,
    start_us: int | None,
    tokens: list[tuple[RowRange, str]] | None,
    end_us: int | None,
    heartbeat_s: float,
    is_active: Callable[[], bool] = lambda: True,
) -> ChangeStreamRead:
    """Validate a ReadChangeStream request (raising :class:`ServiceError`) and prepare the read."""
    history = store.history
    now = store.now_us()
    if tokens:
        pieces: Pieces = []
        token_ranges = []
        for claimed, token in tokens:
            token_range, token_pieces = decode_token(history.table_id, token)
            if token_range != claimed:
                raise ServiceError(
                    "INVALID_ARGUMENT",
                    f"continuation token for {token_range} is passed with partition {claimed}: "
                    f"pass each token with the partition it came with",
                )
            token_ranges.append(token_range)
            pieces += token_pieces
        if len(tokens) == 1 and token_ranges[0] != row_range:
            raise ServiceError(
                "INVALID_ARGUMENT",
                f"the continuation token's partition {token_ranges[0]} differs from the "
                f"requested partition {row_range}: a single token must be for exactly the "
                f"requested partition",
            )
        check_cover(row_range, token_ranges, "the continuation tokens' partitions")
    else:
        start = now if start_us is None else start_us
        if start > now:
            raise ServiceError(
                OUT_OF_RANGE,
                f"start_time {format_micros(start)} for partition {row_range} is after the "
                f"emulator's current time {format_micros(now)}: start at or before now",
            )
        pieces = [(row_range, at(start))]
    retention = history.retention_us
    earliest = max(now - retention, store.creation_us())
    for piece_range, pos in pieces:
        start = frontier(pos)
        if start < earliest:
            why = (
                f"older than the retention of {history.config.retention} (earliest "
                f"{format_micros(now - retention)})"
                if start < now - retention
                else f"before the change stream was enabled at {format_micros(store.creation_us())}"
            )
            raise start_refused(piece_range, start, earliest, why)
    if end_us is not None and end_us < min(frontier(pos) for _, pos in pieces):
        raise ServiceError(
            "INVALID_ARGUMENT",
            f"end_time {format_micros(end_us)} is before the start of partition {row_range}: "
            f"pass an end_time at or after the start",
        )
    return ChangeStreamRead(
        store,
        reader=reader,
        row_range=row_range,
        pieces=pieces,
        end_us=end_us,
        heartbeat_s=heartbeat_s,
        is_active=is_active,
    )
