"""Bigtable's Spark side: apply one window of a Bigtable stream's changelog to its Iceberg tables, exactly once.

Tables, in the target namespace, named after the Bigtable table (or ``targets.mapping``):

* ``<t>_cells``: every live cell version (row_key, family, qualifier, cell_ts, value);
* ``<t>_latest``: the newest cell per (row_key, family, qualifier);
* ``<t>_cell_tombstones``: the deletes late records are checked against (:mod:`airflow_cdc.sources.bigtable.cells`);
* ``<t>_rows`` with ``targets.decode`` (``{"cf:price": "double", ...}``): one row per row
  key with the newest value of each named column decoded
  (:mod:`airflow_cdc.sources.bigtable.types`). A value that does not decode is NULL and counted.

Procedure (:meth:`BigtableSpark.apply_window`):

1. The window's mutations, grouped by row key, with the touched rows' cells and tombstones
   as they were before the window (read at the snapshot before the window's own commit, so
   a re-run computes the same outcome).
2. Each row folded by Bigtable's rules (:func:`airflow_cdc.sources.bigtable.cells.fold_row`), in Spark tasks.
3. One MERGE per table, tagged with the window (cells, tombstones, latest, rows); a table
   that already holds the window's commit is skipped, so a crash between commits is mended
   by running the window again (I1). ``targets.apply_gc`` (default true) says whether
   garbage-collection deletes change the targets; they are in the changelog either way.
4. With ``targets.write_mode: merge-on-read`` (the tables are created in the config's mode),
   the tables holding ``targets.compact_delete_files`` delete files are compacted, as
   targets are (``spark_jobs/apply/compaction.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from airflow_cdc.faults import crash_point
from airflow_cdc.model import validate_identifier
from airflow_cdc.sources.bigtable.types import SPARK_TYPES, decode_columns, decoded_row
from airflow_cdc.spark_jobs.sources.base import SparkSide

CELL_COLUMNS = ("row_key binary, family string, qualifier binary, cell_ts bigint, value binary, "
                "_cdc_seq binary, _cdc_commit_ts timestamp")
TOMBSTONE_COLUMNS = ("row_key binary, family string, qualifier binary, ts_from bigint, "
                     "ts_to bigint, _cdc_seq binary, _cdc_commit_ts timestamp")
_COUNTS = ("changes", "upserts", "deletes", "superseded_changes")


class BigtableSpark(SparkSide):
    """Bigtable's Spark side: partitions read by the extract job, windows applied here."""

    def apply_window(self, spark, config, data: Mapping, tables) -> list[dict]:
        return apply_window(spark, config, data, tables)


def _fold_partition(rows, apply_gc: bool, cutoff: int, decoded):
    """Spark task: (row_key, (mutations, cells, tombstones)) -> tagged outcome tuples."""
    from airflow_cdc.sources.bigtable.cells import CellMutation, fold_row

    for row_key, (mutations, cells, tombs) in rows:
        outcome = fold_row(
            [CellMutation(*m) for m in mutations],
            {(c[0], c[1], c[2]): (c[3], c[4], c[5]) for c in cells},
            {(t[0], t[1], t[2], t[3]): (t[4], t[5]) for t in tombs},
            apply_gc, cutoff,
        )
        for c in outcome.cells_written:
            yield ("cell", row_key, *c, "U")
        for c in outcome.cells_removed:
            yield ("cell", row_key, *c, None, None, None, "D")
        for t in outcome.tombstones_written:
            yield ("tomb", row_key, *t, "U")
        for t in outcome.tombstones_removed:
            yield ("tomb", row_key, *t, None, None, "D")
        for c in outcome.latest_written:
            yield ("latest", row_key, *c, "U")
        for c in outcome.latest_removed:
            yield ("latest", row_key, *c, None, None, None, None, "D")
        if decoded and (outcome.latest_written or outcome.latest_removed):
            values, bad = decoded_row(outcome.cells_after, decoded)
            yield ("rows", row_key, "U" if outcome.cells_after else "D", bad, *values)
        yield ("count", row_key, outcome.applied, outcome.superseded, outcome.ignored_gc)


def _micros_ts(micros):
    from datetime import datetime, timedelta, timezone

    if micros is None:
        return None
    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=micros)


