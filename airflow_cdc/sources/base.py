"""The seam every change source plugs into: what a source knows that the window protocol needs.

A source is one class deriving from :class:`ChangeSource`, in its own package
(``airflow_cdc/sources/<kind>/`` or any package of the user's), registered by kind
(:mod:`.registry`). The protocol (plan, extract, commit, apply, gate; ``pipeline/``,
``spark_jobs/extract.py`` and the operators) is written once against this class and never
against a source. Step by step, what the protocol asks of a source:

====================  =====================================================================
step 0 (when)         :meth:`ChangeSource.evidence_delay` and :meth:`ChangeSource.readiness`:
                      how long after a window's end its evidence can exist, and whether it
                      does now. The plan task waits (deferred) until it does.
step 1 (plan)         :meth:`ChangeSource.initial_positions` (a stream's first window),
                      :meth:`ChangeSource.discover` (partitions found at plan time, such as
                      Datastream's files), :meth:`ChangeSource.plan_options` (choices a
                      re-run must repeat, kept in the plan file).
step 2 (extract)      :meth:`ChangeSource.read_partition` over ``[start, e)`` (the extract job
                      runs rounds when partitions split), unless the source
                      :attr:`~ChangeSource.reads_whole_windows`;
                      :meth:`ChangeSource.extract_overrides` for short-lived credentials.
                      What builds or takes DataFrames (a whole-window read, rows Spark reads
                      beside the partitions, repeats dropped against the changelog, a check
                      of the whole window, a source's own apply) is the source's Spark side,
                      ``airflow_cdc.spark_jobs.sources`` (:attr:`ChangeSource.spark_side`).
step 3 (commit)       :meth:`ChangeSource.commit_warnings`, :attr:`ChangeSource.summary_counts`.
step 5 (gate)         :meth:`ChangeSource.covers`: which evidence proves a partition covered
                      the window; :meth:`ChangeSource.completeness_note` when completeness was
                      declared (an idle timeout) rather than proven.
change rows           :meth:`ChangeSource.canonical_type`: the source's column types in the
                      canonical names of :mod:`airflow_cdc.sources.column_types`, which the
                      change rows declare and apply reads (apply knows no source's names);
                      the ordering key per key (:attr:`ChangeSource.ordering_key_parts`).
====================  =====================================================================

This package holds wire formats only: no module of ``airflow_cdc.sources`` imports pyspark,
not even inside a function (``tests/test_layering.py``).

A source is built from its JSON spec (:meth:`ChangeSource.from_spec`) on the Airflow side and
on Spark executors alike, so it must not import Airflow; whatever needs an Airflow
connection (listing a bucket, minting a token, reading a catalog) goes through the object
named by :attr:`ChangeSource.airflow_hook`, which the Airflow side builds and hands in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar

from airflow_cdc.model import (
    CHANGELOG_NAMES,
    ChangeRow,
    PartitionOutcome,
    PartitionPosition,
    Readiness,
    Window,
    format_ts,
)


@dataclass(frozen=True)
class TransactionTally:
    """Records of one source transaction seen in one partition read.

    ``expected_records`` is what the source says the whole transaction holds across all
    partitions; ``record_ids`` are the records this read returned. Summed over all partitions
    of a window, the ids must reach the expected count, or the window is incomplete.
    ``commit_ts`` (when the source knows it) lets a window whose partition's evidence stopped
    short leave that partition's part of a later transaction to the next window.
    """

    transaction_id: str
    expected_records: int
    record_ids: frozenset[str]
    commit_ts: datetime | None = None


@dataclass(frozen=True)
class DeadLetter:
    """A record a source could not turn into a change row: kept whole, with the reason."""

    partition_id: str
    raw: str
    reason: str
    source_table: str | None = None
    event_id: str | None = None


@dataclass(frozen=True)
class PartitionRead:
    """What reading one partition over one window returned."""

    rows: tuple[ChangeRow, ...]
    outcome: PartitionOutcome
    transactions: tuple[TransactionTally, ...] = field(default=())
    dead_letters: tuple[DeadLetter, ...] = field(default=())
    counts: Mapping[str, int] = field(default_factory=dict)  # summed over the window's reads


@dataclass(frozen=True)
class Discovery:
    """Partitions a source found at plan time, and what it saw, for the plan task's summary."""

    partitions: tuple[PartitionPosition, ...] = ()
    seen: Mapping[str, Any] = field(default_factory=dict)




