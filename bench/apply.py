"""Benchmark of the apply job against its floor, a plain Iceberg append of the same rows.

    .venv/bin/python bench/apply.py [--changes 1000000] [--keys 200000]
    .venv/bin/python bench/apply.py --full     # then 5,000,000 changes over 1,000,000 keys

Builds a changelog of ``--changes`` changes over ``--keys`` keys of one Spanner-like table,
generated in Spark: every key starts with an INSERT, then follows one of three histories
(I U U D I, I U D I U, or I U U U U, so 60% of all changes are updates, 10% deletes, 30%
inserts); half of the updates are partial images (NEW_VALUES), half full ones (NEW_ROW).
Changes fall into two windows by commit time, and 5% of all changes arrive in the other
window (late older changes, and early newer ones). Each window is appended to the changelog in
one commit of a few files, as the extract job writes it (tagged with the window, recording its
column declarations). Applying window 1 then window 2 is timed;
so, separately and in the same run, is the floor: appending the same rows, read from the
changelog, to an empty Iceberg table.

So, in the same rounds, is the peer: the MERGE a user writes by hand over the same changelog
(:func:`peer_merge_sql`: the latest change per key by ordering position, typed from its
image, deletes applied, into a table of the same columns), which lacks what the apply job
keeps (the guard against older changes, clash detection, dead letters, partial images,
tombstones); each round says in how many rows its table differs from the apply job's target.
The apply and the peer alternate which goes first.

All are measured warm: first, ``--warmups`` runs of both at full size (apply's plans have far
more generated code than an append, and the JIT keeps compiling it over the first full-size
runs, so warm-ups at a smaller size would mix warming up into the ratio). Then ``--repeats``
full runs, each on its own changelog, and the medians of both timings (single runs of either
vary widely on a shared machine).

Prints one line (each run's timings go to stderr):
``bench apply: changes=<n> seconds=<s> floor_seconds=<f> ratio=<s/f> peer_seconds=<p>
vs_peer=<s/p> changes_per_s=<n/s>``.
With ``--full``, then the same at five times the changes over five times the keys (5M over
1M: the same five changes per key), in the same warm session (``--growth-repeats`` runs), and
``bench apply: changes=<a>-><b> keys=<k>-><K> growth=<seconds b / seconds a>
floor_growth=<the floor's>`` (linear is 5.0; the target is growth <= 5.5). The target ratio
is <= 1.5, and vs_peer <= 1.0. Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from airflow_cdc.model import (  # noqa: E402
    CHANGELOG_COLUMNS,
    CHANGELOG_PARTITIONING,
    Window,
    encode_ordering_key,
)

T0 = datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc)
STREAM = "bench"
COLUMN_TYPES = (
    '{"active":"BOOL","amount":"NUMERIC","id":"INT64","name":"STRING",'
    '"score":"FLOAT64","tags":"ARRAY<STRING>","updated":"TIMESTAMP"}'
)
# Op of the change at position 0..4 of a key, per history (key % 4).
HISTORIES = {0: "IUUDI", 1: "IUDIU", 2: "IUUUU", 3: "IUUUU"}
EXTRACT_TASKS = 4  # files per window in the changelog, as from an extract reading 4 partitions
GROWTH = 5  # --full: the large size is this many times the changes and the keys


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--warehouse", help="Iceberg warehouse folder (default: a temporary one)")
    parser.add_argument("--warmups", type=int, default=3, help="small warm-up runs before timing (default 3)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs; medians are printed (default 5)")
    parser.add_argument("--full", action="store_true",
                        help=f"then {GROWTH}x the changes over {GROWTH}x the keys (5M over 1M), and the growth")
    parser.add_argument("--growth-repeats", type=int, default=2,
                        help="timed runs at the large size with --full (default 2)")
    args = parser.parse_args(argv)
    if args.keys <= 0 or args.changes < args.keys or args.changes % args.keys:
        parser.error("--changes must be a positive multiple of --keys (changes per key = changes / keys)")
    if args.repeats < 1 or args.warmups < 0:
        parser.error("--repeats must be at least 1 and --warmups at least 0")
    return args


def windows() -> tuple[Window, Window]:
    return Window(STREAM, T0, T0 + timedelta(hours=1)), Window(STREAM, T0 + timedelta(hours=1), T0 + timedelta(hours=2))


def change_columns(key, n, op, partial, micros, window_id) -> list:
    """The changelog columns of generated changes, as Spark columns. ``key`` and ``n`` (a serial
    number that values derive from) are bigint columns, ``op`` the op's text, ``partial``
    whether an update carries a partial image (amount and score only), ``micros`` the commit
    time in epoch microseconds, ``window_id`` the window's text."""
    from pyspark.sql import functions as F

    amount = F.regexp_replace(F.format_number((n % 100000) / 100, 2), ",", "")
    score = ((n % 1000) / 8).cast("string")
    # Value texts as airflow_cdc.model.value_text writes them, keys in name order.
    full = F.create_map(
        F.lit("active"), F.when(n % 2 == 0, F.lit("true")).otherwise(F.lit("false")),
        F.lit("amount"), amount,
        F.lit("name"), F.concat(F.lit("name-"), n.cast("string")),
        F.lit("score"), score,
        F.lit("tags"), F.to_json(F.array(F.lit("a"), F.concat(F.lit("t"), (n % 7).cast("string")))),
        F.lit("updated"), F.date_format(F.timestamp_micros(micros), "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"),
    )
    some = F.create_map(F.lit("amount"), amount, F.lit("score"), score)
    return [
        F.lit(STREAM).alias("stream"),
        window_id.alias("window_id"),
        F.lit("Accounts").alias("source_table"),
        op.alias("op"),
        F.when(partial, "PARTIAL").otherwise("FULL").alias("image"),
        F.create_map(F.lit("id"), key.cast("string")).alias("keys"),
        F.when(op == "DELETE", F.lit(None)).when(partial, some).otherwise(full).alias("new_values"),
        F.lit(None).cast("map<string,string>").alias("old_values"),
        F.lit(COLUMN_TYPES).alias("column_types_json"),
        F.timestamp_micros(micros).alias("commit_ts"),
        # encode_ordering_key(commit_ts): tag 0x02, then micros + 2^63 as 8 big-endian bytes.
        F.unhex(F.concat(F.lit("028"), F.substring(F.lpad(F.hex(micros), 16, "0"), 2, 15))).alias("ordering_key"),
        F.concat(F.lit("tx-"), n.cast("string")).alias("transaction_id"),
        F.concat(F.lit("ev-"), n.cast("string")).alias("event_id"),
        F.lit("p0").alias("partition_id"),
        F.lit("{}").alias("source_metadata_json"),
    ]


