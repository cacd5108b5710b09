"""The apply job's configuration: what to read, where to write, and the per-pipeline policies.

The same JSON object drives :func:`airflow_cdc.spark_jobs.apply.apply_window` (as a dict) and
``spark_jobs/apply_job.py`` (as a file)::

    {
      "catalog": "lake",
      "catalog_conf": {"spark.sql.catalog.lake.warehouse": "..."},   # apply_job.py only
      "stream": "orders",
      "window_id": "2024-05-01T10:00:00.000000Z/2024-05-01T11:00:00.000000Z",
      "window_end": "2024-05-01T11:00:00.000000Z",        # optional: from window_id
      "changelog_table": "cdc.orders_changelog",
      "targets": {
        "namespace": "current",                              # target tables live here
        "mapping": {"Singers": "singers", "Albums": "music.albums"},
        "history": ["Singers"],                              # or true / false (default)
        "write_mode": "copy-on-write",                       # or "merge-on-read" (see below)
        "compact_delete_files": 32,                          # merge-on-read: compact from this many (0: never)
        "dead_letter_table": "cdc.orders_dead_letters"      # default <namespace>.<stream>_dead_letters
      },
      "policies": {
        "on_dead_letter": "fail",                            # or "continue"
        "tombstone_horizon_seconds": 604800                  # 7 days (default)
      },
      "changelog_split_size_bytes": 8388608,                # changelog read split size (tuning)
      "fold_rows_per_task": 500000,                          # fold tasks' size (tuning)
      "guard_filter_max_rows": 500000,                       # guard of the window's keys only (tuning; 0: off)
      "strategies": {"packed_flags": false},                 # a performance strategy off (strategies.py)
      "result": "/path/result.json",                         # apply_job.py only
      "fault_point": null                                    # tests: "fail_target_commit", or a list
    }

Table names are ``<namespace>.<name>`` inside ``catalog``; a mapping value without a dot is a
name in ``targets.namespace``. A source table without a mapping keeps its own name when that is
an identifier; otherwise its rows are dead-lettered with a reason that says to map it.
Tombstones and history live beside each target as ``<target>__tombstones`` and
``<target>__history``.

``targets.write_mode`` is how a window's MERGEs change the target, tombstone and history
tables (Iceberg's ``write.merge/update/delete.mode``): ``copy-on-write`` (the default) rewrites
every data file a changed key falls in, so reads stay plain; ``merge-on-read`` writes delete
files beside the new rows, so a small window against a large target costs far less, and
readers merge the delete files until a compaction (Iceberg's ``rewrite_data_files``) folds
them in. Set on an existing target, the mode is applied to its tables by the next window.
Bigtable's own tables take it too. ``targets.compact_delete_files``:
after a window's commits, a table holding at least this many delete files is compacted in the
same job (``compaction.py``; 0 leaves compaction to the user's own maintenance).

Every name is validated here, before any SQL is built and before Spark starts. Pure Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from airflow_cdc.model import CdcError, InvalidIdentifierError, parse_ts, validate_identifier
from airflow_cdc.spark_jobs.apply.guard_keys import DEFAULT_GUARD_FILTER_MAX_ROWS
from airflow_cdc.spark_jobs.apply.strategies import Strategies

# Merge-on-read tables are compacted once they hold this many delete files (``compaction.py``).
DEFAULT_COMPACT_DELETE_FILES = 32

ON_DEAD_LETTER = ("fail", "continue")
WRITE_MODES = ("copy-on-write", "merge-on-read")
DEFAULT_TOMBSTONE_HORIZON = timedelta(days=7)
# Small changelog read splits: parsing, the costly part, runs before the fold's shuffle, so its
# parallelism is the number of splits (Iceberg's default, 128 MiB, often gives one task).
DEFAULT_CHANGELOG_SPLIT_SIZE = 8 << 20
# Rows (changes and guard rows) per task of the fold's sort and window pass: see
# ``fold.fold_partitions``. Each task sorts and buffers its rows, spilling past its memory.
DEFAULT_FOLD_ROWS_PER_TASK = 500_000
TOMBSTONES_SUFFIX = "__tombstones"
HISTORY_SUFFIX = "__history"
# Where the job may be told to crash on purpose (crash tests). ``after_dead_letter_commit``
# stops the job right after that commit, before any table's commit. A table's target,
# tombstone and history commits run side by side, so a crash leaves any subset of them made:
# ``fail_<role>_commit`` makes that one commit fail as if the job had died before making it,
# while the commits beside it complete. Several may be named at once.
FAULT_POINTS = (
    "after_dead_letter_commit",
    "fail_target_commit",
    "fail_tombstone_commit",
    "fail_history_commit",
)


class ApplyConfigError(CdcError, ValueError):
    """The apply job's configuration is incomplete or names something that cannot be used."""