def apply_window(spark, config, data: Mapping, tables) -> list[dict]:
    """Steps 1-4 of the module doc. ``config`` is the apply job's parsed config, ``data`` its
    JSON, ``tables`` its window commits (``airflow_cdc.spark_jobs.apply.source_tables.WindowTables``).
    Returns one result per Bigtable table (``TableResult`` fields)."""
    from pyspark.sql import functions as F

    targets = dict(data.get("targets") or {})
    changelog = spark.read.table(config.changelog_table.qualified).where(
        (F.col("stream") == config.stream) & (F.col("window_id") == config.window_id))
    sources = [r[0] for r in changelog.select("source_table").distinct().collect()]
    if not sources:
        sources = [data.get("source", {}).get("table")] if data.get("source") else []
    window = _WindowApply(
        spark, tables, changelog, apply_gc=bool(targets.get("apply_gc", True)),
        cutoff=int(config.tombstone_cutoff.timestamp() * 1_000_000),
        decoded=decode_columns(targets.get("decode")))
    return [window.apply_table(_target_names(config, source_table), source_table)
            for source_table in sources]


def _target_names(config, source_table: str) -> dict[str, str]:
    """The four target tables of ``source_table``, by kind (cells, latest, cell_tombstones, rows)."""
    mapped = config.mapping.get(source_table)
    base = mapped.qualified if mapped else ".".join((
        config.catalog, config.target_namespace,
        validate_identifier("Bigtable table id as an Iceberg name (give targets.mapping)",
                            re.sub(r"[^A-Za-z0-9_]", "_", source_table))))
    return {kind: f"{base}_{kind}" for kind in ("cells", "latest", "cell_tombstones", "rows")}