def create_changelog(spark, table: str) -> None:
    """An empty changelog table, partitioned as the extract job's."""
    columns = ", ".join(f"{name} {kind}" for name, kind in CHANGELOG_COLUMNS)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.rsplit('.', 1)[0]}")
    # Like the extract job: one commit per window, written by parallel tasks (one file each).
    spark.sql(
        f"CREATE TABLE {table} ({columns}) USING iceberg PARTITIONED BY ({CHANGELOG_PARTITIONING}) "
        f"TBLPROPERTIES ('write.distribution-mode' = 'none')"
    )


def append_windows(spark, table: str, rows, window_ids) -> None:
    """Each window's ``rows`` appended as the extract job commits a window: its rows persisted,
    their declarations counted in one pass, then one tagged commit that records them."""
    from pyspark.sql import functions as F

    from airflow_cdc.spark_jobs.changelog import append_window, window_declarations

    for window_id in window_ids:
        frame = rows.where(F.col("window_id") == window_id).select(
            *[name for name, _ in CHANGELOG_COLUMNS]
        ).repartition(EXTRACT_TASKS).persist()
        append_window(spark, table, window_id, frame, declarations=window_declarations(frame))
        frame.unpersist()


def build_changelog(spark, table: str, changes: int, keys: int) -> None:
    """Write the generated changelog (``changes`` rows) to ``table`` (not timed)."""
    from pyspark.sql import functions as F

    per_key = changes // keys
    w1, w2 = windows()
    window_seconds = 3600
    step = 2 * window_seconds // (per_key + 1)  # a key's positions spread over windows 1 and 2
    frame = spark.range(changes).select(
        (F.col("id") % keys).alias("key"), (F.col("id") / keys).cast("bigint").alias("pos"), F.col("id").alias("n")
    )
    history = F.col("key") % 4
    op_letter = (
        F.when(history == 0, F.lit(HISTORIES[0]))
        .when(history == 1, F.lit(HISTORIES[1]))
        .otherwise(F.lit(HISTORIES[2]))
        .substr((F.col("pos") % 5) + 1, F.lit(1))
    )
    op = F.when(F.col("pos") == 0, "INSERT").when(op_letter == "I", "INSERT").when(op_letter == "D", "DELETE").otherwise("UPDATE")
    partial = (op == "UPDATE") & (F.xxhash64("n", F.lit(1)) % 2 == 0)
    t0_micros = int(T0.timestamp()) * 1_000_000
    micros = F.lit(t0_micros) + F.col("pos") * F.lit(step * 1_000_000) + (F.col("key") % 1000) * 1000
    natural_second = F.col("pos") * step >= window_seconds
    moved = F.col("pos").between(1, 3) & (F.abs(F.xxhash64("n", F.lit(2))) % 12 == 0)
    in_second = natural_second != moved
    window_id = F.when(in_second, F.lit(w2.window_id)).otherwise(F.lit(w1.window_id))
    rows = frame.select(*change_columns(F.col("key"), F.col("n"), op, partial, micros, window_id))
    create_changelog(spark, table)
    append_windows(spark, table, rows, [w1.window_id, w2.window_id])
    sample = spark.table(table).select("commit_ts", "ordering_key").first()
    # Spark hands timestamps over as naive local time: astimezone reads them as such.
    if bytes(sample.ordering_key) != encode_ordering_key(sample.commit_ts.astimezone(timezone.utc)):
        raise RuntimeError("generated ordering keys do not sort like airflow_cdc.model.encode_ordering_key")


