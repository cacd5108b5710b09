"""``make demo-datastream``: the Datastream pipeline end to end on a local output tree.

1. Generate a deterministic Datastream output: a MySQL table (JSON-lines files, ``amount``
   written as exact ``20.00`` literals and declared ``DECIMAL(10,2)`` through the DAG), a
   PostgreSQL table (Avro files) and an Oracle table ``HR.EMPLOYEES`` (Avro files with
   Datastream's schema: a ``datetime`` record column and a decimal; no ``primary_keys`` in
   its metadata, so its key ``EMPLOYEE_ID`` is declared through the DAG's ``key_columns``).
   Backfill first and then CDC (inserts, updates, deletes, rolled-back transactions with
   their "reverse" DML; Oracle rows that move: an UPDATE-DELETE of the old ROWID and an
   UPDATE-INSERT of the new one at the same scn/rs_id/ssn, and UPDATEs naming a new ROWID),
   events shuffled inside files, duplicates re-delivered up to two windows later, one file
   that arrives late and one that is still being written when a window is planned. LSNs
   cross ``9/FFFFFFFF`` and the binlog rotates, so text ordering would be wrong.
2. Before each window, write the files that have "arrived" by then; run
   ``dags/datastream_to_iceberg.py`` through real Airflow (``dag.test``) for the window.
3. Compare the target tables with the true final state of the source tables, value by exact
   value (a ``Decimal`` with its scale, a naive ``datetime``) and column by Iceberg type.

Last line: ``demo-datastream: OK windows=<n> events=<n> duplicates=<n> target_rows=<n>
mismatches=0``; the exit code is non-zero on any mismatch or failed run. Everything lives
under ``.demo-datastream/`` (recreated each time).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
import uuid as uuidlib
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from airflow_cdc.sources.datastream.events import object_identifier
from airflow_cdc.sources.datastream.writer import DATETIME_RECORD

ROOT = Path(__file__).resolve().parents[1]
DAG_ID = "datastream_to_iceberg"
WINDOW = timedelta(minutes=10)
START = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
BUCKET = timedelta(minutes=2)
# Table identifier -> source database. Datastream names Oracle objects SCHEMA.TABLE
# (seed 001: "SAMPLE.TBL"); the demo's MySQL and PostgreSQL objects keep their old names.
TABLES = {"shop_orders": "mysql", "public_customers": "postgresql", "HR_EMPLOYEES": "oracle"}
ORACLE_OBJECTS = {"HR_EMPLOYEES": "HR.EMPLOYEES"}
# The column keying each table's truth and target. Oracle events carry no primary_keys, so
# the DAG declares this one (CDC_DATASTREAM_KEY_COLUMNS, see environment()).
KEY_COLUMNS = {"HR_EMPLOYEES": "EMPLOYEE_ID"}
# What a Datastream stream writes as the Avro payload schema of the Oracle table: NUMBER(6)
# as long, NUMBER(8,2) as a decimal, and the DATE column as Datastream's ``datetime`` record
# (a wall-clock value: it must land as a timestamp without time zone).
PAYLOAD_SCHEMAS = {
    "HR_EMPLOYEES": [
        {"name": "EMPLOYEE_ID", "type": ["null", "long"], "default": None},
        {"name": "NAME", "type": ["null", "string"], "default": None},
        {"name": "DEPT", "type": ["null", "long"], "default": None},
        {"name": "SALARY", "type": ["null", {"type": "bytes", "logicalType": "decimal",
                                              "precision": 8, "scale": 2}], "default": None},
        {"name": "HIRE_DATE", "type": ["null", DATETIME_RECORD], "default": None},
    ],
}


@dataclass
class ArrivingFile:
    """One Datastream output file of the demo, with when it "arrives" in the bucket."""

    path: Path
    events: list[dict]
    arrival: datetime
    fmt: str
    written: bool = False
    still_writing: bool = False
    payload_schema: list | None = None  # Avro only: the table's Datastream payload schema


@dataclass(frozen=True)
class RowMove:
    """An Oracle row whose ROWID changed: a move pair, or an UPDATE naming a new ROWID."""

    table: str
    key: int
    old_row_id: str
    new_row_id: str
    at: datetime
    pair: bool  # True: UPDATE-DELETE + UPDATE-INSERT at one scn/rs_id/ssn


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
    moves: list[RowMove] = field(default_factory=list)
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
                if file.fmt == "json":
                    write_json_events(file.path, file.events)
                else:
                    write_avro_events(file.path, file.events, payload_schema=file.payload_schema)
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
    if table == "HR_EMPLOYEES":
        # HIRE_DATE is an Oracle DATE: a wall-clock date and time to the second, no zone.
        hired = datetime(2015, 1, 1) + timedelta(seconds=rng.randrange(10 * 365 * 86400))
        return {"EMPLOYEE_ID": key, "NAME": f"employee {key}", "DEPT": rng.choice([10, 20, 30, 40]),
                # NUMBER(8,2): scaleb keeps two places (12000.00; dividing would give 12000).
                "SALARY": Decimal(rng.randrange(300000, 2000000)).scaleb(-2), "HIRE_DATE": hired}
    return {"id": key, "name": f"customer {key}", "tier": rng.choice(["gold", "silver", None]),
            "active": rng.random() < 0.7}


class _Positions:
    """Source log positions: the MySQL binlog rotates, the PostgreSQL LSN crosses 9/FFFFFFFF,
    Oracle's SCN grows and its record set ids (``rs_id``) move to a new redo log sequence."""

    def __init__(self) -> None:
        self.binlog, self.offset = 9, 4
        self.lsn = (9 << 32) | 0xFFFFF000
        self.scn = 15869116216871
        self.redo_sequence, self.redo_block = 0x0073C9, 0x000A4E00

    def mysql(self) -> dict:
        self.offset += 137
        if self.offset > 6000:
            self.binlog, self.offset = self.binlog + 1, 4
        return {"log_file": f"mysql-bin.{self.binlog:06d}", "log_position": self.offset}

    def postgres(self) -> dict:
        self.lsn += 0x400
        return {"lsn": f"{self.lsn >> 32:X}/{self.lsn & 0xFFFFFFFF:X}"}

    def oracle(self) -> dict:
        """One redo record: the SCN, its record set id and SQL sequence number."""
        self.scn += 17
        self.redo_block += 0x1D0
        if self.redo_block > 0x000A6000:  # a log switch: the next sequence's blocks restart
            self.redo_sequence, self.redo_block = self.redo_sequence + 1, 0x00000010
        rs_id = f"0x{self.redo_sequence:06x}.{self.redo_block:08x}.0010"
        return {"scn": self.scn, "rs_id": rs_id, "ssn": 0}


