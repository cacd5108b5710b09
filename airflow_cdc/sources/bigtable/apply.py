"""Apply one window of a Bigtable stream's changelog to its Iceberg tables, exactly once.

Tables, in the target namespace, named after the Bigtable table (or ``targets.mapping``):

* ``<t>_cells``: every live cell version (row_key, family, qualifier, cell_ts, value);
* ``<t>_latest``: the newest cell per (row_key, family, qualifier);
* ``<t>_cell_tombstones``: the deletes late records are checked against (:mod:`.cells`);
* ``<t>_rows`` with ``targets.decode`` (``{"cf:price": "double", ...}``): one row per row
  key with the newest value of each named column decoded (``string``: UTF-8, ``int64``: 8
  bytes big-endian as Bigtable's increments write, ``double``: 8-byte IEEE 754 big-endian,
  ``bool``: one byte, ``bytes``). A value that does not decode is NULL and counted.

Procedure (:func:`apply_window`):

1. The window's mutations, grouped by row key, with the touched rows' cells and tombstones
   as they were before the window (read at the snapshot before the window's own commit, so
   a re-run computes the same outcome).
2. Each row folded by Bigtable's rules (:func:`.cells.fold_row`), in Spark tasks.
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
import struct
from collections.abc import Mapping

from airflow_cdc.faults import crash_point
from airflow_cdc.model import validate_identifier

DECODERS = ("string", "int64", "double", "bool", "bytes")
_SPARK = {"string": "string", "int64": "bigint", "double": "double", "bool": "boolean",
          "bytes": "binary"}
CELL_COLUMNS = ("row_key binary, family string, qualifier binary, cell_ts bigint, value binary, "
                "_cdc_seq binary, _cdc_commit_ts timestamp")
TOMBSTONE_COLUMNS = ("row_key binary, family string, qualifier binary, ts_from bigint, "
                     "ts_to bigint, _cdc_seq binary, _cdc_commit_ts timestamp")


def decode_columns(decode: Mapping[str, str] | None) -> list[tuple[str, str, bytes, str]]:
    """``{"cf:price": "double"}`` -> [(column name, family, qualifier, decoder)]; refused
    naming the entry and the fix before any table is touched."""
    columns = []
    for entry, decoder in sorted((decode or {}).items()):
        family, sep, qualifier = str(entry).partition(":")
        if not sep or not family or not qualifier:
            raise ValueError(f"targets.decode entry {entry!r} is not 'family:qualifier'")
        if decoder not in DECODERS:
            raise ValueError(f"targets.decode[{entry!r}] = {decoder!r} is not one of {list(DECODERS)}")
        name = validate_identifier(
            f"decoded column for {entry!r} (family and qualifier joined by _)",
            re.sub(r"[^A-Za-z0-9_]", "_", f"{family}_{qualifier}"))
        columns.append((name, family, qualifier.encode(), decoder))
    return columns


def decode_value(raw: bytes | None, decoder: str):
    if raw is None:
        return None
    if decoder == "bytes":
        return raw
    if decoder == "string":
        return raw.decode("utf-8")
    if decoder == "int64":
        if len(raw) != 8:
            raise ValueError(f"{len(raw)} bytes, not 8")
        return struct.unpack(">q", raw)[0]
    if decoder == "double":
        if len(raw) != 8:
            raise ValueError(f"{len(raw)} bytes, not 8")
        return struct.unpack(">d", raw)[0]
    if decoder == "bool":
        if len(raw) != 1:
            raise ValueError(f"{len(raw)} bytes, not 1")
        return raw != b"\x00"
    raise ValueError(decoder)


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
            newest = {}
            for (family, qualifier, ts), cell in outcome.cells_after.items():
                if (family, qualifier) not in newest or ts > newest[(family, qualifier)][0]:
                    newest[(family, qualifier)] = (ts, cell[0])
            values, bad = [], 0
            for _, family, qualifier, decoder in decoded:
                found = newest.get((family, qualifier))
                try:
                    values.append(decode_value(found[1] if found else None, decoder))
                except (ValueError, UnicodeDecodeError):
                    values.append(None)
                    bad += 1
            action = "U" if outcome.cells_after else "D"
            yield ("rows", row_key, action, bad, *values)
        yield ("count", row_key, outcome.applied, outcome.superseded, outcome.ignored_gc)


def _micros_ts(micros):
    from datetime import datetime, timedelta, timezone

    if micros is None:
        return None
    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=micros)


def apply_window(spark, config, data: Mapping, tables) -> list[dict]:
    """Steps 1-3 of the module doc. ``config`` is the apply job's parsed config, ``data`` its
    JSON, ``tables`` its window commits (``airflow_cdc.spark_jobs.apply.source_tables.WindowTables``).
    Returns one result per Bigtable table (``TableResult`` fields)."""
    from pyspark.sql import functions as F

    targets = dict(data.get("targets") or {})
    apply_gc = bool(targets.get("apply_gc", True))
    decoded = decode_columns(targets.get("decode"))
    results = []
    changelog = spark.read.table(config.changelog_table.qualified).where(
        (F.col("stream") == config.stream) & (F.col("window_id") == config.window_id))
    sources = [r[0] for r in changelog.select("source_table").distinct().collect()]
    if not sources:
        sources = [data.get("source", {}).get("table")] if data.get("source") else []
    cutoff = int(config.tombstone_cutoff.timestamp() * 1_000_000)
    for source_table in sources:
        mapped = config.mapping.get(source_table)
        base = mapped.qualified if mapped else ".".join((
            config.catalog, config.target_namespace,
            validate_identifier("Bigtable table id as an Iceberg name (give targets.mapping)",
                                re.sub(r"[^A-Za-z0-9_]", "_", source_table))))
        names = {kind: f"{base}_{kind}" for kind in ("cells", "latest", "cell_tombstones", "rows")}
        # Created in the config's write mode (targets.write_mode), as targets are.
        for kind, columns in (("cells", CELL_COLUMNS), ("latest", CELL_COLUMNS),
                              ("cell_tombstones", TOMBSTONE_COLUMNS)):
            tables.create(names[kind], columns, partitioned_by="bucket(16, row_key)")
        if decoded:
            typed = ", ".join(f"`{n}` {_SPARK[d]}" for n, _, _, d in decoded)
            tables.create(names["rows"], f"row_key binary, {typed}")
        commits = {kind: tables.committed(names[kind]) for kind in names
                   if kind != "rows" or decoded}
        table_result = {"source_table": source_table, "target_table": names["cells"]}
        results.append(table_result)
        if all(commits.values()):
            recorded = commits["cells"]
            table_result.update(already_applied=True, target_snapshot_id=recorded["snapshot_id"],
                                **{k: int(recorded.get(k, 0)) for k in (
                                    "changes", "upserts", "deletes", "superseded_changes")})
            table_result.update(tables.compact(list(names.values())))  # a crash may have cut it short
            continue

        # 1. mutations by row key, with the touched rows' cells and tombstones before the window
        mine = changelog.where(F.col("source_table") == source_table)
        mutations = mine.select(
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
        touched = mutations.select("row_key").distinct()
        cells_before = tables.before(names["cells"])
        tombs_before = tables.before(names["cell_tombstones"])

        def keyed(frame, columns):
            if frame is None:
                return spark.sparkContext.emptyRDD()
            picked = frame.join(F.broadcast(touched), "row_key", "left_semi")
            return picked.select("row_key", *columns).rdd.map(
                lambda r: (bytes(r[0]), tuple(bytes(v) if isinstance(v, bytearray) else v for v in r[1:])))

        cell_rdd = keyed(cells_before, ["family", "qualifier", "cell_ts", "value", "_cdc_seq",
                                        F.expr("unix_micros(_cdc_commit_ts)")])
        tomb_rdd = keyed(tombs_before, ["family", "qualifier", "ts_from", "ts_to", "_cdc_seq",
                                        F.expr("unix_micros(_cdc_commit_ts)")])
        mutation_rdd = mutations.rdd.map(lambda r: (bytes(r[0]), tuple(
            bytes(v) if isinstance(v, bytearray) else v for v in r[1])))
        # 2. fold each row
        grouped = mutation_rdd.groupWith(cell_rdd, tomb_rdd).mapValues(
            lambda v: (list(v[0]), list(v[1]), list(v[2])))
        outcomes = grouped.mapPartitions(
            lambda rows: _fold_partition(rows, apply_gc, cutoff, decoded)).cache()
        try:
            counts = outcomes.filter(lambda o: o[0] == "count").map(
                lambda o: (o[2], o[3], o[4])).fold((0, 0, 0), lambda a, b: tuple(
                    x + y for x, y in zip(a, b)))
            applied, superseded, ignored_gc = counts
            table_result.update(changes=applied + superseded + ignored_gc,
                                superseded_changes=superseded)
            # 3. one tagged MERGE per table
            cells = spark.createDataFrame(
                outcomes.filter(lambda o: o[0] == "cell").map(lambda o: (
                    o[1], o[2], o[3], o[4], o[5], o[6], _micros_ts(o[7]), o[8])),
                f"{CELL_COLUMNS}, action string").cache()
            ups = cells.where("action = 'U'").count()
            downs = cells.where("action = 'D'").count()
            table_result.update(upserts=ups, deletes=downs)
            counts = {k: table_result[k] for k in (
                "changes", "upserts", "deletes", "superseded_changes")}
            if commits["cells"] is None:
                tables.merge(cells, names["cells"],
                             ["row_key", "family", "qualifier", "cell_ts"], counts)
                crash_point("apply.after_target_commit")  # the reliability matrix's point
            table_result["target_snapshot_id"] = tables.snapshot_id(names["cells"])
            if commits["cell_tombstones"] is None:
                tombs = spark.createDataFrame(
                    outcomes.filter(lambda o: o[0] == "tomb").map(lambda o: (
                        o[1], o[2], o[3], o[4], o[5], o[6], _micros_ts(o[7]), o[8])),
                    f"{TOMBSTONE_COLUMNS}, action string")
                tables.merge(tombs, names["cell_tombstones"],
                             ["row_key", "family", "qualifier", "ts_from", "ts_to"], counts)
            table_result["tombstone_snapshot_id"] = tables.snapshot_id(names["cell_tombstones"])
            if commits["latest"] is None:
                latest = spark.createDataFrame(
                    outcomes.filter(lambda o: o[0] == "latest").map(lambda o: (
                        o[1], o[2], o[3], o[4], o[5], o[6], _micros_ts(o[7]), o[8])),
                    f"{CELL_COLUMNS}, action string")
                tables.merge(latest, names["latest"], ["row_key", "family", "qualifier"], counts)
            table_result["history_snapshot_id"] = tables.snapshot_id(names["latest"])
            if decoded and commits.get("rows") is None:
                typed = ", ".join(f"`{n}` {_SPARK[d]}" for n, _, _, d in decoded)
                rows = spark.createDataFrame(
                    outcomes.filter(lambda o: o[0] == "rows").map(
                        lambda o: (o[1], o[2], o[3], *o[4:])),
                    f"row_key binary, action string, undecodable int, {typed}")
                bad = rows.agg(F.coalesce(F.sum("undecodable"), F.lit(0))).first()[0]
                tables.merge(rows.drop("undecodable"), names["rows"], ["row_key"],
                             {**counts, "undecodable": int(bad)})
            cells.unpersist()
        finally:
            outcomes.unpersist()
        # 4. Merge-on-read tables holding many delete files: compacted (never fails the window).
        table_result.update(tables.compact(list(names.values())))
    return results