def run_apply(spark, namespace: str) -> float:
    from airflow_cdc.spark_jobs.apply import apply_window

    started = time.perf_counter()
    for win in windows():
        apply_window(
            spark,
            {
                "catalog": "lake",
                "stream": STREAM,
                "window_id": win.window_id,
                "changelog_table": f"{namespace}.changelog",
                "targets": {"namespace": namespace},
                "policies": {"on_dead_letter": "fail"},
            },
        )
    return time.perf_counter() - started


# The peer's target: the typed columns of COLUMN_TYPES as the apply job maps them.
PEER_COLUMNS = (("id", "BIGINT"), ("active", "BOOLEAN"), ("amount", "DECIMAL(38,9)"),
                ("name", "STRING"), ("score", "DOUBLE"), ("tags", "ARRAY<STRING>"),
                ("updated", "TIMESTAMP"))


def peer_merge_sql(namespace: str, window_id: str) -> str:
    """The MERGE a user writes by hand (the Datastream-to-BigQuery template's shape, a dbt
    incremental model's): the latest change per key by ordering position, typed from its
    image, deletes applied. It has no guard against changes older than the row, no clash
    detection, no dead letters, no tombstones, and takes a partial image as a full one."""
    values = {
        "id": "CAST(keys['id'] AS BIGINT)",
        "active": "CAST(new_values['active'] AS BOOLEAN)",
        "amount": "CAST(new_values['amount'] AS DECIMAL(38,9))",
        "name": "new_values['name']",
        "score": "CAST(new_values['score'] AS DOUBLE)",
        "tags": "from_json(new_values['tags'], 'array<string>')",
        "updated": "CAST(new_values['updated'] AS TIMESTAMP)",
    }
    names = [name for name, _ in PEER_COLUMNS]
    typed = ", ".join(f"{values[name]} AS {name}" for name in names)
    return (
        f"MERGE INTO lake.{namespace}.peer t USING ("
        f"  SELECT op, {typed} FROM ("
        f"    SELECT *, ROW_NUMBER() OVER (PARTITION BY keys['id'] ORDER BY ordering_key DESC) AS rn"
        f"    FROM lake.{namespace}.changelog WHERE window_id = '{window_id}'"
        f"  ) WHERE rn = 1"
        f") s ON t.id = s.id "
        f"WHEN MATCHED AND s.op = 'DELETE' THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {', '.join(f'{n} = s.{n}' for n in names[1:])} "
        f"WHEN NOT MATCHED AND s.op <> 'DELETE' THEN INSERT ({', '.join(names)}) "
        f"VALUES ({', '.join(f's.{n}' for n in names)})"
    )


def run_peer(spark, namespace: str) -> float:
    """The hand-written MERGE of each window, in order, into an empty table of its own."""
    columns = ", ".join(f"{name} {kind}" for name, kind in PEER_COLUMNS)
    spark.sql(f"CREATE TABLE lake.{namespace}.peer ({columns}) USING iceberg")
    started = time.perf_counter()
    for win in windows():
        spark.sql(peer_merge_sql(namespace, win.window_id))
    return time.perf_counter() - started


def peer_differences(spark, namespace: str) -> int:
    """Rows in which the peer's table and the apply job's target differ (in either one and
    not the other): what the peer gets wrong on this changelog (older changes that arrived
    late win, partial images blank the columns they lack)."""
    names = [name for name, _ in PEER_COLUMNS]
    ours = spark.table(f"lake.{namespace}.Accounts").select(*names)
    peer = spark.table(f"lake.{namespace}.peer").select(*names)
    return ours.exceptAll(peer).count() + peer.exceptAll(ours).count()


