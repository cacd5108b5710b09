"""``make demo-datastream``: the Datastream pipeline end to end on a local output tree.

1. Generate a deterministic Datastream output: a MySQL table (JSON-lines files) and a
   PostgreSQL table (Avro files), backfill first and then CDC (inserts, updates, deletes,
   rolled-back transactions with their "reverse" DML), events shuffled inside files,
   duplicates re-delivered up to two windows later, one file that arrives late and one that is
   still being written when a window is planned. LSNs cross ``9/FFFFFFFF`` and the binlog
   rotates, so text ordering would be wrong.
2. Before each window, write the files that have "arrived" by then; run
   ``dags/datastream_to_iceberg.py`` through real Airflow (``dag.test``) for the window.
3. Compare the target tables with the true final state of the source tables.

Last line: ``demo-datastream: OK windows=<n> events=<n> duplicates=<n> target_rows=<n>
mismatches=0``; the exit code is non-zero on any mismatch or failed run. Everything lives
under ``.demo-datastream/`` (recreated each time).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import time
import uuid as uuidlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DAG_ID = "datastream_to_iceberg"
WINDOW = timedelta(minutes=10)
START = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
BUCKET = timedelta(minutes=2)
TABLES = {"shop_orders": "mysql", "public_customers": "postgresql"}


@dataclass
class ArrivingFile:
    """One Datastream output file of the demo, with when it "arrives" in the bucket."""

    path: Path
    events: list[dict]
    arrival: datetime
    fmt: str
    written: bool = False
    still_writing: bool = False


@dataclass
class DatastreamHistory:
    """A generated Datastream output tree and the true final state of its source tables."""

    start: datetime
    windows: int
    files: list[ArrivingFile]
    truth: dict[str, dict[int, dict]]
    events: int
    duplicates: int
    late_file: Path | None = None
    unsettled_file: Path | None = None
    _unsettled_pending: bool = field(default=True)

    def window_end(self, index: int) -> datetime:
        return self.start + WINDOW * (index + 1)

    def write_arrived(self, now: datetime | None, settle_seconds: float = 60) -> int:
        """Write every file that has arrived by ``now`` (all when None); returns how many.

        Files get an old modification time (settled), except the one marked as still being
        written the first time it is due: it gets "now" and waits one window.
        """
        from airflow_cdc.sources.datastream.writer import write_avro_events, write_json_events

        wall = time.time()
        written = 0
        for file in self.files:
            if file.written and not file.still_writing:
                continue
            if now is not None and file.arrival > now:
                continue
            if not file.written:
                writer = write_json_events if file.fmt == "json" else write_avro_events
                writer(file.path, file.events)
                file.written = True
                written += 1
                if file.path == self.unsettled_file and now is not None:
                    file.still_writing = True
                    os.utime(file.path, (wall, wall))
                    continue
            file.still_writing = False
            os.utime(file.path, (wall - 10 * settle_seconds, wall - 10 * settle_seconds))
        return written


def _row(table: str, key: int, rng: random.Random) -> dict:
    if table == "shop_orders":
        return {"id": key, "customer": f"c{rng.randint(1, 9)}",
                # MySQL DECIMAL(10,2): Datastream writes it with its two places (20.00).
                "amount": Decimal(f"{rng.uniform(1, 500):.2f}") + Decimal("0.50"), "status": rng.choice(
                    ["new", "paid", "shipped", None])}
    return {"id": key, "name": f"customer {key}", "tier": rng.choice(["gold", "silver", None]),
            "active": rng.random() < 0.7}


class _Positions:
    """Source log positions: the MySQL binlog rotates, the PostgreSQL LSN crosses 9/FFFFFFFF."""

    def __init__(self) -> None:
        self.binlog, self.offset = 9, 4
        self.lsn = (9 << 32) | 0xFFFFF000

    def mysql(self) -> dict:
        self.offset += 137
        if self.offset > 6000:
            self.binlog, self.offset = self.binlog + 1, 4
        return {"log_file": f"mysql-bin.{self.binlog:06d}", "log_position": self.offset}

    def postgres(self) -> dict:
        self.lsn += 0x400
        return {"lsn": f"{self.lsn >> 32:X}/{self.lsn & 0xFFFFFFFF:X}"}


def datastream_event(table: str, row: dict, change: str, when: datetime, read: datetime,
                     positions: _Positions, rng: random.Random, uuid: str,
                     backfill: bool = False) -> dict:
    """One Datastream event of the demo's MySQL (JSON) or PostgreSQL (Avro) tables."""
    kind = TABLES.get(table, "mysql")
    deleted = change == "DELETE"
    schema, _, name = table.partition("_")
    if kind == "mysql":
        meta = {**({"log_file": "", "log_position": 0} if backfill else positions.mysql()),
                "primary_keys": ["id"], "is_deleted": deleted, "database": schema,
                "table": name, "change_type": change}
        method = "mysql-backfill-fulldump" if backfill else "mysql-cdc-binlog"
    else:
        meta = {**({} if backfill else positions.postgres()), "schema": schema,
                "table": name, "is_deleted": deleted, "change_type": change,
                "tx_id": str(rng.randint(1000, 9999)), "primary_keys": ["id"]}
        method = "postgresql-backfill" if backfill else "postgres-cdc-wal"
    return {
        "stream_name": "projects/demo/locations/us-central1/streams/shop",
        "read_method": method, "object": table, "schema_key": f"{table}-v1",
        "uuid": uuid, "read_timestamp": read, "source_timestamp": when,
        "sort_keys": [], "source_metadata": meta, "payload": dict(row),
    }


