"""Window-tagged Iceberg commits: find a window's commit, and commit SQL or appends with the tag.

Shared by the changelog writers (``changelog.py``) and the apply job (``apply/``).

Every commit apply makes carries ``WINDOW_SNAPSHOT_PROPERTY = <window id>`` in its snapshot
summary (plus the apply's own properties). A re-run of the window finds those tags and skips
the commits already made, so each output table receives the window exactly once (I1), and
reads the tables as they were before the window (the tagged snapshot's parent) so that what it
recomputes for the missing commits is what the first run computed. A commit the job has just
made, and the snapshot a frame is pinned to, are read from the table's metadata through the
catalog (no Spark job), and so are the window's earlier commits; the search of the snapshots
table is the fallback.

Two jobs of the same window at once (an orphaned spark-submit and the task's retry) both
find the commit missing; each commit is then made once: a MERGE that read the table before
the winner's commit conflicts in Iceberg's optimistic concurrency, an append is checked
against the snapshot its job read (``append_tagged(read_at=...)``), and the loser takes the
winner's tagged commit as its own (:func:`concurrent_window_commit`). A MERGE that would read
the table after the winner's commit conflicts with nothing: the apply looks for the window's
commit again right before it (``apply/table_commits.py``).

Appends are tagged with the writer option ``snapshot-property.<key>``. SQL ``MERGE`` on the
Iceberg 1.10 / Spark 3.5 runtime ignores the session conf ``spark.sql.iceberg.snapshot-property.*``,
so it runs inside ``org.apache.iceberg.spark.CommitMetadata.withCommitProperties``, which
takes a ``java.util.concurrent.Callable``: here a Python object served by py4j's callback
server, which calls back into the same session.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from airflow_cdc.model import WINDOW_SNAPSHOT_PROPERTY
from airflow_cdc.spark_jobs.spark_line import read_at_snapshot, sql_with_args

# The apply's bookkeeping on a target commit: what else the window commits (so a re-run can
# tell that the window is complete without recomputing it) and the counts it reported.
APPLY_PROPERTY = "airflow-cdc.apply"


@dataclass(frozen=True)
class WindowCommit:
    """A snapshot of one table tagged with the window, and the snapshot it was made on."""

    snapshot_id: int
    parent_id: int | None
    summary: Mapping[str, str]

    def apply_properties(self) -> dict:
        text = self.summary.get(APPLY_PROPERTY)
        return json.loads(text) if text else {}


def window_commit(spark: SparkSession, table: str, window_id: str) -> WindowCommit | None:
    """The (oldest) snapshot of ``table`` tagged with ``window_id``, or None.

    Searched in the table's metadata (one py4j call hands over all snapshots as JSON, no
    Spark job); the ``snapshots`` metadata table is the fallback.
    """
    snapshots = _metadata_snapshots(spark, table)
    if snapshots is not None:
        return _oldest_tagged(snapshots, window_id)
    return _snapshots_table_commit(spark, table, window_id)


def _oldest_tagged(snapshots: list[dict], window_id: str) -> WindowCommit | None:
    tagged = [s for s in snapshots if (s.get("summary") or {}).get(WINDOW_SNAPSHOT_PROPERTY) == window_id]
    if not tagged:
        return None
    oldest = min(tagged, key=lambda s: s.get("timestamp-ms", 0))
    summary = {str(k): str(v) for k, v in oldest["summary"].items() if k != "operation"}
    parent = oldest.get("parent-snapshot-id")
    return WindowCommit(int(oldest["snapshot-id"]), None if parent is None else int(parent), summary)


def _snapshots_table_commit(spark: SparkSession, table: str, window_id: str) -> WindowCommit | None:
    """:func:`window_commit` through the ``snapshots`` metadata table (a Spark job)."""
    if not spark.catalog.tableExists(table):
        return None
    rows = sql_with_args(
        spark,
        f"SELECT snapshot_id, parent_id, summary FROM {table}.snapshots "
        f"WHERE summary[:property] = :window_id ORDER BY committed_at LIMIT 1",
        {"property": WINDOW_SNAPSHOT_PROPERTY, "window_id": window_id},
    ).collect()
    if not rows:
        return None
    row = rows[0]
    parent = None if row.parent_id is None else int(row.parent_id)
    return WindowCommit(int(row.snapshot_id), parent, dict(row.summary or {}))


def _metadata_snapshots(spark: SparkSession, table: str) -> list[dict] | None:
    """The snapshots of ``table`` as its metadata file lists them ([] before the first commit).

    None when the table does not exist or its metadata cannot be read this way (a catalog
    that does not hand out Iceberg tables): callers then ask Spark SQL.
    """
    metadata = _metadata(spark, table)
    return None if metadata is None else metadata.get("snapshots") or []


def _metadata(spark: SparkSession, table: str) -> dict | None:
    """The table's current metadata (its metadata file's JSON), or None (see above)."""
    from py4j.protocol import Py4JError

    iceberg = _iceberg_table(spark, table)
    if iceberg is None:
        return None
    try:
        parser = _jvm_class(spark, "org.apache.iceberg.TableMetadataParser")
        text = parser.toJson(iceberg.operations().current())
    except Py4JError:  # not a table with TableOperations (a metadata or custom table)
        return None
    return json.loads(text)


def summary_with(spark: SparkSession, table: str, key: str, value: str) -> dict[str, str] | None:
    """The summary of the (oldest) snapshot of ``table`` whose summary has ``key`` = ``value``."""
    for snapshot in _metadata_snapshots(spark, table) or []:
        summary = snapshot.get("summary") or {}
        if summary.get(key) == value:
            return summary
    return None


def window_commit_and_since(spark: SparkSession, table: str, window_id: str) -> tuple[WindowCommit, list[dict]] | None:
    """The window's (oldest) commit of ``table`` and the snapshots (metadata JSON objects) on
    the table's main branch after it, newest first, from one read of the table's metadata.

    None when the window has no commit, the commit is not an ancestor of the current
    snapshot, or the metadata cannot be read this way.
    """
    metadata = _metadata(spark, table)
    if metadata is None:
        return None
    snapshots = metadata.get("snapshots") or []
    commit = _oldest_tagged(snapshots, window_id)
    current = metadata.get("current-snapshot-id")
    if commit is None or current is None or int(current) < 0:  # -1: no snapshot (format v1 metadata)
        return None
    current = int(current)
    by_id = {int(s["snapshot-id"]): s for s in snapshots}
    since: list[dict] = []
    while current != commit.snapshot_id:
        snapshot = by_id.get(current)
        if snapshot is None or snapshot.get("parent-snapshot-id") is None:
            return None
        since.append(snapshot)
        current = int(snapshot["parent-snapshot-id"])
    return commit, since


def current_snapshot_id(spark: SparkSession, table: str) -> int | None:
    """The snapshot the table's main branch points at (None: no such table, or no snapshot yet)."""
    iceberg = _iceberg_table(spark, table)
    if iceberg is not None:
        snapshot = iceberg.currentSnapshot()
        return None if snapshot is None else int(snapshot.snapshotId())
    if not spark.catalog.tableExists(table):
        return None
    rows = spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").collect()
    return int(rows[0].snapshot_id) if rows else None


