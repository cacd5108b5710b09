"""What a source's Spark read tasks hand to Spark: one frame, in Arrow.

The read tasks (``mapInArrow``) return everything a read gives in one schema
(:func:`read_schema`), one kind of row per value of :data:`KIND`:

* ``row``: a changelog row (the changelog's columns);
* ``dead``: a dead letter (the changelog's columns and :data:`REASON`);
* ``tally``: one record of a source transaction the read holds only part of:
  ``transaction_id``, ``commit_ts`` (when the source knows it), :data:`EXPECTED` records in
  the whole transaction, :data:`RECORD` its id (a transaction held whole is only counted);
* ``key``: a key a reconciliation read found in a source table (:func:`key_batch`):
  ``partition_id`` names the table's partition, :data:`RECORD` holds the key's canonical text;
* ``outcome``: a summary, pickled (:data:`OUTCOME`): a partition read's outcome and counts
  (:func:`partition_batches`), or what a source's own read task counted (:func:`summary_batch`);
* ``files``: the changelog files a read task wrote itself and the column declarations of
  their rows, pickled (:data:`OUTCOME`; :func:`files_batch`), in place of its ``row`` rows,
  when the window's rows are written by the read tasks (:mod:`.task_files`).

Who uses it: the extract job's partition reads (``spark_jobs/extract.py``, a round's positions
read by :func:`airflow_cdc.spark_jobs.extract.read_positions`), and the Spark sides of sources
that read a whole window their own way (Datastream's files, the commit-timestamp source's
partitioned queries). pyspark is imported inside the functions that use it: the read tasks
load this module with pyarrow alone.

The driver keeps the frame on the executors (:func:`kept`) and takes from it what each step
needs: the outcomes (the only thing it collects of a large window), the tallies for the
transaction check, the rows for the changelog commit, the dead letters.

A performance strategy. Saves: a pickled tuple per partition (outcome, tallies, rows, dead
letters) unpickled whole by every later pass and converted row by row by ``createDataFrame``,
and most of the transaction check (``bench/extract.py --full``, docs/performance.md).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence

from airflow_cdc.model import CHANGELOG_COLUMNS
from airflow_cdc.sources.base import CHANGELOG_NAMES, unwritable_row

KIND = "_read_kind"
REASON = "_reason"
EXPECTED = "_expected"
RECORD = "_record"
OUTCOME = "_outcome"
ROW, DEAD, TALLY, KEY, SUMMARY, FILES = "row", "dead", "tally", "key", "outcome", "files"

_EXTRA_COLUMNS = ((KIND, "string"), (REASON, "string"), (EXPECTED, "long"), (RECORD, "string"),
                  (OUTCOME, "binary"))
# Rows per Arrow batch a read task hands over (a partition's rows go in several).
ROWS_PER_BATCH = 20_000


def read_schema() -> str:
    """The Spark schema of the read frame (DDL): the changelog's columns, then the read's own."""
    return ", ".join(f"`{name}` {kind}" for name, kind in CHANGELOG_COLUMNS + _EXTRA_COLUMNS)


def _arrow_types() -> dict:
    import pyarrow as pa

    kinds = {
        "string": pa.string(),
        "long": pa.int64(),
        "binary": pa.binary(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "map<string,string>": pa.map_(pa.string(), pa.string()),
    }
    return {name: kinds[kind] for name, kind in CHANGELOG_COLUMNS + _EXTRA_COLUMNS}


_TYPES: dict = {}


def _batch(kind: str, rows: int, columns: dict):
    """One Arrow batch of ``rows`` rows of ``kind``: ``columns`` by name (lists), the others null."""
    import pyarrow as pa

    if not _TYPES:
        _TYPES.update(_arrow_types())
    arrays = []
    for name, arrow_type in _TYPES.items():
        if name == KIND:
            arrays.append(pa.array([kind] * rows, type=arrow_type))
        elif name in columns:
            arrays.append(pa.array(columns[name], type=arrow_type))
        else:
            arrays.append(pa.nulls(rows, type=arrow_type))
    return pa.RecordBatch.from_arrays(arrays, names=list(_TYPES))


def partition_batches(outcome, tallies, rows: list[tuple], dead: list[tuple], counts: dict,
                      bad_row_dead_letter, rows_to=None) -> Iterator:
    """The Arrow batches of one partition read: its rows (changelog tuples), dead letters
    (changelog tuples and the reason), the records of the transactions it holds only part of
    (tallies), and last its outcome and counts: (outcome, counts, rows, tally records, dead
    letters, transactions it holds whole).
    With ``rows_to``, the rows' batches go there (a task's changelog files,
    :class:`.changelog_files.TaskFiles`) instead.

    A row Arrow cannot hold (text that is no Unicode, a value out of its type's range) becomes
    a dead letter through ``bad_row_dead_letter(row, error)``: one bad row never fails the read.
    """
    dead = list(dead)
    row_count = 0
    for batch in row_batches(rows, dead, bad_row_dead_letter):
        row_count += batch.num_rows
        if rows_to is None:
            yield batch
        else:
            rows_to(batch)
    if dead:
        yield dead_batch(dead)
    # A performance strategy. A transaction whose records this read holds all of is complete
    # whatever other partitions hold: only its count leaves the task, and the window's check
    # (spark_jobs/extract.py) tallies the others. Saves: tallying the records of transactions
    # held whole (bench/extract.py --full, docs/performance.md).
    tallies = list(tallies)
    partial = [t for t in tallies if len(t.record_ids) != t.expected_records]
    records = [(t.transaction_id, t.expected_records, record, t.commit_ts)
               for t in partial for record in sorted(t.record_ids)]
    if records:
        txn, expected, record, commit_ts = (list(c) for c in zip(*records))
        yield _batch(TALLY, len(records), {"transaction_id": txn, EXPECTED: expected,
                                           RECORD: record, "commit_ts": commit_ts})
    yield summary_batch((outcome, dict(counts), row_count, len(records), len(dead), len(tallies) - len(partial)),
                        outcome.partition_id)


def row_batches(rows: Sequence[tuple], dead: list, bad_row_dead_letter) -> Iterator:
    """``rows`` (changelog tuples) in Arrow batches of at most :data:`ROWS_PER_BATCH`; a row
    Arrow cannot hold is appended to ``dead`` as ``bad_row_dead_letter(row, error)``."""
    for start in range(0, len(rows), ROWS_PER_BATCH):
        chunk = rows[start:start + ROWS_PER_BATCH]
        try:
            batch = _rows_batch(ROW, chunk)
        except Exception:  # noqa: BLE001 - find the rows at fault, keep the others
            good = []
            for row in chunk:
                try:
                    _rows_batch(ROW, [row])
                    good.append(row)
                except Exception as error:  # noqa: BLE001 - kept as a dead letter, with why
                    dead.append(bad_row_dead_letter(row, error))
            batch = _rows_batch(ROW, good)
        yield batch


def key_batch(partition_id: str, key_texts: Sequence[str]):
    """Keys a reconciliation read of one partition found (their canonical texts)."""
    return _batch(KEY, len(key_texts), {"partition_id": [partition_id] * len(key_texts),
                                        RECORD: list(key_texts)})


def summary_batch(summary, partition_id: str | None = None):
    """One row holding ``summary`` pickled: what the driver collects of a read (:func:`summaries`)."""
    return _batch(SUMMARY, 1, {"partition_id": [partition_id], OUTCOME: [pickle.dumps(summary)]})


def files_batch(files: Sequence, declarations: Sequence):
    """One row holding a read task's changelog files and their rows' column declarations,
    pickled (:func:`summaries_and_files` collects them)."""
    return _batch(FILES, 1, {OUTCOME: [pickle.dumps((list(files), list(declarations)))]})


def bad_row_dead_letter(stream: str, window_id: str, row: tuple, error: Exception) -> tuple:
    """The dead-letter tuple of a changelog tuple Spark cannot take, naming its event and why."""
    record = dict(zip(CHANGELOG_NAMES, row))
    return unwritable_row(stream, window_id, record.get("partition_id"), repr(row)[:100_000],
                          record.get("event_id"), record.get("source_table"), "handed to Spark", error)


def _rows_batch(kind: str, rows: Sequence[tuple]):
    columns = dict(zip(CHANGELOG_NAMES, (list(c) for c in zip(*rows)))) if rows else {}
    return _batch(kind, len(rows), columns)


def dead_batch(dead: Sequence[tuple]):
    """Dead-letter tuples (changelog columns + reason); one whose text Arrow cannot hold is
    written with its texts escaped rather than lost."""
    try:
        return _with_reasons(dead)
    except Exception:  # noqa: BLE001 - the texts at fault, escaped
        return _with_reasons([tuple(_escaped(v) for v in d) for d in dead])


def _with_reasons(dead: Sequence[tuple]):
    columns = dict(zip(CHANGELOG_NAMES + (REASON,), (list(c) for c in zip(*dead))))
    return _batch(DEAD, len(dead), columns)


def _escaped(value):
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    return value


# --- on the driver ------------------------------------------------------------------------
def kept(frame):
    """``frame`` computed now and kept on the executors (a local checkpoint) for every later pass.

    A performance strategy. Saves: encoding the rows into the compressed columns of a
    DataFrame cache (maps are costly to encode there); ``bench/extract.py`` shows it
    (docs/performance.md). The cost: a cache lost with
    its executor would be read again from the source, a checkpoint is not, so the job fails
    and its task's retry runs it again (a re-run is exactly once, I1).
    The extract job frees it when the window is committed (``WindowRead.kept``,
    ``airflow_cdc.spark_jobs.checkpoints.release_checkpoint``).
    """
    return frame.localCheckpoint(eager=True)


def summaries(frame) -> list:
    """The summaries of ``frame`` (:func:`summary_batch`); of a partition read: (outcome,
    counts, rows, tally records, dead letters, transactions held whole)."""
    return summaries_and_files(frame)[0]


def summaries_and_files(frame) -> tuple[list, list, list]:
    """The summaries of ``frame``, and the changelog files its read tasks wrote with their
    rows' declarations (:func:`files_batch`), in one pass."""
    from pyspark.sql import functions as F

    found, files, declarations = [], [], []
    for kind, value in frame.where(F.col(KIND).isin(SUMMARY, FILES)).select(KIND, OUTCOME).collect():
        if kind == SUMMARY:
            found.append(pickle.loads(value))
        else:
            written, declared = pickle.loads(value)
            files.extend(written)
            declarations.extend(declared)
    return found, files, declarations


def rows_of(frame):
    """The changelog rows of ``frame``, in the changelog's columns."""
    from pyspark.sql import functions as F

    return frame.where(F.col(KIND) == ROW).select(*CHANGELOG_NAMES)


def dead_letters_of(frame):
    """The dead letters of ``frame``: the changelog's columns and ``reason``."""
    from pyspark.sql import functions as F

    return frame.where(F.col(KIND) == DEAD).select(*CHANGELOG_NAMES, F.col(REASON).alias("reason"))


def keys_of(frame):
    """The keys of ``frame`` (:func:`key_batch`): partition_id, key (its canonical text)."""
    from pyspark.sql import functions as F

    return frame.where(F.col(KIND) == KEY).select("partition_id", F.col(RECORD).alias("key"))


def changelog_ddl() -> str:
    """The changelog's columns as a Spark schema (DDL), for rows a driver adds to a read frame's."""
    return ", ".join(f"`{name}` {kind}" for name, kind in CHANGELOG_COLUMNS)


def tallies_of(frame):
    """One row per transaction record of ``frame``: transaction_id, expected, record, commit_ts."""
    from pyspark.sql import functions as F

    return frame.where(F.col(KIND) == TALLY).select(
        "transaction_id", F.col(EXPECTED).alias("expected"), F.col(RECORD).alias("record"), "commit_ts")