def _oracle_row_id(number: int) -> str:
    """An 18-character extended ROWID (object, file, block, row) in Oracle's base-64 digits."""
    digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    block, row = divmod(number, 64)
    encoded = "".join(digits[(block >> shift) & 63] for shift in (30, 24, 18, 12, 6, 0))
    return f"AAAPwRAAL{encoded}AA{digits[row]}"


def datastream_event(table: str, row: dict, change: str, when: datetime, read: datetime,
                     positions: _Positions, rng: random.Random, uuid: str,
                     backfill: bool = False, *, row_id: str | None = None,
                     position: dict | None = None) -> dict:
    """One Datastream event of the demo's MySQL (JSON), PostgreSQL or Oracle (Avro) tables.

    Oracle events need ``row_id`` (their metadata has no primary_keys); ``position`` gives
    the source position instead of the next one (the two events of a row move share theirs).
    """
    kind = TABLES.get(table, "mysql")
    deleted = change in ("DELETE", "UPDATE-DELETE")
    schema, _, name = table.partition("_")
    obj = table
    if kind == "mysql":
        meta = {**({"log_file": "", "log_position": 0} if backfill else position or positions.mysql()),
                "primary_keys": ["id"], "is_deleted": deleted, "database": schema,
                "table": name, "change_type": change}
        method = "mysql-backfill-fulldump" if backfill else "mysql-cdc-binlog"
    elif kind == "oracle":
        if not row_id:
            raise ValueError(f"Oracle event of {table} ({change}) needs the row's row_id: "
                             f"pass row_id=... (Oracle metadata has no primary_keys)")
        obj = ORACLE_OBJECTS.get(table, f"{schema}.{name}")
        meta = {"log_file": "", **({} if backfill else position or positions.oracle()),
                "row_id": row_id, "is_deleted": deleted, "database": "ORCL",
                "schema": schema, "table": name, "change_type": change,
                # LogMiner's XID: undo segment, slot, sequence.
                "tx_id": None if backfill else
                f"{rng.randint(1, 20)}.{rng.randint(0, 31)}.{rng.randint(100, 9999)}"}
        method = "oracle-backfill" if backfill else "oracle-cdc-logminer"
    else:
        meta = {**({} if backfill else position or positions.postgres()), "schema": schema,
                "table": name, "is_deleted": deleted, "change_type": change,
                "tx_id": str(rng.randint(1000, 9999)), "primary_keys": ["id"]}
        method = "postgresql-backfill" if backfill else "postgres-cdc-wal"
    return {
        "stream_name": "projects/demo/locations/us-central1/streams/shop",
        "read_method": method, "object": obj, "schema_key": f"{table}-v1",
        "uuid": uuid, "read_timestamp": read, "source_timestamp": when,
        "sort_keys": [], "source_metadata": meta, "payload": dict(row),
    }


