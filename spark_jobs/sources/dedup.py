"""One de-duplication rule for sources that deliver at least once (Datastream, Debezium).

The rule (:func:`deduplicated`): of the rows sharing an event id, the first copy stays, the
copy of the first partition (by ``partition_id``, then ``ordering_key``), so a re-run keeps
the same copy; an event the stream's changelog already holds does not stay at all; rows
without an event id all stay.

:func:`drop_seen_event_ids` is what the extract job runs: the same rule, layered with a
performance strategy. An equivalence test holds the two to the
same rows (``tests/debezium/test_repeats.py``).
"""

from __future__ import annotations

from airflow_cdc.model import CHANGELOG_NAMES

# At most this many event ids (repeated within one window, or held by the changelog already)
# come to the driver, about 100 bytes each; past it, the strategy falls back to the rule's joins.
REPEATED_IDS_COLLECTED = 10_000


def deduplicated(frame, seen):
    """The rule of the module doc: ``frame`` (changelog rows) with the first copy of each event
    id, without the ids ``seen`` (a frame of ``event_id``) holds."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    copy = F.row_number().over(Window.partitionBy("event_id").orderBy("partition_id", "ordering_key"))
    first = (frame.withColumn("_copy", copy)
             .where(F.col("event_id").isNull() | (F.col("_copy") == 1)).drop("_copy"))
    if seen is None:
        return first
    return first.join(seen, "event_id", "left_anti").select(*frame.columns)


def seen_event_ids(spark, table: str, stream: str, frame):
    """The event ids of ``stream`` that ``table`` (its changelog) holds, within the commit
    times of ``frame``'s rows, or None when the table does not exist yet.

    A redelivered event is the same event with the same ``commit_ts``, so only the changelog
    rows within the window's commit times are compared: literal bounds that Iceberg prunes by
    partition (``days(commit_ts)``) and file statistics, so the read does not grow with the
    whole changelog. Rows without a commit time are always compared."""
    from pyspark.sql import functions as F

    if not spark.catalog.tableExists(table):
        return None
    bounds = frame.agg(F.min(F.unix_micros("commit_ts")).alias("lo"),
                       F.max(F.unix_micros("commit_ts")).alias("hi")).first()
    in_range = F.col("commit_ts").isNull()
    if bounds.lo is not None:
        in_range = in_range | F.col("commit_ts").between(
            F.timestamp_micros(F.lit(bounds.lo)), F.timestamp_micros(F.lit(bounds.hi)))
    return (spark.table(table)
            .where((F.col("stream") == F.lit(stream)) & in_range & F.col("event_id").isNotNull())
            .select("event_id"))


def drop_seen_event_ids(spark, table: str, stream: str, frame):
    """:func:`deduplicated` of ``frame`` against the changelog ``table``'s events of ``stream``,
    ranking and anti-joining only the rows of the ids concerned; ``frame`` itself when it
    drops nothing.

    A performance strategy. Saves: the rule's window function shuffles and sorts every row,
    and its anti join makes a frame of its own (which the extract caches again), though most
    windows hold no repeat. Here the repeated ids and the seen ids are found first (a hash
    aggregate and a semi join of the ids alone), listed on the driver and broadcast; a window
    with none is ``frame`` itself, and the result keeps ``frame``'s partitions (so later
    stages and the changelog's files do not take ``spark.sql.shuffle.partitions``).
    ``bench/extract.py --source datastream`` shows it (docs/performance.md).
    """
    partitions = frame.rdd.getNumPartitions()
    kept = _repeats_dropped(spark, frame)
    kept = _seen_dropped(spark, kept, seen_event_ids(spark, table, stream, kept))
    return frame if kept is frame else kept.coalesce(partitions)


def _repeats_dropped(spark, frame):
    """The rule's first copies, ranking only the rows of repeated ids (listed, broadcast)."""
    from pyspark.sql import functions as F

    repeated = (frame.where(F.col("event_id").isNotNull()).groupBy("event_id")
                .agg(F.count(F.lit(1)).alias("copies")).where(F.col("copies") > 1).select("event_id"))
    listed = _listed_ids(spark, repeated)
    if listed is None:
        return frame
    if listed is repeated:  # too many to list: the rule's ranking of every row
        return deduplicated(frame, None)
    once = frame.join(listed, "event_id", "left_anti").select(*frame.columns)
    copies = deduplicated(frame.join(listed, "event_id", "left_semi").select(*frame.columns), None)
    return once.unionByName(copies)


def _seen_dropped(spark, frame, seen):
    """``frame`` without the ids ``seen`` holds: those found listed and broadcast, or, when
    too many to list, the anti join with ``seen``; ``frame`` itself when it holds none."""
    if seen is None:
        return frame
    found = frame.select("event_id").join(seen, "event_id", "left_semi").distinct()
    dropped = _listed_ids(spark, found)
    if dropped is None:
        return frame
    return frame.join(seen if dropped is found else dropped, "event_id", "left_anti").select(*CHANGELOG_NAMES)


def _listed_ids(spark, ids):
    """``ids`` (a frame of distinct ``event_id``) collected: None when it holds none, a
    broadcast frame of them when it holds at most :data:`REPEATED_IDS_COLLECTED`, else ``ids``
    itself (too many to come to the driver)."""
    from pyspark.sql import functions as F

    found = [row.event_id for row in ids.limit(REPEATED_IDS_COLLECTED + 1).collect()]
    if not found:
        return None
    if len(found) > REPEATED_IDS_COLLECTED:
        return ids
    return F.broadcast(spark.createDataFrame([(i,) for i in found], "event_id string"))
