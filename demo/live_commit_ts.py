"""``make live-commit-ts``: Spanner commit-timestamp tables on a real schedule, in wall-clock time.

Nothing is replayed: the Spanner emulator (:mod:`airflow_cdc_emulators.spanner`) serves the
five empty tables of ``COMMIT_TIMESTAMP_SCHEMA`` on a clock that runs with wall time, a writer
thread changes them through the real ``google-cloud-spanner`` client only, a few commits per
second: mutations with ``spanner.COMMIT_TIMESTAMP`` (Orders inserted, updated and hard
deleted; Customers written and soft-deleted; Events, whose key the commit timestamp leads)
and DML with ``PENDING_COMMIT_TIMESTAMP()`` (a Documents row and its DocumentHistory row in
one read-write transaction). Airflow's scheduler, dag-processor, triggerer and api-server
(:class:`~demo.live.LiveAirflow`) run ``dags/spanner_commit_ts_to_iceberg.py`` on
a 1-minute schedule with deferrable plan and gate, a 2-second safety margin and a key
reconciliation every window.

Each window's plan waits (in the triggerer) until its end is past by the safety margin, then
the tables are read at exactly the window's end: the read is the evidence, so the gate opens
as soon as apply committed. Gate delay of a window = the instant its gate marked it COMPLETE
minus its end; the bound is ``window + safety margin + 60 s`` = 122 s.

After the last window completes the targets (read with pyiceberg,
:func:`demo.commit_ts.compare`) must equal the emulator's truth at the windows'
ends. Last line: ``live-commit-ts: OK windows=<n> max_gate_delay_s=<n> mismatches=0``
(``MISMATCH`` when the targets differ, ``FAILED`` otherwise; exit code 1 for both).
Everything lives under ``.live-commit-ts/`` (recreated each time); about 5-6 minutes.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from demo.live import (
    LiveAirflow,
    LiveSchedule,
    WriterLiveResult,
    gate_bound_seconds,
    recreate,
    run_status,
    summary_line,
)

ROOT = Path(__file__).resolve().parents[1]
DAG_FILE = "spanner_commit_ts_to_iceberg.py"
SAFETY_MARGIN_SECONDS = 2  # the DAG's CDC_SAFETY_MARGIN_SECONDS here
STREAM_ID = "live_commit_ts"
INSTANCE, DATABASE = "demo-instance", "shop"
NAMES = ("ada", "grace", "linus", "barbara", "ken", "margaret", "dennis", "frances")
TIERS = ("FREE", "SILVER", "GOLD")


@dataclass(frozen=True)
class LiveSettings:
    windows: int = 3
    window_minutes: int = 1
    pause_seconds: tuple[float, float] = (0.2, 0.6)  # between two writer commits
    seed: int = 7

    @property
    def window_seconds(self) -> int:
        return self.window_minutes * 60

    @property
    def gate_bound_seconds(self) -> float:
        return gate_bound_seconds(self.window_seconds, SAFETY_MARGIN_SECONDS)


class LiveWriter:
    """Commits to the emulator's tables through the real Spanner client, a few per second."""

    def __init__(self, database, settings: LiveSettings) -> None:
        self.database = database
        self.settings = settings
        self.rng = random.Random(settings.seed)
        self.calls: Counter = Counter()
        self.errors: list[str] = []
        self.orders: set[int] = set()
        self.documents: set[tuple[int, int]] = set()
        self.customers: dict[str, bool] = {}  # id -> soft-deleted
        self.events = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- one commit each ------------------------------------------------------------------
    def order_write(self) -> None:
        from google.cloud.spanner import COMMIT_TIMESTAMP

        order_id = self.rng.randint(1, 60)
        values = (order_id, self.rng.choice(NAMES), self.rng.randint(1, 9),
                  round(self.rng.uniform(1, 500), 2), self.rng.random() < 0.5, COMMIT_TIMESTAMP)
        with self.database.batch() as batch:
            batch.insert_or_update(
                "Orders",
                ("OrderId", "CustomerName", "Quantity", "Amount", "Paid", "LastUpdateTime"),
                [values])
        self.orders.add(order_id)

    def order_delete(self) -> None:
        if not self.orders:
            return self.order_write()
        order_id = self.rng.choice(sorted(self.orders))
        from google.cloud.spanner import KeySet

        with self.database.batch() as batch:
            batch.delete("Orders", KeySet(keys=[[order_id]]))
        self.orders.discard(order_id)

    def document_write(self) -> None:
        """A document and its history row in one transaction, by DML."""
        key = (self.rng.randint(1, 4), self.rng.randint(1, 5))
        text = " ".join(self.rng.choice(NAMES) for _ in range(self.rng.randint(2, 6)))
        exists = key in self.documents
        params = {"u": key[0], "d": key[1], "c": text, "delta": ("~" if exists else "+") + text}
        from google.cloud.spanner_v1 import param_types

        types = {"u": param_types.INT64, "d": param_types.INT64, "c": param_types.STRING,
                 "delta": param_types.STRING}
        document = (
            "UPDATE Documents SET Contents = @c, LastUpdateTime = PENDING_COMMIT_TIMESTAMP() "
            "WHERE UserId = @u AND DocumentId = @d" if exists else
            "INSERT INTO Documents (UserId, DocumentId, Contents, LastUpdateTime) "
            "VALUES (@u, @d, @c, PENDING_COMMIT_TIMESTAMP())")
        history = ("INSERT INTO DocumentHistory (UserId, DocumentId, Ts, Delta) "
                   "VALUES (@u, @d, PENDING_COMMIT_TIMESTAMP(), @delta)")

        def write(transaction):
            transaction.execute_update(document, params=params, param_types=types)
            transaction.execute_update(history, params=params, param_types=types)

        self.database.run_in_transaction(write)
        self.documents.add(key)

    def customer_write(self) -> None:
        from google.cloud.spanner import COMMIT_TIMESTAMP

        customer = f"cust-{self.rng.randint(1, 25):03d}"
        with self.database.batch() as batch:
            batch.insert_or_update(
                "Customers", ("CustomerId", "Name", "Tier", "Deleted", "UpdatedAt"),
                [(customer, self.rng.choice(NAMES), self.rng.choice(TIERS), False,
                  COMMIT_TIMESTAMP)])
        self.customers[customer] = False

    def customer_soft_delete(self) -> None:
        from google.cloud.spanner import COMMIT_TIMESTAMP

        live = sorted(c for c, deleted in self.customers.items() if not deleted)
        if not live:
            return self.customer_write()
        customer = self.rng.choice(live)
        with self.database.batch() as batch:
            batch.update("Customers", ("CustomerId", "Deleted", "UpdatedAt"),
                         [(customer, True, COMMIT_TIMESTAMP)])
        self.customers[customer] = True

    def event_insert(self) -> None:
        from google.cloud.spanner import COMMIT_TIMESTAMP
        from google.cloud.spanner_v1.data_types import JsonObject

        self.events += 1
        with self.database.batch() as batch:
            batch.insert("Events", ("EventTime", "EventId", "Kind", "Payload"),
                         [(COMMIT_TIMESTAMP, f"evt-{self.events:05d}",
                           self.rng.choice(("login", "search", "checkout")),
                           JsonObject({"user": self.rng.randint(1, 99)}))])

    def step(self) -> None:
        kinds = (
            ("Orders write (mutation)", self.order_write, 30),
            ("Orders hard delete", self.order_delete, 10),
            ("Documents + DocumentHistory (DML)", self.document_write, 20),
            ("Customers write (mutation)", self.customer_write, 15),
            ("Customers soft delete", self.customer_soft_delete, 8),
            ("Events insert (key led by the commit timestamp)", self.event_insert, 17),
        )
        name, call, _ = self.rng.choices(kinds, weights=[k[2] for k in kinds])[0]
        try:
            call()
            self.calls[name] += 1
        except Exception as error:  # noqa: BLE001 - every refusal is reported, none hidden
            self.errors.append(f"{name}: {type(error).__name__}: {error}"[:500])

    def run(self) -> None:
        low, high = self.settings.pause_seconds
        while not self._stop.wait(self.rng.uniform(low, high)):
            self.step()

    def start(self) -> LiveWriter:
        self._thread = threading.Thread(target=self.run, name="live-commit-ts-writer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)


def run_live(settings: LiveSettings, base: Path, log=print) -> WriterLiveResult:
    from demo.commit_ts import compare
    from airflow_cdc_emulators.spanner import (
        COMMIT_TIMESTAMP_SCHEMA,
        SpannerEmulator,
        VersionedDatabase,
    )
    from airflow_cdc.sources.spanner.reader import SpannerConnection

    recreate(base)
    created = datetime.now(timezone.utc).replace(microsecond=0)
    tables = VersionedDatabase(COMMIT_TIMESTAMP_SCHEMA, created_at=created, clock="wall")
    schedule = LiveSchedule.starting_after(created, settings.window_seconds, settings.windows,
                                           settings.gate_bound_seconds)
    first, last_end = schedule.first, schedule.last_end
    result = WriterLiveResult(last_end=last_end)
    log(f"live-commit-ts: database {DATABASE} created {created.isoformat()}; windows of "
        f"{settings.window_seconds}s from {first.isoformat()} to {last_end.isoformat()}; gate "
        f"bound {settings.gate_bound_seconds:.0f}s after each window end")
    with SpannerEmulator(tables=tables) as emulator:
        airflow = LiveAirflow("live-commit-ts", base, DAG_FILE, schedule, {
            "SPANNER_EMULATOR_HOST": emulator.emulator_host,
            "CDC_SPANNER_INSTANCE": INSTANCE,
            "CDC_SPANNER_DATABASE": DATABASE,
            "CDC_STREAM_ID": STREAM_ID,
            "CDC_WINDOW_MINUTES": str(settings.window_minutes),
            "CDC_RECONCILE_EVERY": "1",
            "CDC_SAFETY_MARGIN_SECONDS": str(SAFETY_MARGIN_SECONDS),
        }, log=log)
        database = SpannerConnection(project="demo-project", instance=INSTANCE, database=DATABASE,
                                     emulator_host=emulator.emulator_host).open_database()
        # The tables are read whole at the first window's end (initial load): the writer may
        # start at once, before the first window.
        writer = LiveWriter(database, settings).start()
        try:
            with airflow:
                airflow.wait_for_windows(
                    result, STREAM_ID,
                    details=lambda counts: {"rows": counts.get("rows"),
                                            "reconciled_deletes": counts.get("reconciled_deletes"),
                                            "partitions_read": counts.get("partitions_read")},
                    describe=lambda w: (f" (planned {w['planned_after_end_s']:.0f}s after its "
                                        f"end), {w['rows']} rows, {w['reconciled_deletes']} "
                                        f"reconciled deletes"))
        finally:
            writer.stop()
        result.writer_calls = writer.calls
        result.writer_errors = writer.errors
        log(f"live-commit-ts: the writer made {sum(writer.calls.values())} commits "
            f"{dict(sorted(writer.calls.items()))}, {len(writer.errors)} refused"
            + (f", e.g. {writer.errors[0]}" if writer.errors else ""))
        if result.windows:
            # The targets after the windows that completed (all of them on success); the
            # first window read the tables whole (initial load), the writer ran since start-up.
            ends = sorted(w["end"] for w in result.windows)
            result.comparison = compare(base, tables, ends, log=log, prefix="live-commit-ts")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=str(ROOT / ".live-commit-ts"), help="working folder")
    parser.add_argument("--windows", type=int, default=LiveSettings.windows)
    parser.add_argument("--seed", type=int, default=LiveSettings.seed)
    args = parser.parse_args(argv)
    settings = LiveSettings(windows=args.windows, seed=args.seed)
    result = run_live(settings, Path(args.base).resolve(), log=lambda m: print(m, flush=True))
    status = run_status(result, settings)
    print(summary_line("live-commit-ts", status, result))
    return 0 if status == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