def current_summary(spark: SparkSession, table: str) -> dict[str, str] | None:
    """The summary of the table's current snapshot (totals such as ``total-records``), or None."""
    snapshot = _current_snapshot(spark, table)
    return None if snapshot is None else _summary(spark, snapshot)


def own_window_commit(spark: SparkSession, table: str, window_id: str) -> WindowCommit | None:
    """The window's commit of ``table`` just after this job made it.

    Almost always the table's current snapshot, read from the table's metadata without a
    Spark job; when another writer committed since, the snapshots are searched
    (:func:`window_commit`).
    """
    snapshot = _current_snapshot(spark, table)
    if snapshot is not None:
        summary = _summary(spark, snapshot)
        if summary.get(WINDOW_SNAPSHOT_PROPERTY) == window_id:
            parent = snapshot.parentId()
            return WindowCommit(int(snapshot.snapshotId()), None if parent is None else int(parent), summary)
    return window_commit(spark, table, window_id)


def _current_snapshot(spark: SparkSession, table: str):
    """The table's current Iceberg ``Snapshot`` (Java), or None (no table, or no snapshot yet)."""
    iceberg = _iceberg_table(spark, table)
    return None if iceberg is None else iceberg.currentSnapshot()


def _summary(spark: SparkSession, snapshot) -> dict[str, str]:
    """The snapshot's summary (a Java map of strings) as a dict, serialised in the JVM by
    Jackson: three py4j calls (the mapper, the map, its text), where converting the
    map entry by entry takes two round trips per entry (bench/apply.py, docs/performance.md)."""
    mapper = _jvm_class(spark, "com.fasterxml.jackson.databind.ObjectMapper")()
    return json.loads(mapper.writeValueAsString(snapshot.summary()))