class _WindowApply:
    """One window's apply, table by table (steps 1-4 of the module doc)."""

    def __init__(self, spark, tables, changelog, *, apply_gc: bool, cutoff: int, decoded) -> None:
        self.spark, self.tables, self.changelog = spark, tables, changelog
        self.apply_gc, self.cutoff, self.decoded = apply_gc, cutoff, decoded

    def apply_table(self, names: dict[str, str], source_table: str) -> dict:
        """Apply the window's mutations of ``source_table``; its ``TableResult`` fields."""
        self._create(names)
        commits = {kind: self.tables.committed(names[kind]) for kind in names
                   if kind != "rows" or self.decoded}
        result = {"source_table": source_table, "target_table": names["cells"]}
        if all(commits.values()):
            recorded = commits["cells"]
            result.update(already_applied=True, target_snapshot_id=recorded["snapshot_id"],
                          **{k: int(recorded.get(k, 0)) for k in _COUNTS})
        else:
            outcomes = self._folded(names, source_table).cache()
            try:
                self._merge(outcomes, names, commits, result)
            finally:
                outcomes.unpersist()
        # 4. Merge-on-read tables holding many delete files: compacted (never fails the
        # window); after a window applied already too, since a crash may have cut it short.
        result.update(self.tables.compact(list(names.values())))
        return result

    def _create(self, names: dict[str, str]) -> None:
        """The target tables, created in the config's write mode (targets.write_mode)."""
        for kind, columns in (("cells", CELL_COLUMNS), ("latest", CELL_COLUMNS),
                              ("cell_tombstones", TOMBSTONE_COLUMNS)):
            self.tables.create(names[kind], columns, partitioned_by="bucket(16, row_key)")
        if self.decoded:
            self.tables.create(names["rows"], f"row_key binary, {self._typed()}")

    def _typed(self) -> str:
        return ", ".join(f"`{n}` {SPARK_TYPES[d]}" for n, _, _, d in self.decoded)

    def _folded(self, names: dict[str, str], source_table: str):
        """Steps 1-2: the window's mutations by row key, with the touched rows' cells and
        tombstones before the window, folded row by row in Spark tasks (an RDD of tagged
        outcome tuples)."""
        from pyspark.sql import functions as F

        mutations = self.changelog.where(F.col("source_table") == source_table).select(
            F.unbase64(F.col("keys")["row_key"]).alias("row_key"),
            F.struct(
                F.col("ordering_key"),
                F.col("new_values")["mutation"],
                F.col("keys")["family"],
                F.unbase64(F.col("keys")["qualifier"]),
                F.col("new_values")["cell_ts"].cast("bigint"),
                F.coalesce(F.col("new_values")["ts_from"].cast("bigint"), F.lit(0)),
                F.coalesce(F.col("new_values")["ts_to"].cast("bigint"), F.lit(0)),
                F.unbase64(F.col("new_values")["value"]),
                F.col("new_values")["type"] == "GARBAGE_COLLECTION",
                F.col("new_values")["commit_micros"].cast("bigint"),
            ).alias("m"),
        )
        touched = F.broadcast(mutations.select("row_key").distinct())
        commit_micros = F.expr("unix_micros(_cdc_commit_ts)")
        cell_rdd = self._keyed(self.tables.before(names["cells"]), touched, [
            "family", "qualifier", "cell_ts", "value", "_cdc_seq", commit_micros])
        tomb_rdd = self._keyed(self.tables.before(names["cell_tombstones"]), touched, [
            "family", "qualifier", "ts_from", "ts_to", "_cdc_seq", commit_micros])
        mutation_rdd = mutations.rdd.map(lambda r: (bytes(r[0]), tuple(
            bytes(v) if isinstance(v, bytearray) else v for v in r[1])))
        grouped = mutation_rdd.groupWith(cell_rdd, tomb_rdd).mapValues(
            lambda v: (list(v[0]), list(v[1]), list(v[2])))
        apply_gc, cutoff, decoded = self.apply_gc, self.cutoff, self.decoded
        return grouped.mapPartitions(lambda rows: _fold_partition(rows, apply_gc, cutoff, decoded))

    def _keyed(self, frame, touched, columns):
        """The rows of ``frame`` (a target before the window, or None) whose row key the window
        touches, as (row_key, values) pairs."""
        if frame is None:
            return self.spark.sparkContext.emptyRDD()
        picked = frame.join(touched, "row_key", "left_semi")
        return picked.select("row_key", *columns).rdd.map(
            lambda r: (bytes(r[0]), tuple(bytes(v) if isinstance(v, bytearray) else v for v in r[1:])))

    def _outcome_frame(self, outcomes, tag: str, columns: str):
        return self.spark.createDataFrame(
            outcomes.filter(lambda o: o[0] == tag).map(lambda o: (
                o[1], o[2], o[3], o[4], o[5], o[6], _micros_ts(o[7]), o[8])),
            f"{columns}, action string")

    def _merge(self, outcomes, names: dict[str, str], commits: dict, result: dict) -> None:
        """Step 3: one MERGE per table not yet holding the window's commit, tagged with it."""
        from pyspark.sql import functions as F

        applied, superseded, ignored_gc = outcomes.filter(lambda o: o[0] == "count").map(
            lambda o: (o[2], o[3], o[4])).fold((0, 0, 0), lambda a, b: tuple(
                x + y for x, y in zip(a, b)))
        result.update(changes=applied + superseded + ignored_gc, superseded_changes=superseded)
        cells = self._outcome_frame(outcomes, "cell", CELL_COLUMNS).cache()
        result.update(upserts=cells.where("action = 'U'").count(),
                      deletes=cells.where("action = 'D'").count())
        counts = {k: result[k] for k in _COUNTS}
        tables = self.tables
        if commits["cells"] is None:
            tables.merge(cells, names["cells"], ["row_key", "family", "qualifier", "cell_ts"], counts)
            crash_point("apply.after_target_commit")  # the reliability matrix's point
        result["target_snapshot_id"] = tables.snapshot_id(names["cells"])
        if commits["cell_tombstones"] is None:
            tombs = self._outcome_frame(outcomes, "tomb", TOMBSTONE_COLUMNS)
            tables.merge(tombs, names["cell_tombstones"],
                         ["row_key", "family", "qualifier", "ts_from", "ts_to"], counts)
        result["tombstone_snapshot_id"] = tables.snapshot_id(names["cell_tombstones"])
        if commits["latest"] is None:
            latest = self._outcome_frame(outcomes, "latest", CELL_COLUMNS)
            tables.merge(latest, names["latest"], ["row_key", "family", "qualifier"], counts)
        result["history_snapshot_id"] = tables.snapshot_id(names["latest"])
        if self.decoded and commits.get("rows") is None:
            rows = self.spark.createDataFrame(
                outcomes.filter(lambda o: o[0] == "rows").map(lambda o: (o[1], o[2], o[3], *o[4:])),
                f"row_key binary, action string, undecodable int, {self._typed()}")
            bad = rows.agg(F.coalesce(F.sum("undecodable"), F.lit(0))).first()[0]
            tables.merge(rows.drop("undecodable"), names["rows"], ["row_key"],
                         {**counts, "undecodable": int(bad)})
        cells.unpersist()