def generate_history(base: Path, seed: int = 11, windows: int = 4) -> DatastreamHistory:
    rng = random.Random(seed)
    positions = _Positions()
    uuids = (uuidlib.UUID(int=rng.getrandbits(128), version=4) for _ in iter(int, 1))
    state: dict[str, dict[int, dict]] = {t: {} for t in TABLES}
    # The ROWID each Oracle row has now; new ROWIDs are never reused, so a ghost row left
    # under an old ROWID could not be mistaken for a live one.
    row_ids: dict[str, dict[int, str]] = {t: {} for t, kind in TABLES.items() if kind == "oracle"}
    minted = iter(range(1, 1 << 30))
    events: list[tuple[str, dict]] = []
    moves: list[RowMove] = []

    def event(table: str, row: dict, change: str, when: datetime, read: datetime,
              backfill: bool = False, row_id: str | None = None, position: dict | None = None) -> dict:
        return datastream_event(table, row, change, when, read, positions, rng,
                                str(next(uuids)), backfill, row_id=row_id, position=position)

    def new_row_id() -> str:
        return _oracle_row_id(next(minted))

    def update(table: str, key: int, when: datetime, read: datetime) -> None:
        """One UPDATE of ``key``; an Oracle row may move to a new ROWID while at it."""
        old = state[table][key]
        row = _row(table, key, rng)
        state[table][key] = row
        if TABLES[table] == "mysql":
            events.append((table, event(table, row, rng.choice(["UPDATE", "UPDATE-INSERT"]), when, read)))
            return
        if TABLES[table] == "postgresql":
            events.append((table, event(table, row, "UPDATE", when, read)))
            return
        # Oracle: the first update of the history is always a move, so every seed has one.
        style = "move" if not moves else rng.choice(["update", "update", "move", "new-row-id"])
        old_row_id = row_ids[table][key]
        if style == "update":
            events.append((table, event(table, row, "UPDATE", when, read, row_id=old_row_id)))
            return
        row_ids[table][key] = new_row_id()
        if style == "new-row-id":  # e.g. after ALTER TABLE ... SHRINK SPACE moved the row
            events.append((table, event(table, row, "UPDATE", when, read, row_id=row_ids[table][key])))
        else:
            # An update of the partition key (DEPT) with row movement: LogMiner gives the old
            # image under the old ROWID and the new image under the new one, in one redo
            # record (same scn, rs_id and ssn).
            row["DEPT"] = rng.choice([d for d in (10, 20, 30, 40) if d != old["DEPT"]])
            shared = positions.oracle()
            events.append((table, event(table, old, "UPDATE-DELETE", when, read,
                                        row_id=old_row_id, position=shared)))
            events.append((table, event(table, row, "UPDATE-INSERT", when, read,
                                        row_id=row_ids[table][key], position=shared)))
        moves.append(RowMove(table, key, old_row_id, row_ids[table][key], when, style == "move"))

    # Backfill: the tables as they were when the stream started.
    for table, count in (("shop_orders", 8), ("public_customers", 6), ("HR_EMPLOYEES", 6)):
        for key in range(1, count + 1):
            row = _row(table, key, rng)
            state[table][key] = row
            read = START + timedelta(seconds=5 * key)
            if table in row_ids:
                row_ids[table][key] = new_row_id()
            events.append((table, event(table, row, "INSERT", START, read, backfill=True,
                                        row_id=row_ids.get(table, {}).get(key))))
    next_key = {t: 100 for t in TABLES}
    moment = START + timedelta(seconds=40)
    end = START + WINDOW * windows + timedelta(minutes=8)
    while moment < end:
        table = rng.choice(list(TABLES))
        roll = rng.random()
        read = moment + timedelta(seconds=rng.randint(1, 40))
        if roll < 0.3 or not state[table]:
            next_key[table] += 1
            key = next_key[table]
            state[table][key] = _row(table, key, rng)
            if table in row_ids:
                row_ids[table][key] = new_row_id()
            events.append((table, event(table, state[table][key], "INSERT", moment, read,
                                        row_id=row_ids.get(table, {}).get(key))))
        elif roll < 0.75:
            update(table, rng.choice(sorted(state[table])), moment, read)
        elif roll < 0.9:
            key = rng.choice(sorted(state[table]))
            row = state[table].pop(key)
            row_id = row_ids[table].pop(key) if table in row_ids else None
            events.append((table, event(table, row, "DELETE", moment, read, row_id=row_id)))
        else:  # a rolled-back insert: the log holds the insert and its reverse delete
            next_key[table] += 1
            row = _row(table, next_key[table], rng)
            row_id = new_row_id() if table in row_ids else None
            events.append((table, event(table, row, "INSERT", moment, read, row_id=row_id)))
            events.append((table, event(table, row, "DELETE", moment, read + timedelta(seconds=1),
                                        row_id=row_id)))
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
        files.append(ArrivingFile(path, batch, bucket_start + BUCKET + timedelta(seconds=30), fmt,
                                  payload_schema=PAYLOAD_SCHEMAS.get(table)))

    # Duplicates: re-delivered copies, some one window later, some two.
    cdc_events = [ev for _, ev in events if "backfill" not in ev["read_method"]]
    duplicated = rng.sample(cdc_events, 8)
    for number, ev in enumerate(duplicated):
        table = object_identifier(ev["object"])
        fmt = "json" if TABLES[table] == "mysql" else "avro"
        arrival = ev["read_timestamp"] + WINDOW * (1 + number % 2)
        suffix = "jsonl" if fmt == "json" else "avro"
        path = base / table / "redelivered" / f"{table}_dup_{number:02d}.{suffix}"
        files.append(ArrivingFile(path, [ev], arrival, fmt, payload_schema=PAYLOAD_SCHEMAS.get(table)))
    # One file arrives a window late; one is still being written when first listed.
    jsons = [f for f in files if f.fmt == "json" and "redelivered" not in str(f.path)]
    late = next((f for f in jsons if f.arrival > START + WINDOW + BUCKET), jsons[len(jsons) // 2])
    # It lands after the run of the window its events belong to: the next window reads it.
    newest = max(ev["read_timestamp"] for ev in late.events)
    late.arrival = START + WINDOW * (int((newest - START) / WINDOW) + 1) + timedelta(minutes=7, seconds=30)
    # The unsettled file is one of the PostgreSQL table's, as before the Oracle table came.
    avros = [f for f in files if f.fmt == "avro" and "redelivered" not in str(f.path)
             and f.path.name.startswith("public_customers")]
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
        moves=moves,
    )


def compare_targets(warehouse: Path, truths: dict[str, dict[int, dict]]) -> dict:
    """Rows, column types and mismatches of every target table against its true final state.

    ``truths`` maps a table identifier to its rows by key (the column in :data:`KEY_COLUMNS`,
    ``id`` otherwise). Values compare exactly: same Python type and value, a ``Decimal``
    also with the same scale (``Decimal("20.0") == Decimal("20.00")`` in Python), a datetime
    with the same zone or none. Column types must be those the truth's values need (see
    :func:`_type_errors`), and a target may hold no column the source rows lack (an Oracle
    ``row_id`` would mean it was keyed by ROWID) and no two rows with one key (a ghost).
    """
    from demo.compare import iceberg_column_types, read_iceberg_rows

    total = mismatches = 0
    details = {}
    for table, truth in truths.items():
        folder = _target_folder(warehouse, table)
        key = KEY_COLUMNS.get(table, "id")
        rows = read_iceberg_rows(folder) if folder else []
        types = iceberg_column_types(folder) if folder else {}
        target: dict = {}
        repeated = []
        for row in rows:
            values = {k: v for k, v in row.items() if not k.startswith("_cdc_")}
            if values.get(key) in target:
                repeated.append(values.get(key))
            target[values.get(key)] = values
        bad = [k for k in set(truth) | set(target) if not _same_row(truth.get(k), target.get(k))]
        # No target table at all: its true rows already count as missing ones.
        type_errors = _type_errors(truth, types) if folder else []
        total += len(rows)
        mismatches += len(bad) + len(repeated) + len(type_errors)
        details[table] = {
            "expected": len(truth), "target": len(rows),
            "mismatched": sorted(bad, key=str)[:5], "repeated_keys": sorted(repeated, key=str)[:5],
            "types": {name: str(kind) for name, kind in types.items() if not name.startswith("_cdc_")},
            "type_errors": type_errors,
        }
    return {"target_rows": total, "mismatches": mismatches, "tables": details}


def _target_folder(warehouse: Path, table: str) -> Path | None:
    """The Iceberg table folder of ``table`` in the ``current`` namespace (any letter case)."""
    namespace = warehouse / "current"
    if not namespace.exists():
        return None
    found = [p for p in namespace.iterdir() if p.is_dir() and p.name.lower() == table.lower()]
    return found[0] if found else None


def _exact(expected: object, actual: object) -> bool:
    if type(expected) is not type(actual):  # a float or text for a Decimal, str for a datetime
        return False
    if isinstance(expected, Decimal):
        return expected == actual and expected.as_tuple().exponent == actual.as_tuple().exponent
    if isinstance(expected, datetime):
        return expected == actual and (expected.tzinfo is None) == (actual.tzinfo is None)
    return expected == actual


def _same_row(expected: dict | None, actual: dict | None) -> bool:
    if expected is None or actual is None:
        return expected is actual
    expected, actual = _normal(expected), _normal(actual)
    return expected.keys() == actual.keys() and all(_exact(v, actual[k]) for k, v in expected.items())


def _normal(row: dict | None) -> dict | None:
    if row is None:
        return None
    return {k: v for k, v in row.items() if v is not None}


def _type_errors(truth: dict[int, dict], types: dict) -> list[str]:
    """Target columns whose Iceberg type cannot hold the truth's values as they are.

    A ``Decimal`` needs a decimal column of its scale, a naive datetime a timestamp without
    time zone, an aware one a timestamp with time zone; ints, booleans and text their types.
    """
    from pyiceberg.types import (
        BooleanType,
        DateType,
        DecimalType,
        DoubleType,
        IntegerType,
        LongType,
        StringType,
        TimestampType,
        TimestamptzType,
    )

    columns: dict[str, object] = {}
    for row in truth.values():
        for name, value in row.items():
            if columns.get(name) is None:
                columns[name] = value
    # With no true rows left (all deleted) nothing says which columns the source has.
    errors = [f"column {name!r} ({types[name]}) is not in the source rows"
              for name in types if truth and not name.startswith("_cdc_") and name not in columns]
    for name, sample in columns.items():
        kind = types.get(name)
        if sample is None:
            continue  # every true value is NULL: the column may be absent, of any type
        if kind is None:
            errors.append(f"column {name!r} is missing from the target")
            continue
        if isinstance(sample, bool):
            fits = isinstance(kind, BooleanType)
        elif isinstance(sample, int):
            fits = isinstance(kind, (LongType, IntegerType))
        elif isinstance(sample, Decimal):
            scales = {-v.as_tuple().exponent for r in truth.values() if isinstance(v := r.get(name), Decimal)}
            fits = isinstance(kind, DecimalType) and scales == {kind.scale}
        elif isinstance(sample, datetime):
            fits = isinstance(kind, TimestampType if sample.tzinfo is None else TimestamptzType)
        elif isinstance(sample, date):
            fits = isinstance(kind, DateType)
        elif isinstance(sample, float):
            fits = isinstance(kind, DoubleType)
        else:
            fits = isinstance(kind, StringType)
        if not fits:
            errors.append(f"column {name!r} is {kind} in the target, which does not hold "
                          f"{type(sample).__name__} values such as {sample!r} exactly")
    return errors


def environment(base: Path, prefix: Path, windows_start: datetime) -> dict:
    return {
        "AIRFLOW_CDC_WAREHOUSE": str(base / "warehouse"),
        "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
        "CDC_DATASTREAM_PREFIX": str(prefix),
        "CDC_DATASTREAM_SETTLE_SECONDS": "60",
        "CDC_DATASTREAM_TABLES": ",".join(ORACLE_OBJECTS.get(t, t) for t in TABLES),
        # Oracle metadata has no primary_keys: without this HR.EMPLOYEES would be keyed by
        # ROWID and every moved row would leave a ghost under its old ROWID.
        "CDC_DATASTREAM_KEY_COLUMNS": json.dumps(
            {ORACLE_OBJECTS[t]: [c] for t, c in KEY_COLUMNS.items() if t in ORACLE_OBJECTS}),
        # The MySQL column's declared type (JSON alone would give NUMERIC(38,2)).
        "CDC_DATASTREAM_COLUMN_TYPES": json.dumps({"shop_orders": {"amount": "DECIMAL(10,2)"}}),
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
    pairs = sum(1 for move in history.moves if move.pair)
    print(f"demo-datastream: {history.events} events in {len(history.files)} files "
          f"({history.duplicates} duplicates, late file {history.late_file.name}, "
          f"unsettled file {history.unsettled_file.name}, {len(history.moves)} Oracle rows "
          f"given a new ROWID, {pairs} of them as UPDATE-DELETE/UPDATE-INSERT pairs)", flush=True)
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