def run_floor(spark, namespace: str) -> float:
    columns = ", ".join(f"{name} {kind}" for name, kind in CHANGELOG_COLUMNS)
    spark.sql(f"CREATE TABLE lake.{namespace}.floor ({columns}) USING iceberg")
    started = time.perf_counter()
    spark.table(f"lake.{namespace}.changelog").writeTo(f"lake.{namespace}.floor").append()
    return time.perf_counter() - started


def bench_session(app_name: str, warehouse: Path):
    """The benchmarks' SparkSession: local[2], the Iceberg catalog ``lake`` in ``warehouse``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from airflow_cdc.spark.iceberg import IcebergCatalog, local_session

    spark = local_session(
        IcebergCatalog(name="lake", warehouse=str(warehouse)),
        app_name=app_name,
        master="local[2]",
        extra_conf={
            "spark.driver.memory": "6g",
            "spark.sql.shuffle.partitions": "4",
            "spark.ui.showConsoleProgress": "false",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv=None) -> int:
    args = parse_args(argv)
    own_warehouse = args.warehouse is None
    warehouse = Path(args.warehouse or tempfile.mkdtemp(prefix="cdc-bench-apply-"))
    spark = bench_session("bench-apply", warehouse)
    try:
        # Warm the JVM (JIT, heap) on the same work, so neither timing pays for compilation.
        for round_ in range(args.warmups):
            build_changelog(spark, f"lake.warm{round_}.changelog", args.changes, args.keys)
            warm = (run_apply(spark, f"warm{round_}"), run_peer(spark, f"warm{round_}"),
                    run_floor(spark, f"warm{round_}"))
            print(f"bench apply: warm-up {round_ + 1}: seconds={warm[0]:.2f} "
                  f"peer_seconds={warm[1]:.2f} floor_seconds={warm[2]:.2f}", file=sys.stderr)
        timings = measure(spark, "bench", args.changes, args.keys, args.repeats)
        print(result_line(args.changes, *timings), flush=True)
        seconds, floor = timings[0], timings[2]
        if args.full:
            # The growth: 5x the changes over 5x the keys, in the same (warm) session.
            large, large_keys = args.changes * GROWTH, args.keys * GROWTH
            large_timings = measure(spark, "large", large, large_keys, args.growth_repeats)
            print(result_line(large, *large_timings), flush=True)
            large_seconds, large_floor = large_timings[0], large_timings[2]
            print(f"bench apply: changes={args.changes}->{large} keys={args.keys}->{large_keys} "
                  f"growth={large_seconds / seconds:.2f} floor_growth={large_floor / floor:.2f}",
                  flush=True)
    finally:
        spark.stop()
        if own_warehouse:
            shutil.rmtree(warehouse, ignore_errors=True)
    return 0


def measure(spark, prefix: str, changes: int, keys: int,
            repeats: int) -> tuple[float, float, float]:
    """``repeats`` rounds at this size, each on its own changelog: the apply and the peer
    (which goes first alternates between rounds, so neither always meets a warmer cache),
    then the floor. The medians of the three timings."""
    applies, peers, floors = [], [], []
    for round_ in range(repeats):
        namespace = f"{prefix}{round_}"
        build_changelog(spark, f"lake.{namespace}.changelog", changes, keys)
        if round_ % 2:
            peers.append(run_peer(spark, namespace))
            applies.append(run_apply(spark, namespace))
        else:
            applies.append(run_apply(spark, namespace))
            peers.append(run_peer(spark, namespace))
        floors.append(run_floor(spark, namespace))
        print(f"bench apply: {changes} changes, run {round_ + 1}: seconds={applies[-1]:.2f} "
              f"peer_seconds={peers[-1]:.2f} floor_seconds={floors[-1]:.2f} "
              f"peer_differing_rows={peer_differences(spark, namespace)}", file=sys.stderr)
    return statistics.median(applies), statistics.median(peers), statistics.median(floors)


def result_line(changes: int, seconds: float, peer: float, floor: float) -> str:
    return (
        f"bench apply: changes={changes} seconds={seconds:.2f} floor_seconds={floor:.2f} "
        f"ratio={seconds / floor:.2f} peer_seconds={peer:.2f} vs_peer={seconds / peer:.2f} "
        f"changes_per_s={changes / seconds:.0f}"
    )


if __name__ == "__main__":
    sys.exit(main())