def generate_history(base: Path, seed: int = 11, windows: int = 4) -> DatastreamHistory:
    rng = random.Random(seed)
    positions = _Positions()
    uuids = (uuidlib.UUID(int=rng.getrandbits(128), version=4) for _ in iter(int, 1))
    state: dict[str, dict[int, dict]] = {t: {} for t in TABLES}
    events: list[tuple[str, dict]] = []

    def event(table: str, row: dict, change: str, when: datetime, read: datetime,
              backfill: bool = False) -> dict:
        return datastream_event(table, row, change, when, read, positions, rng,
                                str(next(uuids)), backfill)

    # Backfill: the tables as they were when the stream started.
    for table, count in (("shop_orders", 8), ("public_customers", 6)):
        for key in range(1, count + 1):
            row = _row(table, key, rng)
            state[table][key] = row
            read = START + timedelta(seconds=5 * key)
            events.append((table, event(table, row, "INSERT", START, read, backfill=True)))
    next_key = {t: 100 for t in TABLES}
    moment = START + timedelta(seconds=40)
    end = START + WINDOW * windows + timedelta(minutes=8)
    while moment < end:
        table = rng.choice(list(TABLES))
        roll = rng.random()
        read = moment + timedelta(seconds=rng.randint(1, 40))
        if roll < 0.3 or not state[table]:
            next_key[table] += 1
            row = _row(table, next_key[table], rng)
            state[table][row["id"]] = row
            events.append((table, event(table, row, "INSERT", moment, read)))
        elif roll < 0.75:
            key = rng.choice(sorted(state[table]))
            row = {**_row(table, key, rng)}
            state[table][key] = row
            change = "UPDATE" if TABLES[table] == "postgresql" else rng.choice(["UPDATE", "UPDATE-INSERT"])
            events.append((table, event(table, row, change, moment, read)))
        elif roll < 0.9:
            key = rng.choice(sorted(state[table]))
            row = state[table].pop(key)
            events.append((table, event(table, row, "DELETE", moment, read)))
        else:  # a rolled-back insert: the log holds the insert and its reverse delete
            next_key[table] += 1
            row = _row(table, next_key[table], rng)
            events.append((table, event(table, row, "INSERT", moment, read)))
            events.append((table, event(table, row, "DELETE", moment, read + timedelta(seconds=1))))
        moment += timedelta(seconds=rng.randint(8, 25))

    # Files: one per table and 2-minute read bucket, events shuffled inside each file.
    buckets: dict[tuple[str, int], list[dict]] = {}
    for table, ev in events:
        index = int((ev["read_timestamp"] - START) / BUCKET)
        buckets.setdefault((table, index), []).append(ev)
    files = []
    for (table, index), batch in sorted(buckets.items()):
        rng.shuffle(batch)
        fmt = "json" if TABLES[table] == "mysql" else "avro"
        bucket_start = START + BUCKET * index
        folder = base / table / bucket_start.strftime("%Y/%m/%d/%H/%M")
        path = folder / f"{table}_{bucket_start:%Y%m%d%H%M}_{index:04d}.{'jsonl' if fmt == 'json' else 'avro'}"
        files.append(ArrivingFile(path, batch, bucket_start + BUCKET + timedelta(seconds=30), fmt))

    # Duplicates: re-delivered copies, some one window later, some two.
    cdc_events = [ev for _, ev in events if "backfill" not in ev["read_method"]]
    duplicated = rng.sample(cdc_events, 8)
    for number, ev in enumerate(duplicated):
        table = ev["object"]
        fmt = "json" if TABLES[table] == "mysql" else "avro"
        arrival = ev["read_timestamp"] + WINDOW * (1 + number % 2)
        suffix = "jsonl" if fmt == "json" else "avro"
        path = base / table / "redelivered" / f"{table}_dup_{number:02d}.{suffix}"
        files.append(ArrivingFile(path, [ev], arrival, fmt))
    # One file arrives a window late; one is still being written when first listed.
    jsons = [f for f in files if f.fmt == "json" and "redelivered" not in str(f.path)]
    late = next((f for f in jsons if f.arrival > START + WINDOW + BUCKET), jsons[len(jsons) // 2])
    # It lands after the run of the window its events belong to: the next window reads it.
    newest = max(ev["read_timestamp"] for ev in late.events)
    late.arrival = START + WINDOW * (int((newest - START) / WINDOW) + 1) + timedelta(minutes=7, seconds=30)
    avros = [f for f in files if f.fmt == "avro" and "redelivered" not in str(f.path)]
    unsettled = next((f for f in avros if f.arrival > START + WINDOW * 2), avros[-1])
    return DatastreamHistory(
        start=START,
        windows=windows,
        files=files,
        truth=state,
        events=len(events),
        duplicates=len(duplicated),
        late_file=late.path,
        unsettled_file=unsettled.path,
    )


def compare_targets(warehouse: Path, truths: dict[str, dict[int, dict]]) -> dict:
    """Rows and mismatches of every target table against its true final state (key -> row)."""
    from airflow_cdc.demo.compare import read_iceberg_rows

    total = mismatches = 0
    details = {}
    for table, truth in truths.items():
        folder = warehouse / "current" / table
        rows = read_iceberg_rows(folder) if folder.exists() else []
        target = {r["id"]: {k: v for k, v in r.items() if not k.startswith("_cdc_")} for r in rows}
        bad = [key for key in set(truth) | set(target)
               if _normal(truth.get(key)) != _normal(target.get(key))]
        total += len(target)
        mismatches += len(bad)
        details[table] = {"expected": len(truth), "target": len(target), "mismatched": sorted(bad)[:5]}
    return {"target_rows": total, "mismatches": mismatches, "tables": details}


def _normal(row: dict | None) -> dict | None:
    if row is None:
        return None
    return {k: v for k, v in row.items() if v is not None}


def environment(base: Path, prefix: Path, windows_start: datetime) -> dict:
    return {
        "AIRFLOW_CDC_WAREHOUSE": str(base / "warehouse"),
        "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
        "CDC_DATASTREAM_PREFIX": str(prefix),
        "CDC_DATASTREAM_SETTLE_SECONDS": "60",
        "CDC_START": windows_start.isoformat(),
        "CDC_WINDOW_MINUTES": str(int(WINDOW.total_seconds() // 60)),
        "PYSPARK_PYTHON": sys.executable,
    }


def run_windows(history: DatastreamHistory, dag, log=print) -> list:
    """Write what has arrived, then run the DAG, for every window; returns the DAG runs."""
    runs = []
    for index in range(history.windows):
        end = history.window_end(index)
        last = index == history.windows - 1
        # Planned when an event read 5 minutes after the end can have arrived.
        written = history.write_arrived(None if last else end + timedelta(minutes=7))
        began = time.monotonic()
        run = dag.test(logical_date=end)
        runs.append(run)
        log(f"demo-datastream: window ending {end.isoformat()}: {written} new files, "
            f"{getattr(run, 'state', None)} in {time.monotonic() - began:.0f} s")
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=str(ROOT / ".demo-datastream"), help="working folder")
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    base = Path(args.base).resolve()
    if base.exists():
        shutil.rmtree(base)
    (base / "airflow").mkdir(parents=True)
    prefix = base / "landing" / "shop"
    os.environ.update({
        "AIRFLOW_HOME": str(base / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        **environment(base, prefix, START),
    })
    history = generate_history(prefix, seed=args.seed, windows=args.windows)
    print(f"demo-datastream: {history.events} events in {len(history.files)} files "
          f"({history.duplicates} duplicates, late file {history.late_file.name}, "
          f"unsettled file {history.unsettled_file.name})", flush=True)
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                   check=True, stdout=subprocess.DEVNULL)
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils.state import DagRunState

    bag = DagBag(str(ROOT / "dags"))
    if DAG_ID not in bag.dags:
        raise SystemExit(f"demo-datastream: the example DAG does not import: {bag.import_errors}")
    runs = run_windows(history, bag.dags[DAG_ID], log=lambda m: print(m, flush=True))
    failed = [r for r in runs if getattr(r, "state", None) != DagRunState.SUCCESS]
    result = compare_targets(base / "warehouse", history.truth)
    for table, detail in result["tables"].items():
        print(f"demo-datastream: {table}: {detail}", flush=True)
    status = "OK" if result["mismatches"] == 0 and not failed else "MISMATCH"
    print(
        f"demo-datastream: {status} windows={len(runs)} events={history.events} "
        f"duplicates={history.duplicates} target_rows={result['target_rows']} "
        f"mismatches={result['mismatches']}"
    )
    return 0 if status == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