def _jvm_class(spark: SparkSession, name: str):
    """The JVM class ``name`` (fully qualified) as a py4j ``JavaClass``, looked up once per gateway.

    A lookup through ``_jvm.org.apache...`` makes one py4j round trip per dotted part; the
    class object, kept, makes none.
    """
    return _gateway_class(spark.sparkContext._gateway, name)


@functools.cache
def _gateway_class(gateway, name: str):
    found = gateway.jvm
    for part in name.split("."):
        found = getattr(found, part)
    return found


def _iceberg_table(spark: SparkSession, table: str):
    """The refreshed Iceberg ``Table`` (Java) behind ``catalog.namespace.name``, through py4j.

    None when the table does not exist, or when the catalog does not hand out Iceberg tables
    (callers then ask Spark SQL's metadata tables instead).
    """
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    catalog, namespace, name = table.split(".")
    context = spark.sparkContext
    try:
        jcatalog = spark._jsparkSession.sessionState().catalogManager().catalog(catalog)
        parts = context._gateway.new_array(_jvm_class(spark, "java.lang.String"), 1)
        parts[0] = namespace
        identifier = _jvm_class(spark, "org.apache.spark.sql.connector.catalog.Identifier").of(parts, name)
        iceberg = jcatalog.loadTable(identifier).table()
        iceberg.refresh()
        return iceberg
    except (Py4JError, PySparkException):  # no such table (an AnalysisException), or not Iceberg's
        return None


def table_before(spark: SparkSession, table: str, commit: WindowCommit | None) -> DataFrame | None:
    """``table`` as it was before ``commit`` (its current state when there is no commit).

    Always read at a fixed snapshot: a frame that read "the current state" would, when Spark
    evaluates it again after this job's own commits, see those commits. None when the table
    did not exist or had no snapshot yet (nothing to read).
    """
    # A window's commit implies the table; otherwise the metadata lookup tells whether it exists.
    snapshot_id = current_snapshot_id(spark, table) if commit is None else commit.parent_id
    if snapshot_id is None:
        return None
    return read_at_snapshot(spark, table, snapshot_id)


# ``append_tagged(..., read_at=UNCHECKED)``: append whatever was committed meanwhile.
UNCHECKED = object()
# What Iceberg raises when a commit's table changed under it: a conflict check failed
# (ValidationException), or the optimistic commit kept losing the race (CommitFailedException).
_CONFLICT_EXCEPTIONS = (
    "org.apache.iceberg.exceptions.ValidationException",
    "org.apache.iceberg.exceptions.CommitFailedException",
)


def append_tagged(
    frame: DataFrame,
    table: str,
    properties: Mapping[str, str],
    read_at: int | None | object = UNCHECKED,
    write_options: Mapping[str, str] | None = None,
) -> None:
    """Append ``frame`` to ``table`` in one commit carrying ``properties``.

    With ``read_at``, the snapshot id the caller read the table at (None: it had no snapshot),
    the commit is made only if no data was added to the table since: Iceberg checks that when
    it commits (an overwrite by the always-false filter, at serializable isolation: it deletes
    nothing and commits as an append). A plain append never conflicts, so two jobs that both
    found the window's commit missing would both append it; checked, the later one fails with
    a commit conflict (:func:`is_commit_conflict`) and appends nothing. ``write_options``
    are Iceberg's Spark write options for this write.
    """
    writer = frame.writeTo(table)
    for key, value in (write_options or {}).items():
        writer = writer.option(key, value)
    for key, value in properties.items():
        writer = writer.option(f"snapshot-property.{key}", value)
    if read_at is UNCHECKED:
        writer.append()
        return
    from pyspark.sql import functions as F

    writer = writer.option("isolation-level", "serializable")
    if read_at is not None:
        writer = writer.option("validate-from-snapshot-id", str(read_at))
    writer.overwrite(F.lit(False))