@dataclass(frozen=True)
class TableName:
    """``<catalog>.<namespace>.<name>``, each part a validated identifier."""

    catalog: str
    namespace: str
    name: str

    @property
    def qualified(self) -> str:
        return f"{self.catalog}.{self.namespace}.{self.name}"

    @property
    def sql(self) -> str:
        return f"`{self.catalog}`.`{self.namespace}`.`{self.name}`"

    @classmethod
    def parse(cls, qualified: str) -> TableName:
        """The name of ``<catalog>.<namespace>.<name>`` (each part a valid identifier)."""
        parts = qualified.split(".")
        if len(parts) != 3:
            raise ApplyConfigError(
                f"table name {qualified!r} is not <catalog>.<namespace>.<name>: give all three parts"
            )
        try:  # the namespace and name as the config's own table names are checked
            return _table(validate_identifier("Iceberg catalog", parts[0]), ".".join(parts[1:]), None, "table")
        except InvalidIdentifierError as error:
            raise ApplyConfigError(f"table name {qualified!r}: {error}") from error

    def with_suffix(self, suffix: str) -> TableName:
        name = validate_identifier("Iceberg table name", self.name + suffix)
        return TableName(self.catalog, self.namespace, name)

    def __str__(self) -> str:
        return self.qualified


@dataclass(frozen=True)
class ApplyConfig:
    """One apply run: one stream, one window, every source table found in it."""

    catalog: str
    stream: str
    window_id: str
    window_end: datetime
    changelog_table: TableName
    target_namespace: str
    mapping: Mapping[str, TableName] = field(default_factory=dict)
    history: bool | frozenset[str] = False
    write_mode: str = "copy-on-write"
    compact_delete_files: int = DEFAULT_COMPACT_DELETE_FILES
    dead_letter_table: TableName | None = None
    on_dead_letter: str = "fail"
    tombstone_horizon: timedelta = DEFAULT_TOMBSTONE_HORIZON
    fault_points: frozenset[str] = frozenset()
    changelog_split_size: int = DEFAULT_CHANGELOG_SPLIT_SIZE
    fold_rows_per_task: int = DEFAULT_FOLD_ROWS_PER_TASK
    guard_filter_max_rows: int = DEFAULT_GUARD_FILTER_MAX_ROWS
    strategies: Strategies = Strategies()

    @property
    def tombstone_cutoff(self) -> datetime:
        """Tombstones whose delete committed before this instant are purged (I3's horizon).

        Measured from the window's end, not the wall clock, so a re-run purges exactly what
        the first run purged.
        """
        return self.window_end - self.tombstone_horizon

    def target_for(self, source_table: str) -> TableName:
        """The target of ``source_table``; InvalidIdentifierError when it has no usable name."""
        if source_table in self.mapping:
            return self.mapping[source_table]
        name = validate_identifier(
            "source table (no entry in targets.mapping, so its target would be named after it)",
            source_table,
        )
        return TableName(self.catalog, self.target_namespace, name)

    def history_enabled(self, source_table: str) -> bool:
        if isinstance(self.history, bool):
            return self.history
        return source_table in self.history

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ApplyConfig:
        """Parse and validate the JSON object described in the module doc."""
        if not isinstance(data, Mapping):
            raise ApplyConfigError(f"apply config must be a JSON object, got {type(data).__name__}")
        try:
            return cls._from_dict(data)
        except InvalidIdentifierError as error:
            raise ApplyConfigError(f"apply config: {error}") from None

    @classmethod
    def _from_dict(cls, data: Mapping[str, object]) -> ApplyConfig:
        """The config of ``data``, each part validated in the order of the module doc."""
        catalog = validate_identifier("Iceberg catalog name", data.get("catalog") or "lake")
        stream = validate_identifier("stream id", _required(data, "stream"))
        window_id = str(_required(data, "window_id"))
        window_end = _window_end(window_id, data.get("window_end"))
        changelog = _table(catalog, str(_required(data, "changelog_table")), None, "changelog_table")
        targets, policies = _sections(data)
        namespace = validate_identifier("target namespace", _required(targets, "namespace", "targets."))
        dead_letters = targets.get("dead_letter_table") or f"{namespace}.{stream}_dead_letters"
        return cls(
            catalog=catalog,
            stream=stream,
            window_id=window_id,
            window_end=window_end,
            changelog_table=changelog,
            target_namespace=namespace,
            mapping=_mapping(targets, catalog, namespace),
            history=_history(targets),
            write_mode=_write_mode(targets),
            compact_delete_files=_integer(
                targets, "compact_delete_files", DEFAULT_COMPACT_DELETE_FILES, 0,
                "a non-negative integer: the delete files a table holds before apply compacts it (0: never)",
                prefix="targets.",
            ),
            dead_letter_table=_table(catalog, str(dead_letters), None, "targets.dead_letter_table"),
            on_dead_letter=_on_dead_letter(policies),
            tombstone_horizon=_tombstone_horizon(policies),
            fault_points=_fault_points(data.get("fault_point")),
            changelog_split_size=_integer(
                data, "changelog_split_size_bytes", DEFAULT_CHANGELOG_SPLIT_SIZE, 1 << 20,
                "an integer of at least 1048576 (1 MiB)",
            ),
            fold_rows_per_task=_integer(
                data, "fold_rows_per_task", DEFAULT_FOLD_ROWS_PER_TASK, 1000, "an integer of at least 1000"
            ),
            guard_filter_max_rows=_integer(
                data, "guard_filter_max_rows", DEFAULT_GUARD_FILTER_MAX_ROWS, 0,
                "a non-negative integer (0 reads every key's guard rows)",
            ),
            strategies=_strategies(data.get("strategies")),
        )