def changelog_tuple(row: ChangeRow) -> tuple:
    """``row`` as one changelog table row, in column order (what Spark tasks hand back)."""
    from airflow_cdc.model import change_row_values

    return change_row_values(row)


def dead_letter_tuple(stream: str, window_id: str, dead: DeadLetter) -> tuple:
    """``dead`` as one row of the stream's dead-letter table (changelog columns + reason)."""
    record = dict.fromkeys(CHANGELOG_NAMES)
    record.update(
        stream=stream,
        window_id=window_id,
        partition_id=_text(dead.partition_id),
        source_table=_text(dead.source_table),
        event_id=_text(dead.event_id),
        source_metadata_json=json.dumps(
            {"partition": _text(dead.partition_id), "raw": (_text(dead.raw) or "")[:100_000]}),
    )
    return tuple(record[name] for name in CHANGELOG_NAMES) + (f"extract: {dead.reason}",)


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def lone_surrogate_in(line: str, parsed: object) -> bool:
    """Whether the JSON ``line`` (``parsed`` is what it parsed into) holds a lone surrogate:
    a ``\\udXXX`` escape without its pair, which JSON allows but no UTF-8 text can hold
    (Spark would store U+FFFD in its place). Cheap for every line: only a line with such an
    escape is checked further."""
    if not _SURROGATE_ESCAPE.search(line):
        return False
    import json

    try:
        json.dumps(parsed, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError:
        return True
    except (TypeError, ValueError, RecursionError):
        return False
    return False


def _text(value) -> str | None:
    # A dead letter's names come from the record that failed: whatever they hold, text.
    return value if value is None or isinstance(value, str) else repr(value)[:1000]


def read_tuples(stream: str, window_id: str, read: PartitionRead) -> tuple[list[tuple], list[tuple]]:
    """A partition read as it leaves its Spark task: changelog tuples of its rows, dead-letter
    tuples of its dead letters. A row that cannot be written as a changelog row (a value of no
    JSON type, a number beyond what its text may hold) becomes a dead letter naming its event
    and the fault, so one bad row never fails the window."""
    rows = ChangelogRows(stream, window_id)
    rows.extend(read.rows)
    return rows.tuples, rows.dead_letters(read.dead_letters)


class ChangelogRows:
    """Change rows made into the changelog tuples a read task hands on, as they come
    (:meth:`extend`): :attr:`tuples`, and for a row that cannot be written as a changelog row,
    a dead-letter tuple naming its event and the fault (:attr:`unwritable`)."""

    def __init__(self, stream: str, window_id: str) -> None:
        self.stream, self.window_id = stream, window_id
        self.tuples: list[tuple] = []
        self.unwritable: list[tuple] = []

    def extend(self, rows) -> None:
        for row in rows:
            try:
                self.tuples.append(changelog_tuple(row))
            except Exception as error:  # noqa: BLE001 - kept, with the reason, in the dead letters
                try:
                    raw = repr(row)[:100_000]
                except Exception:  # noqa: BLE001
                    raw = f"<change row of event {row.event_id!r}>"
                self.unwritable.append(unwritable_row(
                    self.stream, self.window_id, row.partition_id, raw, row.event_id, row.source_table,
                    "written to the changelog", error))

    def dead_letters(self, read_dead_letters) -> list[tuple]:
        """The dead-letter tuples of a read's own dead letters, then of the unwritable rows."""
        return [dead_letter_tuple(self.stream, self.window_id, d) for d in read_dead_letters] + self.unwritable


def unwritable_row(stream: str, window_id: str, partition_id, raw: str, event_id, source_table,
                   where: str, error: Exception) -> tuple:
    """The dead-letter tuple of a change row that cannot be ``where`` (written to the
    changelog, handed to Spark), naming its event, its table and the fault."""
    return dead_letter_tuple(stream, window_id, DeadLetter(
        partition_id or "", raw,
        f"change row of event {event_id!r} (table {source_table!r}) cannot be {where} "
        f"({type(error).__name__}: {error})",
        source_table=source_table if isinstance(source_table, str) else None,
        event_id=event_id if isinstance(event_id, str) else None))


class ChangeSource:
    """A change source as the window protocol sees it. Subclasses set :attr:`kind` and
    implement :meth:`initial_positions` and :meth:`read_partition` (or set
    :attr:`reads_whole_windows` and read them in their Spark side);
    everything else has a default that fits a source whose evidence exists at the window end.
    """

    #: The registered name (an identifier); the state store records it with the stream.
    kind: ClassVar[str] = ""
    #: The parts of the ordering key, in order: what the source encodes into each change row's
    #: ``ordering_key`` (documentation; the key itself is opaque bytes to the protocol).
    ordering_key_parts: ClassVar[tuple[str, ...]] = ()
    #: True when partitions end in children (split/merge): extract reads in rounds. A source
    #: that leaves it False and reports children fails its extract, naming this.
    partitions_split: ClassVar[bool] = False
    #: ``module:Class`` of the Airflow-side object the plan and extract steps hand to the
    #: source's hooks (built with the pipeline's ``source_conn`` arguments), or None.
    airflow_hook: ClassVar[str | None] = None
    #: ``module:Class`` of the source's Spark side (a ``SparkSide`` subclass of
    #: ``airflow_cdc.spark_jobs.sources.base``), for a source that is not built in and needs
    #: one; built-in kinds are found by kind (``airflow_cdc.spark_jobs.sources``). None: the
    #: plain Spark side (partition reads, every row kept as read).
    spark_side: ClassVar[str | None] = None
    #: True when the extract task may read the window's partitions in the Airflow worker to
    #: prove the window empty and skip Spark (:mod:`airflow_cdc.pipeline.empty_window`):
    #: ``read_partition`` needs no Spark, reading is free of side effects, and a window with
    #: no change rows needs nothing of its Spark side.
    proves_empty_windows: ClassVar[bool] = False
    #: The source's own window counts that the commit and gate summaries show.
    summary_counts: ClassVar[tuple[str, ...]] = ()

    def __init__(self, spec: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> None:
        self.spec = dict(spec)
        self.options = dict(options or {})

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], options: Mapping[str, Any] | None = None):
        """The source configured by ``spec`` (the stream's JSON spec) and a plan's ``options``."""
        return cls(spec, options)

    @classmethod
    def validate_spec(cls, stream_id: str, spec: Mapping[str, Any]) -> dict:
        """The spec as the stream records it; refuse a bad one naming the key and the fix.

        Called when the DAG is parsed, so a mistake fails there and not in a worker.
        """
        return dict(spec)

    # --- step 0: when may a window be read ---------------------------------------------------
    def evidence_delay(self) -> timedelta:
        """How long after a window's end the evidence that covers it can exist."""
        return timedelta(0)

    def readiness(self, window: Window, now: datetime, known: Sequence, hook: Any) -> Readiness:
        """Whether ``window`` may be planned at ``now``; ``known`` are the stream's partitions
        in the state store. The default waits out :meth:`evidence_delay`."""
        due = window.end + self.evidence_delay()
        if now >= due:
            return Readiness(True, f"the window's evidence can exist since {format_ts(due)}")
        return Readiness(
            False, f"the window's evidence cannot exist before {format_ts(due)}", retry_at=due
        )

    # --- step 1: plan -------------------------------------------------------------------------
    def initial_positions(self, window: Window) -> list[PartitionPosition]:
        """Where the stream's first window starts reading."""
        raise NotImplementedError(f"source {self.kind!r} does not say where a stream starts")

    def discover(self, window: Window, now: datetime, hook: Any) -> Discovery:
        """Partitions that exist since the last window (created when the window opens)."""
        return Discovery()

    def plan_options(self, kept: Mapping | None, planned_at: datetime, hook: Any,
                     positions: Sequence[PartitionPosition] = (),
                     window: Window | None = None) -> dict:
        """Options the extract reads from the plan file. ``kept``: an earlier attempt's (None
        for the first), so a choice made once stays the same on every re-plan; ``positions``:
        where the window reads each partition from (Debezium names the files from them);
        ``window``: the window planned (Spanner commit timestamps refuse one ending in the
        future and check its read instants against the retention)."""
        return {}

    def plan_summary(self, plan) -> dict:
        """What the plan task adds to its XCom summary about ``plan`` (a WindowPlanFile)."""
        return {}

    # --- step 2: extract ----------------------------------------------------------------------
    def extract_overrides(self, hook: Any) -> dict:
        """Short-lived secrets merged into the spec for the extract job (never in a plan file)."""
        return {}

    def read_partition(self, window: Window, position: PartitionPosition) -> PartitionRead:
        """Read one partition from ``position`` to the window's end (on a Spark executor)."""
        raise NotImplementedError(f"source {self.kind!r} reads whole windows (reads_whole_windows)")

    def read_partition_tuples(
        self, window: Window, position: PartitionPosition
    ) -> tuple[PartitionRead, list, list]:
        """:meth:`read_partition` as a read task hands it on: the read (its outcome, tallies and
        counts; its rows may be left out), its rows as changelog tuples and its dead letters as
        dead-letter tuples (:func:`read_tuples`). A source may make the tuples while it reads,
        with :class:`ChangelogRows` (the Spanner change stream's does: a performance strategy).
        Default: :func:`read_tuples` of :meth:`read_partition`."""
        read = self.read_partition(window, position)
        rows, dead = read_tuples(window.stream_id, window.window_id, read)
        return read, rows, dead

    def prepare_reads(self) -> None:
        """Load and open what :meth:`read_partition` needs (client libraries, a client) ahead of
        the first read. The extract job calls it once in each read worker while the driver
        still prepares the window; a failure here is ignored (the read meets it again and
        reports it). Default: nothing."""

    #: True when the source's window is read whole by its Spark side
    #: (``SparkSide.read_window`` in ``airflow_cdc.spark_jobs.sources``: Datastream's files,
    #: the commit-timestamp source's partitioned queries); False: the extract job reads it
    #: partition by partition with :meth:`read_partition`.
    reads_whole_windows: ClassVar[bool] = False

    def resolve_child(self, child, reporter: str, known: Mapping, pending: Mapping) -> Any:
        """A child as ``reporter`` reported it -> the child with all its parents.

        For a source whose close record names only the closing partition (Bigtable: a merge
        child's other parents are the partitions over its row range). ``known`` maps every
        partition the window knows to None while it is live, or to the ids of the children
        it ended into; ``pending`` are the children waiting for parents, by id. Called once
        all outcomes of a round are known. The default returns the child as reported."""
        return child

    def check_partitions(self, outcomes: Sequence[PartitionOutcome], pending: Sequence) -> None:
        """Raise when the partitions live after the window are not what the source needs
        (Bigtable: they must tile the key space); called once the window's rounds are read."""

    def window_counts(self, counts: dict, changes: int) -> dict:
        """The window's counts once its ``changes`` (rows after the repeats the Spark side
        drops) are known."""
        return {**counts, "changes": changes}

    # --- step 3: commit, step 5: gate ---------------------------------------------------------
    def commit_warnings(self, counts: Mapping[str, Any]) -> list[str]:
        """Warnings the commit task logs about a committed window's counts."""
        return []

    @staticmethod
    def covers(window: Window, watermark: datetime | None, finished: bool) -> bool:
        """Whether a partition's evidence proves it covered ``window`` (the gate's rule, I4)."""
        return finished or (watermark is not None and watermark >= window.end)

    @classmethod
    def completeness_note(cls, counts: Mapping[str, Any]) -> tuple[str, str] | None:
        """(label, explanation) when a window's completeness was declared rather than proven
        by evidence (an idle timeout), from its counts; None when evidence proved it."""
        return None

    # --- step 4: apply -----------------------------------------------------------------------
    #: True for a source whose changes are not row images (Bigtable's cells: range deletes,
    #: cell versions) and which applies its windows itself (``SparkSide.apply_window`` in
    #: ``airflow_cdc.spark_jobs.sources``); False: the relational apply engine
    #: (``spark_jobs/apply``) folds the window per key.
    applies_own_changes: ClassVar[bool] = False

    # --- apply and lineage --------------------------------------------------------------------
    def canonical_type(self, source_type: Any) -> str:
        """A column type as this source names it -> the canonical type name apply reads.

        The default reads canonical names only (a source whose types have other names
        overrides it with its own mapping); anything else raises UnsupportedColumnTypeError."""
        from airflow_cdc.sources.column_types import parse_source_type

        return str(parse_source_type(source_type))

    def lineage_inputs(self, resolved: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(namespace, name) of the source for OpenLineage; ``resolved`` is what
        :meth:`extract_overrides` returned."""
        return []
