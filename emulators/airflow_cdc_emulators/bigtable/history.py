"""A deterministic, seeded history of one Bigtable table with a change stream.

:func:`generate_history` (or ``BigtableHistory.generate(HistoryConfig(...))``) builds from a
seed alone (times are offsets from ``start``, so the content does not depend on the start):

* commits to rows ``user#NNNN`` and ``session#NNN`` in families ``cf`` and ``meta`` from two
  clusters ``c1`` and ``c2``: SetCell (some values larger than the chunk size), DeleteFromColumn
  with time ranges (open or closed bounds), DeleteFromFamily, whole-row deletes (one
  DeleteFromFamily per family holding data), conflicting writes (the same cell set at the same
  commit timestamp from both clusters, different tiebreakers), garbage collection sweeps
  (``GARBAGE_COLLECTION`` commits deleting ``meta`` versions older than ``gc_max_age``) and a
  DropRowRange of the ``session#`` prefix (one commit per row holding data);
* the partition timeline (:mod:`.partitions`): initial partitions, splits, and merges with two
  and three parents, none during the lag episode;
* the replication model: a write reaches the other cluster ``replication_lag`` after its commit,
  except during the **lag episode**: ``c2``'s writes to one partition's row range committed
  from ``t1`` reach ``c1`` only at ``hold_until`` (in commit order, so no later write of a row
  passes a held one), holding that partition's low watermark back
  across a 30-minute boundary ``b`` (``t2 = b - 20 s``, ``hold_until = b + 75 s`` by default,
  ``HistoryConfig.lag_hold_after_boundary``);
* the truth at any instant (:meth:`BigtableHistory.true_state`): every commit with a commit
  timestamp strictly before it, so a window ``[s, e)`` of the pipeline ends at ``true_state(e)``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from airflow_cdc_emulators.common import EmulatorError, ensure_utc

from .mutations import (
    GARBAGE_COLLECTION,
    USER,
    Commit,
    DeleteFromColumn,
    DeleteFromFamily,
    Mutation,
    RowState,
    SetCell,
    TableState,
    apply_mutations,
    row_delete,
    true_state,
)
from .partitions import Partition, PartitionTimeline, RowRange, plan_timeline
from .timeline import duration_micros, format_micros, to_datetime, to_micros, wall_micros

CHUNK_SIZE = 1024  # values longer than this travel in several MutationChunks
MAX_CHUNKS_PER_MESSAGE = 4  # a DataChange with more chunks continues in CONTINUATION messages
DEFAULT_TABLE = "events"
DEFAULT_PROJECT = "demo-project"
DEFAULT_INSTANCE = "demo-instance"
DEFAULT_APP_PROFILES = {"default": "c1", "c2-reader": "c2"}

_BOUNDARY = timedelta(minutes=30)
_EPISODE_END_BEFORE_BOUNDARY = timedelta(seconds=20)
_EPISODE_HOLD_AFTER_BOUNDARY = timedelta(seconds=75)
_EVENT_MARGIN = timedelta(minutes=2)  # no split or merge this close to the lag episode
_QUALIFIERS = {
    "cf": (b"name", b"email", b"score", b"payload"),
    "meta": (b"updated_by", b"version", b"tag"),
}
_KINDS = (("set", 0.68), ("mixed", 0.12), ("delete_column", 0.08), ("delete_family", 0.06),
          ("delete_row", 0.06))


class HistoryConfigError(EmulatorError, ValueError):
    """A history parameter is out of its allowed range."""


class UnknownAppProfileError(EmulatorError, LookupError):
    """An app profile id the emulator does not know."""


@dataclass(frozen=True)
class HistoryConfig:
    """Everything a history depends on.

    ``start=None`` means: the UTC hour at or before ``now - duration`` (so a default history
    has fully happened and lies within the 1-day retention); for an empty history (``duration``
    0) it means ``now - retention``, so any start time within retention is accepted.
    ``app_profiles`` maps app profile ids to the cluster they read (single-cluster routing);
    the id ``""`` means ``"default"``.
    """

    seed: int = 7
    start: datetime | None = None
    duration: timedelta = timedelta(hours=2)
    commits_per_second: float = 2.0
    user_rows: int = 400
    session_rows: int = 40
    initial_partitions: int = 4
    splits: int = 3
    two_way_merges: int = 1
    three_way_merges: int = 1
    clusters: tuple[str, str] = ("c1", "c2")
    replication_lag: timedelta = timedelta(milliseconds=200)
    app_profiles: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_APP_PROFILES))
    retention: timedelta = timedelta(days=1)
    families: tuple[str, ...] = ("cf", "meta")
    table_id: str = DEFAULT_TABLE
    project: str = DEFAULT_PROJECT
    instance: str = DEFAULT_INSTANCE
    chunk_size: int = CHUNK_SIZE
    large_value_share: float = 0.03
    conflicts: int = 4
    gc_interval: timedelta = timedelta(minutes=15)
    gc_max_age: timedelta = timedelta(minutes=20)
    gc_family: str = "meta"
    drop_prefix: bytes = b"session#"
    lag_episode: bool = True
    lag_episode_length: timedelta = timedelta(minutes=4)
    # how long after the boundary the lagging cluster catches up; a test that runs real Airflow
    # past the boundary lengthens it so a slow machine cannot outrun the lag
    lag_hold_after_boundary: timedelta = _EPISODE_HOLD_AFTER_BOUNDARY

    def __post_init__(self) -> None:
        if self.duration < timedelta(0):
            raise HistoryConfigError(f"history duration {self.duration} must not be negative")
        if self.start is None:
            now = to_datetime(wall_micros())
            if self.duration > timedelta(0):
                start = (now - self.duration).replace(minute=0, second=0, microsecond=0)
            else:
                start = (now - self.retention).replace(second=0, microsecond=0)
            object.__setattr__(self, "start", start)
        object.__setattr__(self, "start", ensure_utc("history start", self.start))
        object.__setattr__(self, "app_profiles", dict(self.app_profiles))
        if self.commits_per_second <= 0:
            raise HistoryConfigError(
                f"commits_per_second {self.commits_per_second} must be positive"
            )
        if self.retention <= timedelta(0):
            raise HistoryConfigError(f"retention {self.retention} must be positive")
        if self.lag_hold_after_boundary <= timedelta(0):
            raise HistoryConfigError(
                f"lag_hold_after_boundary {self.lag_hold_after_boundary} must be positive: the "
                f"lagging cluster catches up after the boundary its episode spans"
            )
        if len(self.clusters) != 2 or self.clusters[0] == self.clusters[1]:
            raise HistoryConfigError(f"clusters {self.clusters} must be two distinct ids")
        unknown = sorted(set(self.app_profiles.values()) - set(self.clusters))
        if unknown or "default" not in self.app_profiles:
            raise HistoryConfigError(
                f"app_profiles {self.app_profiles} must map 'default' and other ids to one of "
                f"the clusters {list(self.clusters)}"
            )
        if self.gc_family not in self.families:
            raise HistoryConfigError(
                f"gc_family {self.gc_family!r} is not one of the families {list(self.families)}"
            )
        if self.chunk_size < 1:
            raise HistoryConfigError(f"chunk_size {self.chunk_size} must be at least 1 byte")
        if self.user_rows < max(self.initial_partitions, 8):
            raise HistoryConfigError(
                f"user_rows {self.user_rows} must be at least 8 and at least "
                f"initial_partitions ({self.initial_partitions})"
            )

    @property
    def table_name(self) -> str:
        return f"projects/{self.project}/instances/{self.instance}/tables/{self.table_id}"


@dataclass(frozen=True)
class LagEpisode:
    """``cluster``'s replication of ``row_range`` to the other cluster is held from ``start``
    until ``hold_until``: its writes there committed in that time reach the other cluster at
    ``hold_until`` at the earliest, in commit order (seed 004: a row's records from one cluster
    come in commit-timestamp order, so a later write never passes a held one). ``end`` is the
    last commit the generator writes into the range for the episode; ``boundary`` is the
    30-minute mark the episode spans."""

    cluster: str
    row_range: RowRange
    partition_id: str
    start_us: int
    end_us: int
    boundary_us: int
    hold_until_us: int

    def holds(self, commit: Commit) -> bool:
        return (
            commit.cluster == self.cluster
            and self.start_us <= commit.commit_us < self.hold_until_us
            and self.row_range.contains(commit.row_key)
        )

    @property
    def start(self) -> datetime:
        return to_datetime(self.start_us)

    @property
    def end(self) -> datetime:
        return to_datetime(self.end_us)

    @property
    def boundary(self) -> datetime:
        return to_datetime(self.boundary_us)

    @property
    def hold_until(self) -> datetime:
        return to_datetime(self.hold_until_us)


@dataclass(frozen=True)
class RowRangeDrop:
    """A DropRowRange: the prefix (``b""`` for all data), when, and the rows it deleted."""

    prefix: bytes
    at_us: int
    rows: tuple[bytes, ...]


@dataclass
class BigtableHistory:
    """The seeded commits of one table, its partition timeline and its replication model."""

    config: HistoryConfig
    commits: list[Commit]
    timeline: PartitionTimeline
    row_keys: list[bytes]
    lag_episodes: list[LagEpisode] = field(default_factory=list)
    conflicts: list[tuple[Commit, Commit]] = field(default_factory=list)
    drops: list[RowRangeDrop] = field(default_factory=list)

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def generate(cls, config: HistoryConfig) -> BigtableHistory:
        return _Generator(config).run()

    @classmethod
    def empty(cls, start: datetime | None = None, **config) -> BigtableHistory:
        """No seeded commits, the initial partitions only: for live use through the client."""
        return cls.generate(HistoryConfig(start=start, duration=timedelta(0), **config))

    # -- identity and time ----------------------------------------------------------------
    @property
    def table_id(self) -> str:
        return self.config.table_id

    @property
    def table_name(self) -> str:
        return self.config.table_name

    @property
    def start_us(self) -> int:
        return to_micros(self.config.start)

    @property
    def end_us(self) -> int:
        return self.start_us + duration_micros(self.config.duration)

    @property
    def start(self) -> datetime:
        return self.config.start

    @property
    def end(self) -> datetime:
        return to_datetime(self.end_us)

    @property
    def retention_us(self) -> int:
        return duration_micros(self.config.retention)

    # -- partitions -------------------------------------------------------------------------
    @property
    def partitions(self) -> list[Partition]:
        return list(self.timeline.partitions.values())

    def partitions_live_at(self, at: datetime) -> list[Partition]:
        return self.timeline.live_at(to_micros(at))

    # -- replication --------------------------------------------------------------------------
    def reader_cluster(self, app_profile_id: str) -> str:
        """The cluster an app profile reads (``""`` is ``default``); unknown ids are refused."""
        profile = app_profile_id or "default"
        try:
            return self.config.app_profiles[profile]
        except KeyError:
            raise UnknownAppProfileError(
                f"app profile {profile!r} not found: table {self.table_id!r} knows "
                f"{sorted(self.config.app_profiles)} (single-cluster routing to "
                f"{sorted(set(self.config.app_profiles.values()))}); pass one of them as "
                f"app_profile_id, or add it to HistoryConfig.app_profiles"
            ) from None

    def visible_us(self, commit: Commit, reader: str) -> int:
        """When ``commit`` becomes visible to a change stream read on cluster ``reader``."""
        if not commit.cluster or commit.cluster == reader:
            return commit.commit_us
        visible = commit.commit_us + duration_micros(self.config.replication_lag)
        for episode in self.lag_episodes:
            if episode.holds(commit):
                visible = max(visible, episode.hold_until_us)
        return visible

    # -- truth and summary ----------------------------------------------------------------
    def true_state(self, at: datetime) -> TableState:
        """The table after every seeded commit with commit timestamp ``< at``."""
        return true_state(self.commits, to_micros(at))

    def stats(self) -> dict[str, int]:
        size = self.config.chunk_size
        return {
            "commits": len(self.commits),
            "mutations": sum(len(c.mutations) for c in self.commits),
            "splits": len(self.timeline.splits),
            "merges": len(self.timeline.merges),
            "gc": sum(1 for c in self.commits if c.type == GARBAGE_COLLECTION),
            "chunked": sum(
                1
                for c in self.commits
                for m in c.mutations
                if isinstance(m, SetCell) and len(m.value) > size
            ),
            "conflicts": len(self.conflicts),
            "partitions": len(self.timeline.partitions),
        }

    def summary(self) -> dict:
        """Stats plus the table, the time span and the lag episodes, as JSON-ready values."""
        return {
            "table": self.table_name,
            "start": format_micros(self.start_us),
            "end": format_micros(self.end_us),
            **self.stats(),
            "lag_episodes": [
                {
                    "cluster": e.cluster,
                    "row_range": str(e.row_range),
                    "partition": e.partition_id,
                    "start": format_micros(e.start_us),
                    "end": format_micros(e.end_us),
                    "boundary": format_micros(e.boundary_us),
                    "hold_until": format_micros(e.hold_until_us),
                }
                for e in self.lag_episodes
            ],
        }


def generate_history(
    seed: int = 7, start: datetime | None = None, hours: float = 2.0, **config
) -> BigtableHistory:
    """A seeded history of ``hours`` from ``start`` (``hours=0``: an empty, live history)."""
    if hours < 0:
        raise HistoryConfigError(f"hours {hours} must not be negative")
    return BigtableHistory.generate(
        HistoryConfig(seed=seed, start=start, duration=timedelta(hours=hours), **config)
    )


class _Generator:
    """Builds one history; kept apart so the public class stays a plain record."""

    def __init__(self, config: HistoryConfig) -> None:
        self.config = config
        self.rng = random.Random(f"bigtable-history-{config.seed}")
        self.start_us = to_micros(config.start)
        self.duration_us = duration_micros(config.duration)
        self.state: dict[bytes, RowState] = {}
        self.commits: list[Commit] = []
        c = config
        self.user_keys = [b"user#%04d" % i for i in range(c.user_rows)]
        self.session_keys = [b"session#%03d" % i for i in range(c.session_rows)]
        self.keys = sorted(self.user_keys + self.session_keys)

    # -- plan --------------------------------------------------------------------------------
    def run(self) -> BigtableHistory:
        c = self.config
        episode_window = self._plan_episode_window()
        timeline = self._plan_timeline(episode_window)
        episodes = []
        if episode_window is not None:
            t1, t2, boundary, hold = episode_window
            live = timeline.live_at(t1)
            partition = live[self.rng.randrange(len(live))]
            episodes.append(
                LagEpisode(c.clusters[1], partition.range, partition.id, t1, t2, boundary, hold)
            )
        history = BigtableHistory(c, [], timeline, self.keys, episodes)
        if self.duration_us > 0:
            self._write(history)
        history.commits = self.commits
        return history

    def _plan_episode_window(self) -> tuple[int, int, int, int] | None:
        c = self.config
        if not c.lag_episode or self.duration_us == 0:
            return None
        boundary = duration_micros(_BOUNDARY)
        hold_after = duration_micros(c.lag_hold_after_boundary)
        before = duration_micros(_EPISODE_END_BEFORE_BOUNDARY)
        length = duration_micros(c.lag_episode_length)
        margin = duration_micros(_EVENT_MARGIN)
        choices = [
            k
            for k in (1, 2, 3)
            if k * boundary + hold_after + margin < self.duration_us
            and k * boundary - before - length - margin > 0
        ]
        if not choices:
            return None
        b = self.start_us + self.rng.choice(choices) * boundary
        t2 = b - before
        return (t2 - length, t2, b, b + hold_after)

    def _plan_timeline(self, episode_window) -> PartitionTimeline:
        c = self.config
        kinds = (
            ["split"] * c.splits + ["merge2"] * c.two_way_merges + ["merge3"] * c.three_way_merges
        )
        if self.duration_us == 0:
            kinds = []
        self.rng.shuffle(kinds)
        if not _feasible(kinds, c.initial_partitions):
            kinds.sort(key=lambda k: k != "split")  # splits first always works
        times = []
        slot = self.duration_us // (len(kinds) + 1) if kinds else 0
        for i in range(len(kinds)):
            at = self.start_us + slot * (i + 1) + self.rng.randint(-slot // 4, slot // 4)
            times.append(at)
        if episode_window is not None:
            margin = duration_micros(_EVENT_MARGIN)
            low, high = episode_window[0] - margin, episode_window[3] + margin
            minute = 60_000_000
            times = [at if not low <= at <= high else high + (i + 1) * minute
                     for i, at in enumerate(times)]
        return plan_timeline(
            seed=c.seed,
            birth_us=self.start_us,
            keys=self.keys,
            initial_partitions=c.initial_partitions,
            event_times=sorted(times),
            kinds=kinds,  # in the order checked by _feasible
        )

    # -- write -------------------------------------------------------------------------------
    def _write(self, history: BigtableHistory) -> None:
        c, rng = self.config, self.rng
        seconds = self.duration_us / 1_000_000
        agenda: list[tuple[int, int, str, object]] = []  # (time, order, kind, payload)
        for _ in range(int(seconds * c.commits_per_second)):
            agenda.append((self.start_us + rng.randrange(self.duration_us), 0, "commit", None))
        drop_at = self.start_us + int(self.duration_us * 0.7)
        agenda.append((drop_at, 1, "drop", c.drop_prefix))
        for i in range(c.conflicts):
            at = self.start_us + int(self.duration_us * (i + 0.5) / max(c.conflicts, 1))
            agenda.append((at, 0, "conflict", None))
        gc_step = duration_micros(c.gc_interval)
        at = self.start_us + gc_step
        while at < self.start_us + self.duration_us:
            agenda.append((at, 2, "gc", None))
            at += gc_step
        for episode in history.lag_episodes:
            inside = [k for k in self.user_keys if episode.row_range.contains(k)]
            for _ in range(8):  # make sure the held-back cluster writes into the range
                at = rng.randint(episode.start_us, episode.end_us)
                agenda.append((at, 0, "commit", (c.clusters[1], rng.choice(inside))))
        agenda.sort(key=lambda item: (item[0], item[1]))
        self.dropped = False
        self.drops: list[RowRangeDrop] = []
        for at, _, kind, payload in agenda:
            if kind == "commit":
                self._random_commit(at, payload)
            elif kind == "conflict":
                self._conflict(at, history)
            elif kind == "gc":
                self._gc(at)
            else:
                self._drop(at, payload)
        history.drops = self.drops
        self.commits.sort(key=lambda x: x.order)
        numbered = [
            Commit(i, x.row_key, x.cluster, x.commit_us, x.tiebreaker, x.type, x.mutations)
            for i, x in enumerate(self.commits)
        ]
        by_old = {id(old): new for old, new in zip(self.commits, numbered)}
        history.conflicts = [(by_old[id(a)], by_old[id(b)]) for a, b in history.conflicts]
        self.commits = numbered

    def _commit(self, row: bytes, cluster: str, at: int, mutations, type_=USER, tb=None):
        commit = Commit(
            0,
            row,
            cluster,
            at,
            self.rng.randrange(1 << 31) if tb is None else tb,
            type_,
            tuple(mutations),
        )
        state = self.state.setdefault(row, {})
        apply_mutations(state, commit.mutations)
        if not state:
            del self.state[row]
        self.commits.append(commit)
        return commit

    def _random_commit(self, at: int, payload) -> None:
        c, rng = self.config, self.rng
        if payload is not None:
            cluster, row = payload
        else:
            cluster = c.clusters[0] if rng.random() < 0.55 else c.clusters[1]
            if not self.dropped and rng.random() < 0.12:
                row = rng.choice(self.session_keys)
            else:
                row = self.user_keys[int(len(self.user_keys) * rng.random() ** 1.4)]
        kind = rng.choices([k for k, _ in _KINDS], [w for _, w in _KINDS])[0]
        current = self.state.get(row, {})
        mutations: list[Mutation] = []
        if kind == "delete_column" and current:
            family = rng.choice(sorted(current))
            qualifier = rng.choice(sorted(current[family]))
            stamps = sorted(current[family][qualifier])
            low, high = stamps[0], stamps[-1] + 1000
            shape = rng.random()
            if shape < 0.25:
                low = 0  # open start
            elif shape < 0.5:
                high = 0  # open end
            elif len(stamps) > 1:
                high = stamps[-1]  # keep the newest version
            mutations.append(DeleteFromColumn(family, qualifier, low, high))
        elif kind == "delete_family" and current:
            mutations.append(DeleteFromFamily(rng.choice(sorted(current))))
        elif kind == "delete_row" and current:
            mutations.extend(row_delete(current))
        else:
            for _ in range(rng.randint(1, 3)):
                mutations.append(self._set_cell(row, at))
            if kind == "mixed":
                family = rng.choice(c.families)
                qualifier = rng.choice(_QUALIFIERS.get(family, (b"q",)))
                mutations.append(DeleteFromColumn(family, qualifier, 0, _ms(at) - 60_000_000))
        self._commit(row, cluster, at, mutations)

    def _set_cell(self, row: bytes, at: int) -> SetCell:
        c, rng = self.config, self.rng
        family = rng.choice(c.families)
        qualifier = rng.choice(_QUALIFIERS.get(family, (b"q",)))
        stamp = _ms(at)
        if rng.random() < 0.1:
            stamp -= rng.randrange(1, 600) * 1000  # an explicit older version
        if qualifier == b"payload" and rng.random() < c.large_value_share * 8:
            value = rng.randbytes(rng.randint(c.chunk_size + 1, 5 * c.chunk_size))
        else:
            value = b"%s=%s@%d" % (qualifier, row, rng.randrange(1_000_000))
        return SetCell(family, qualifier, stamp, value)

    def _conflict(self, at: int, history: BigtableHistory) -> None:
        rng = self.rng
        row = rng.choice(self.user_keys)
        first = rng.randrange(1 << 31)
        second = (first + 1 + rng.randrange((1 << 31) - 1)) % (1 << 31)
        pair = []
        for cluster, tb in zip(self.config.clusters, (first, second)):
            value = b"status=%s-from-%s" % (row, cluster.encode())
            cell = SetCell("cf", b"status", _ms(at), value)
            pair.append(self._commit(row, cluster, at, [cell], tb=tb))
        history.conflicts.append((pair[0], pair[1]))

    def _gc(self, at: int) -> None:
        c = self.config
        cutoff = _ms(at - duration_micros(c.gc_max_age))
        swept = 0
        for row in sorted(self.state):
            family = self.state[row].get(c.gc_family, {})
            old = [q for q in sorted(family) if any(ts < cutoff for ts in family[q])]
            if not old:
                continue
            mutations = [DeleteFromColumn(c.gc_family, q, 0, cutoff) for q in old]
            self._commit(row, "", at + swept, mutations, type_=GARBAGE_COLLECTION)
            swept += 1
            if swept >= 25:
                break

    def _drop(self, at: int, prefix: bytes) -> None:
        rows = tuple(r for r in sorted(self.state) if r.startswith(prefix))
        for row in rows:
            self._commit(row, self.config.clusters[0], at, row_delete(self.state[row]))
        self.drops.append(RowRangeDrop(prefix, at, rows))
        self.dropped = True


def _ms(micros: int) -> int:
    """Bigtable's default cell granularity: milliseconds (as server-assigned timestamps)."""
    return micros // 1000 * 1000


def _feasible(kinds: list[str], live: int) -> bool:
    for kind in kinds:
        if kind == "split":
            live += 1
        else:
            width = 3 if kind == "merge3" else 2
            if live < width:
                return False
            live -= width - 1
    return True