def _sections(data: Mapping[str, object]) -> tuple[Mapping[str, object], Mapping[str, object]]:
    """The config's ``targets`` and ``policies`` objects (empty when absent)."""
    targets = data.get("targets") or {}
    policies = data.get("policies") or {}
    if not isinstance(targets, Mapping) or not isinstance(policies, Mapping):
        raise ApplyConfigError("apply config: 'targets' and 'policies' must be JSON objects")
    return targets, policies


def _mapping(targets: Mapping[str, object], catalog: str, namespace: str) -> dict[str, TableName]:
    """``targets.mapping``: each source table's target; no two source tables share one."""
    mapping_in = targets.get("mapping") or {}
    if not isinstance(mapping_in, Mapping):
        raise ApplyConfigError("apply config: targets.mapping must map source tables to target names")
    mapping = {
        str(source): _table(catalog, str(target), namespace, f"targets.mapping[{source!r}]")
        for source, target in mapping_in.items()
    }
    seen: dict[str, str] = {}
    for source, target in mapping.items():
        if target.qualified.lower() in seen:
            raise ApplyConfigError(
                f"apply config: source tables {seen[target.qualified.lower()]!r} and {source!r} "
                f"both map to {target}: give each source table its own target"
            )
        seen[target.qualified.lower()] = source
    return mapping


def _history(targets: Mapping[str, object]) -> bool | frozenset[str]:
    """``targets.history``: true, false, or the source tables that keep history."""
    history = targets.get("history", False)
    if isinstance(history, (list, tuple)):
        return frozenset(str(name) for name in history)
    if not isinstance(history, bool):
        raise ApplyConfigError(
            f"apply config: targets.history {history!r} must be true, false or a list of "
            f"source table names"
        )
    return history