def concurrent_window_commit(
    spark: SparkSession, table: str, window_id: str, error: BaseException
) -> WindowCommit | None:
    """The window's commit of ``table`` that another job made while this one tried to make it.

    When ``error`` is a commit conflict and the table now carries a commit tagged with the
    window, that commit is the window's (both jobs computed it from the same pre-window
    snapshot): the caller takes it as its own. None otherwise: the error is the caller's.
    """
    if not is_commit_conflict(error):
        return None
    return window_commit(spark, table, window_id)


def commit_once(spark: SparkSession, table: str, window_id: str, make) -> WindowCommit | None:
    """Make the window's commit of ``table`` with ``make()``, unless another job of the window
    made it: that job's commit, found right before ``make`` (a MERGE reading the table after
    it would conflict with nothing) or by the conflict ``make`` ran into
    (:func:`commit_or_take`). None: ``make`` made it."""
    return window_commit(spark, table, window_id) or commit_or_take(spark, table, window_id, make)


def commit_or_take(spark: SparkSession, table: str, window_id: str, make) -> WindowCommit | None:
    """``make()`` the window's commit of ``table``; when it fails as a conflict with another
    job's commit of the window, that commit (:func:`concurrent_window_commit`), else None."""
    try:
        make()
    except Exception as error:
        concurrent = concurrent_window_commit(spark, table, window_id, error)
        if concurrent is None:
            raise
        return concurrent
    return None


def is_commit_conflict(error: BaseException) -> bool:
    """Whether ``error`` (from a Spark write or SQL statement) is Iceberg refusing a commit
    because the table changed after the job read it (its cause chain, Java and Python)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = f"{current}\n{getattr(current, 'stackTrace', '') or ''}"
        if any(name in text for name in _CONFLICT_EXCEPTIONS):
            return True
        current = current.__cause__ or current.__context__
    return False


_CALLBACK_SERVER_START = threading.Lock()


class _SqlCall:
    """A ``java.util.concurrent.Callable`` that runs one SQL statement in the session."""

    def __init__(self, spark: SparkSession, statement: str) -> None:
        self.spark = spark
        self.statement = statement
        self.error: BaseException | None = None

    def call(self) -> None:
        try:
            self.spark.sql(self.statement)
        except BaseException as error:  # re-raised in Python below, with its own traceback
            self.error = error
        return None

    class Java:
        implements = ["java.util.concurrent.Callable"]


def sql_tagged(spark: SparkSession, statement: str, properties: Mapping[str, str]) -> None:
    """Run ``statement`` (a MERGE, UPDATE, DELETE ...) so its commit carries ``properties``."""
    from pyspark.java_gateway import ensure_callback_server_started

    context = spark.sparkContext
    with _CALLBACK_SERVER_START:  # commits run side by side: start the server once
        ensure_callback_server_started(context._gateway)
    jvm = context._jvm
    java_properties = jvm.java.util.HashMap()
    for key, value in properties.items():
        java_properties.put(key, value)
    call = _SqlCall(spark, statement)
    jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
        java_properties, call, jvm.java.lang.RuntimeException._java_lang_class
    )
    if call.error is not None:
        raise call.error


def window_properties(window_id: str, extra: Mapping[str, object] | None = None) -> dict[str, str]:
    """The snapshot properties of one of the window's commits."""
    properties = {WINDOW_SNAPSHOT_PROPERTY: window_id}
    if extra:
        properties[APPLY_PROPERTY] = json.dumps(dict(extra), sort_keys=True)
    return properties
