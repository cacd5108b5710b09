"""``make live-datastream``: the Datastream pipeline on a real schedule, in wall-clock time.

Nothing is replayed: Airflow's scheduler, dag-processor, triggerer and api-server run
``dags/datastream_to_iceberg.py`` on a ``--window-seconds`` schedule (catchup on,
``max_active_runs=2``) while a separate writer process lands Datastream files as the service
does, every ``--file-seconds``: a MySQL table in JSON lines and a PostgreSQL table in Avro,
events shuffled inside files, ~3% of events delivered again in a later file, some files
landing late (within the allowed lateness), and a heartbeat table that keeps changing (a
source that never stops, as real ones do).

Each window's plan task defers until the window's evidence can exist (an event read at or
after the window end plus the allowed lateness, in a settled file), then the window runs and
its gate opens. The business tables stop changing shortly before the last window ends, so
after it the targets must equal the tables' true final state.

Gate delay of a window = the instant its gate marked it COMPLETE minus its end. Each must be
at most ``window + lateness + settle + 60 s``. Last line:
``live-datastream: OK windows=<n> max_gate_delay_s=<n> mismatches=0`` (exit code 1 otherwise).
Everything lives under ``.live-datastream/`` (recreated each time).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time
import uuid as uuidlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from demo.live import (
    LiveAirflow,
    LiveResult,
    LiveSchedule,
    gate_bound_seconds,
    recreate,
    summary_line,
)

ROOT = Path(__file__).resolve().parents[1]
DAG_FILE = "datastream_to_iceberg.py"
STREAM_ID = "shop"
BUSINESS_TABLES = ("shop_orders", "public_customers")
HEARTBEAT_TABLE = "ops_heartbeat"
# How long before the last window's end the business tables stop changing: their last files
# land well before that window is planned.
FREEZE_BEFORE_END = timedelta(seconds=5)


@dataclass(frozen=True)
class LiveSettings:
    windows: int = 3
    window_seconds: int = 60
    lateness_seconds: float = 20
    settle_seconds: float = 5
    file_seconds: float = 5
    wait_poke_seconds: float = 3
    seed: int = 7

    @property
    def gate_bound_seconds(self) -> float:
        return gate_bound_seconds(self.window_seconds,
                                  self.lateness_seconds + self.settle_seconds)


# --- the writer: Datastream landing files in wall-clock time --------------------------------
class LiveWriter:
    """Lands Datastream event files under ``prefix`` as time passes (run in its own process)."""

    def __init__(self, prefix: Path, freeze_at: datetime, truth_path: Path, file_seconds: float,
                 lateness_seconds: float, seed: int) -> None:
        from demo.datastream import _Positions

        self.prefix = prefix
        self.freeze_at = freeze_at
        self.truth_path = truth_path
        self.file_seconds = file_seconds
        self.lateness = lateness_seconds
        self.rng = random.Random(seed)
        self.positions = _Positions()
        self.state: dict[str, dict[int, dict]] = {t: {} for t in BUSINESS_TABLES}
        self.next_key = {t: 0 for t in BUSINESS_TABLES}
        self.sent: list[dict] = []
        self.held: list[tuple[datetime, str, list[dict]]] = []  # files landing late
        self.beats = 0
        self.files = 0
        self.last_read = datetime.now(timezone.utc) - timedelta(seconds=file_seconds)

    def _uuid(self) -> str:
        return str(uuidlib.UUID(int=self.rng.getrandbits(128), version=4))

    def _event(self, table: str, row: dict, change: str, read: datetime) -> dict:
        from demo.datastream import datastream_event

        # Changes are read in log order, a fixed moment after they commit: PostgreSQL's
        # events order by source_timestamp before the LSN, so both must grow together.
        when = read - timedelta(milliseconds=300)
        return datastream_event(table, row, change, when, read, self.positions, self.rng,
                                self._uuid())

    def _business_change(self, read: datetime) -> tuple[str, dict]:
        from demo.datastream import _row

        table = self.rng.choice(BUSINESS_TABLES)
        rows = self.state[table]
        roll = self.rng.random()
        if roll < 0.45 or not rows:
            self.next_key[table] += 1
            row = _row(table, self.next_key[table], self.rng)
            rows[row["id"]] = row
            return table, self._event(table, row, "INSERT", read)
        key = self.rng.choice(sorted(rows))
        if roll < 0.85:
            row = _row(table, key, self.rng)
            rows[key] = row
            return table, self._event(table, row, "UPDATE", read)
        return table, self._event(table, rows.pop(key), "DELETE", read)

    def tick(self, now: datetime) -> None:
        """Land one round of files: events read during the last ``file_seconds``."""
        batches: dict[str, list[dict]] = {}
        frozen = now >= self.freeze_at
        if not frozen:
            since = max(self.last_read, now - timedelta(seconds=self.file_seconds))
            span = (now - since).total_seconds()
            reads = sorted(since + timedelta(seconds=self.rng.uniform(0, span))
                           for _ in range(self.rng.randint(2, 6)))
            for read in reads:
                read = max(read, self.last_read + timedelta(milliseconds=1))
                self.last_read = read
                table, event = self._business_change(read)
                batches.setdefault(table, []).append(event)
                self.sent.append(event)
            if self.sent and self.rng.random() < 0.2:  # ~3% of events come again later
                again = self.rng.choice(self.sent[-40:])
                batches.setdefault(again["object"], []).append(again)
        self.beats += 1
        self.last_read = max(now, self.last_read + timedelta(milliseconds=1))
        beat = {"id": 1, "beat": self.beats, "at": now.isoformat()}
        batches.setdefault(HEARTBEAT_TABLE, []).append(
            self._event(HEARTBEAT_TABLE, beat, "UPDATE", self.last_read))
        for table, events in sorted(batches.items()):
            self.rng.shuffle(events)
            if not frozen and table != HEARTBEAT_TABLE and self.rng.random() < 0.1:
                delay = timedelta(seconds=self.rng.uniform(self.file_seconds, self.lateness / 2))
                self.held.append((now + delay, table, events))
            else:
                self._land(table, events, now)
        for due, table, events in [h for h in self.held if h[0] <= now or frozen]:
            self._land(table, events, now)
            self.held.remove((due, table, events))
        if frozen and not self.truth_path.exists():
            # Pickled: the rows keep their Python types (Decimal, naive datetime) for the
            # exact comparison; only this harness reads the file.
            tmp = self.truth_path.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(self.state))
            tmp.rename(self.truth_path)

    def _land(self, table: str, events: list[dict], now: datetime) -> None:
        """Write one file under a temporary name and rename it: objects appear whole."""
        from airflow_cdc.sources.datastream.writer import write_avro_events, write_json_events

        self.files += 1
        avro = table == "public_customers"
        folder = self.prefix / table / now.strftime("%Y/%m/%d/%H/%M")
        name = f"{table}_{now:%Y%m%d%H%M%S}_{self.files:05d}.{'avro' if avro else 'jsonl'}"
        tmp = folder / f".{name}.tmp"
        (write_avro_events if avro else write_json_events)(tmp, events)
        tmp.rename(folder / name)

    def run(self, stop_at: datetime) -> None:
        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
        while not stop and datetime.now(timezone.utc) < stop_at:
            began = time.monotonic()
            self.tick(datetime.now(timezone.utc))
            time.sleep(max(0.0, self.file_seconds - (time.monotonic() - began)))


def writer_main(config_path: str) -> int:
    config = json.loads(Path(config_path).read_text())
    writer = LiveWriter(
        Path(config["prefix"]), datetime.fromisoformat(config["freeze_at"]),
        Path(config["truth"]), config["file_seconds"], config["lateness_seconds"], config["seed"],
    )
    writer.run(datetime.fromisoformat(config["stop_at"]))
    return 0


# --- the run ---------------------------------------------------------------------------------
def run_live(settings: LiveSettings, base: Path, log=print) -> LiveResult:
    from demo.datastream import compare_targets

    prefix = recreate(base) / "landing" / STREAM_ID
    prefix.mkdir(parents=True)
    schedule = LiveSchedule.starting_after(datetime.now(timezone.utc), settings.window_seconds,
                                           settings.windows, settings.gate_bound_seconds)
    first, last_end = schedule.first, schedule.last_end
    airflow = LiveAirflow("live-datastream", base, DAG_FILE, schedule, {
        "CDC_DATASTREAM_PREFIX": str(prefix),
        "CDC_DATASTREAM_STREAM_ID": STREAM_ID,
        "CDC_DATASTREAM_TABLES": ",".join((*BUSINESS_TABLES, HEARTBEAT_TABLE)),
        "CDC_DATASTREAM_SETTLE_SECONDS": str(settings.settle_seconds),
        "CDC_DATASTREAM_LATENESS_SECONDS": str(settings.lateness_seconds),
        "CDC_WINDOW_SECONDS": str(settings.window_seconds),
        "CDC_WAIT_POKE_SECONDS": str(settings.wait_poke_seconds),
        "CDC_GATE_TIMEOUT_SECONDS": str(settings.gate_bound_seconds * 4),
    }, log=log)
    truth_path = base / "truth.pickle"
    writer_config = base / "writer.json"
    writer_config.write_text(json.dumps({
        "prefix": str(prefix), "truth": str(truth_path),
        "freeze_at": (last_end - FREEZE_BEFORE_END).isoformat(),
        "stop_at": (last_end + timedelta(seconds=settings.gate_bound_seconds * 4)).isoformat(),
        "file_seconds": settings.file_seconds, "lateness_seconds": settings.lateness_seconds,
        "seed": settings.seed,
    }))
    log(f"live-datastream: windows of {settings.window_seconds}s from {first.isoformat()} to "
        f"{last_end.isoformat()}, lateness {settings.lateness_seconds}s, settle "
        f"{settings.settle_seconds}s, a file every {settings.file_seconds}s; gate bound "
        f"{settings.gate_bound_seconds:.0f}s after each window end")
    writer_log = open(base / "writer.log", "w")  # noqa: SIM115 - closed below
    writer = subprocess.Popen(
        [sys.executable, "-m", "demo.live_datastream", "--writer", str(writer_config)],
        stdout=writer_log, stderr=subprocess.STDOUT, env={**os.environ, **airflow.env},
    )
    result = LiveResult()
    try:
        with airflow:
            airflow.wait_for_windows(
                result, STREAM_ID,
                details=lambda counts: {"idle_declared": bool(counts.get("idle_declared")),
                                        "changes": counts.get("changes"),
                                        "files": counts.get("files")},
                describe=lambda w: f", {w['files']} files, {w['changes']} changes")
            airflow.wait_for("the writer's true final state", truth_path.exists, 120)
    finally:
        if writer.poll() is None:
            writer.terminate()
            writer.wait(timeout=30)
        writer_log.close()
    truth = pickle.loads(truth_path.read_bytes()) if truth_path.exists() else {}
    result.comparison = compare_targets(airflow.warehouse, truth)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=str(ROOT / ".live-datastream"), help="working folder")
    parser.add_argument("--windows", type=int, default=LiveSettings.windows)
    parser.add_argument("--window-seconds", type=int, default=LiveSettings.window_seconds)
    parser.add_argument("--lateness-seconds", type=float, default=LiveSettings.lateness_seconds)
    parser.add_argument("--settle-seconds", type=float, default=LiveSettings.settle_seconds)
    parser.add_argument("--file-seconds", type=float, default=LiveSettings.file_seconds)
    parser.add_argument("--seed", type=int, default=LiveSettings.seed)
    parser.add_argument("--writer", help=argparse.SUPPRESS)  # the writer process's config
    args = parser.parse_args(argv)
    if args.writer:
        return writer_main(args.writer)
    settings = LiveSettings(
        windows=args.windows, window_seconds=args.window_seconds,
        lateness_seconds=args.lateness_seconds, settle_seconds=args.settle_seconds,
        file_seconds=args.file_seconds, seed=args.seed,
    )
    result = run_live(settings, Path(args.base).resolve(), log=lambda m: print(m, flush=True))
    for table, detail in result.comparison.get("tables", {}).items():
        print(f"live-datastream: {table}: {detail}", flush=True)
    status = "OK" if result.ok(settings) else "FAILED"
    print(summary_line("live-datastream", status, result))
    return 0 if status == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