def _write_mode(targets: Mapping[str, object]) -> str:
    """``targets.write_mode``: one of :data:`WRITE_MODES`."""
    write_mode = targets.get("write_mode", "copy-on-write")
    if write_mode not in WRITE_MODES:
        raise ApplyConfigError(
            f"apply config: targets.write_mode {write_mode!r} is not one of {list(WRITE_MODES)}: "
            f"'copy-on-write' rewrites the data files a window changes, 'merge-on-read' writes "
            f"delete files beside them"
        )
    return write_mode


def _on_dead_letter(policies: Mapping[str, object]) -> str:
    """``policies.on_dead_letter``: one of :data:`ON_DEAD_LETTER`."""
    on_dead_letter = str(policies.get("on_dead_letter", "fail"))
    if on_dead_letter not in ON_DEAD_LETTER:
        raise ApplyConfigError(
            f"apply config: policies.on_dead_letter {on_dead_letter!r} is not one of "
            f"{list(ON_DEAD_LETTER)}: 'fail' fails the window when any row is dead-lettered, "
            f"'continue' applies the rest"
        )
    return on_dead_letter


def _tombstone_horizon(policies: Mapping[str, object]) -> timedelta:
    """``policies.tombstone_horizon_seconds``: a non-negative number of seconds."""
    horizon = policies.get("tombstone_horizon_seconds", DEFAULT_TOMBSTONE_HORIZON.total_seconds())
    if isinstance(horizon, bool) or not isinstance(horizon, (int, float)) or horizon < 0:
        raise ApplyConfigError(
            f"apply config: policies.tombstone_horizon_seconds {horizon!r} must be a "
            f"non-negative number of seconds"
        )
    return timedelta(seconds=float(horizon))


def _fault_points(fault_point: object) -> frozenset[str]:
    """``fault_point``: none, one of :data:`FAULT_POINTS`, or a list of them."""
    points = fault_point if isinstance(fault_point, (list, tuple)) else [fault_point]
    for point in points:
        if point is not None and point not in FAULT_POINTS:
            raise ApplyConfigError(
                f"apply config: fault_point {point!r} is not one of {list(FAULT_POINTS)} "
                f"(or a list of them)"
            )
    return frozenset(point for point in points if point is not None)


def _strategies(data: object) -> Strategies:
    """``strategies``: the performance strategies a run turns off (``strategies.py``)."""
    try:
        return Strategies.from_dict(data)
    except ValueError as error:
        raise ApplyConfigError(f"apply config: {error}") from None


def _integer(
    data: Mapping[str, object], key: str, default: int, minimum: int, requirement: str, prefix: str = ""
) -> int:
    """``data[key]`` (``default`` when absent), an integer of at least ``minimum``; otherwise
    ApplyConfigError naming ``prefix + key``, the value and ``requirement``."""
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ApplyConfigError(f"apply config: {prefix}{key} {value!r} must be {requirement}")
    return value


def _required(data: Mapping[str, object], key: str, prefix: str = "") -> object:
    value = data.get(key)
    if value in (None, ""):
        raise ApplyConfigError(f"apply config: {prefix}{key} is missing")
    return value


def _table(catalog: str, text: str, default_namespace: str | None, what: str) -> TableName:
    parts = text.split(".")
    if len(parts) == 1 and default_namespace is not None:
        parts = [default_namespace, parts[0]]
    if len(parts) != 2:
        raise ApplyConfigError(
            f"apply config: {what} {text!r} is not <namespace>.<name>"
            + (" or <name>" if default_namespace is not None else "")
            + f" (the catalog is {catalog!r})"
        )
    namespace = validate_identifier(f"{what} namespace", parts[0])
    name = validate_identifier(f"{what} name", parts[1])
    return TableName(catalog, namespace, name)


def _window_end(window_id: str, explicit: object) -> datetime:
    text = explicit if explicit else window_id.rpartition("/")[2]
    try:
        return parse_ts(str(text))
    except (TypeError, ValueError):
        raise ApplyConfigError(
            f"apply config: cannot tell the window's end from window_id {window_id!r}: use "
            f"Window.window_id ('<start>/<end>') or give window_end as ISO-8601 UTC text"
        ) from None
