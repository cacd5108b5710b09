"""``make live-bigtable``: the Bigtable change stream pipeline on a real schedule, in wall-clock time.

Nothing is replayed: the Bigtable emulator (:mod:`airflow_cdc_emulators.bigtable`) serves an
empty table (``BigtableHistory.empty``, created at start-up) on a clock that runs with wall
time, a writer thread changes it through the real GAPIC ``BigtableClient`` only (MutateRow
with SetCell, DeleteFromColumn and DeleteFromFamily, MutateRows, ReadModifyWriteRow,
CheckAndMutateRow), a few calls per second over a fixed set of row keys spread over the
table's partitions, from both clusters (``default`` routes to ``c1``, ``c2-reader`` to ``c2``,
whose writes reach ``c1`` 200 ms later), and Airflow's scheduler, dag-processor, triggerer
and api-server (:class:`~demo.live.LiveAirflow`, the harness of every ``make
live-*``) run ``dags/bigtable_change_stream_to_iceberg.py`` on a 1-minute schedule
(``CDC_WINDOW_MINUTES=1``) with deferrable plan and gate, catchup on and two active runs.

The DAG's first window starts at a minute boundary at least a minute after start-up: after
the table exists, the writer thread started and the services are up. The writer makes its
first call at that instant: the change stream is read from there on (there is no snapshot of
earlier data), so the table's true state is exactly what the stream carries. Each window's plan
defers until every partition's low watermark passed its end (checked from the end plus the
DAG's ``evidence_delay_seconds``, 2 s), then the window is read, applied and its gate opens.

Gate delay of a window = the instant its gate marked it COMPLETE in the state store minus its
end (the harness measures it the same way for every source). The bound:
``window + evidence delay + 60 s`` = 60 + 2 + 60 = 122 s after the window end.

After the last window completes the writer stops and the ``bigtable.events_cells`` and
``bigtable.events_latest`` tables (read with pyiceberg, :func:`demo.bigtable.compare`)
must equal ``emulator.true_state(last window end)``. Last line:
``live-bigtable: OK windows=<n> max_gate_delay_s=<n> mismatches=0`` (``MISMATCH`` when the
targets differ, ``FAILED`` otherwise; exit code 1 for both). Everything lives under
``.live-bigtable/`` (recreated each time). About 5-6 minutes for the default 3 windows.
"""

from __future__ import annotations

import argparse
import pickle
import random
import sys
import threading
import time
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
DAG_FILE = "bigtable_change_stream_to_iceberg.py"
EVIDENCE_DELAY_SECONDS = 2  # the DAG's evidence_delay_seconds
# Spread over the empty table's four initial partitions ('' .. user#0070 .. user#0180 ..
# user#0290 .. ''); cf:name is decoded as a string by the DAG, so it only holds text.
ROW_KEYS = (b"session#003", b"user#0012", b"user#0045", b"user#0101", b"user#0150",
            b"user#0203", b"user#0255", b"user#0312", b"user#0377")
PROFILES = ("default", "default", "default", "c2-reader")  # c1 mostly, c2 now and then
NAMES = ("ada", "grace", "linus", "barbara", "ken", "margaret", "dennis", "frances")


@dataclass(frozen=True)
class LiveSettings:
    windows: int = 3
    window_minutes: int = 1
    pause_seconds: tuple[float, float] = (0.2, 0.5)  # between two writer calls
    seed: int = 7

    @property
    def window_seconds(self) -> int:
        return self.window_minutes * 60

    @property
    def gate_bound_seconds(self) -> float:
        return gate_bound_seconds(self.window_seconds, EVIDENCE_DELAY_SECONDS)


# --- the writer: client calls in wall-clock time ---------------------------------------------
def _set(family: str, qualifier: bytes, value: bytes, stamp: int = -1) -> dict:
    return {"set_cell": {"family_name": family, "column_qualifier": qualifier,
                         "timestamp_micros": stamp, "value": value}}


class LiveWriter:
    """Changes the emulator's table through the real GAPIC client, a few calls per second."""

    def __init__(self, client, table_name: str, settings: LiveSettings) -> None:
        self.client = client
        self.table_name = table_name
        self.settings = settings
        self.rng = random.Random(settings.seed)
        self.calls: Counter = Counter()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # one call each; the weights give ~35% MutateRow, 20% MutateRows, 25% ReadModifyWriteRow,
    # 20% CheckAndMutateRow
    def _request(self, row_key: bytes) -> dict:
        return {"table_name": self.table_name, "row_key": row_key,
                "app_profile_id": self.rng.choice(PROFILES)}

    def _past_ms(self, within_seconds: float) -> int:
        """A millisecond timestamp (in micros) up to ``within_seconds`` before now."""
        now_ms = int(time.time() * 1000)
        return (now_ms - int(self.rng.uniform(0, within_seconds) * 1000)) * 1000

    def _cell_mutations(self) -> list[dict]:
        roll = self.rng.random()
        mutations = [_set("cf", b"name", self.rng.choice(NAMES).encode())]
        if roll < 0.5:
            mutations.append(_set("cf", b"score", str(self.rng.randint(0, 999)).encode()))
        if roll < 0.3:  # a version stamped by the client, in the past: out of order
            mutations.append(_set("meta", b"note", f"n{self.rng.randint(0, 99)}".encode(),
                                  self._past_ms(30)))
        if roll > 0.93:  # larger than the 1024-byte chunk size: chunked in the stream
            mutations.append(_set("cf", b"blob", self.rng.randbytes(self.rng.randint(1500, 4000))))
        return mutations

    def mutate_set_cells(self) -> None:
        self.client.mutate_row(request={**self._request(self.rng.choice(ROW_KEYS)),
                                        "mutations": self._cell_mutations()})

    def mutate_delete_from_column(self) -> None:
        qualifier = self.rng.choice((b"score", b"blob", b"note"))
        family = "meta" if qualifier == b"note" else "cf"
        time_range = {}  # the whole column, or the versions of the last few seconds
        if self.rng.random() < 0.5:
            end = self._past_ms(0)
            time_range = {"start_timestamp_micros": end - 20_000_000, "end_timestamp_micros": end}
        self.client.mutate_row(request={**self._request(self.rng.choice(ROW_KEYS)), "mutations": [
            {"delete_from_column": {"family_name": family, "column_qualifier": qualifier,
                                    "time_range": time_range}}]})

    def mutate_delete_from_family(self) -> None:
        family = self.rng.choice(("meta", "meta", "cf"))
        self.client.mutate_row(request={**self._request(self.rng.choice(ROW_KEYS)),
                                        "mutations": [{"delete_from_family": {"family_name": family}}]})

    def mutate_rows(self) -> None:
        keys = self.rng.sample(ROW_KEYS, self.rng.randint(2, 4))
        entries = []
        for key in keys:
            if self.rng.random() < 0.25:
                mutations = [{"delete_from_column": {"family_name": "cf", "column_qualifier": b"score"}},
                             _set("meta", b"seen", b"batch")]
            else:
                mutations = self._cell_mutations()
            entries.append({"row_key": key, "mutations": mutations})
        request = {"table_name": self.table_name, "app_profile_id": self.rng.choice(PROFILES),
                   "entries": entries}
        for response in self.client.mutate_rows(request=request):
            for entry in response.entries:
                if entry.status.code != 0:
                    raise RuntimeError(f"MutateRows entry {entry.index} refused: {entry.status}")

    def read_modify_write(self) -> None:
        rules = [{"family_name": "cf", "column_qualifier": b"visits",
                  "increment_amount": self.rng.randint(1, 5)}]
        if self.rng.random() < 0.5:
            rules.append({"family_name": "meta", "column_qualifier": b"trail",
                          "append_value": self.rng.choice(NAMES)[:2].encode()})
        self.client.read_modify_write_row(
            request={**self._request(self.rng.choice(ROW_KEYS)), "rules": rules})

    def check_and_mutate(self) -> None:
        # Rows with a name get a status; rows without one get a name (and a fresh trail).
        predicate = {"chain": {"filters": [{"family_name_regex_filter": "cf"},
                                           {"column_qualifier_regex_filter": b"name"}]}}
        self.client.check_and_mutate_row(request={
            **self._request(self.rng.choice(ROW_KEYS)),
            "predicate_filter": predicate,
            "true_mutations": [_set("cf", b"status", self.rng.choice((b"active", b"idle")))],
            "false_mutations": [_set("cf", b"name", b"newcomer"),
                                {"delete_from_column": {"family_name": "meta",
                                                        "column_qualifier": b"trail"}}],
        })

    def step(self) -> None:
        kinds = (
            ("MutateRow SetCell", self.mutate_set_cells, 20),
            ("MutateRow DeleteFromColumn", self.mutate_delete_from_column, 10),
            ("MutateRow DeleteFromFamily", self.mutate_delete_from_family, 5),
            ("MutateRows", self.mutate_rows, 20),
            ("ReadModifyWriteRow", self.read_modify_write, 25),
            ("CheckAndMutateRow", self.check_and_mutate, 20),
        )
        name, call, _ = self.rng.choices(kinds, weights=[k[2] for k in kinds])[0]
        try:
            call()
            self.calls[name] += 1
        except Exception as error:  # noqa: BLE001 - every refusal is reported, none hidden
            self.errors.append(f"{name}: {type(error).__name__}: {error}"[:500])

    def run(self, begin_at: datetime) -> None:
        # The stream is read from the first window's start on; nothing is written before it,
        # so the table's true state is what the change stream carries from then on.
        wait = (begin_at - datetime.now(timezone.utc)).total_seconds()
        if wait > 0 and self._stop.wait(wait):
            return
        low, high = self.settings.pause_seconds
        while not self._stop.wait(self.rng.uniform(low, high)):
            self.step()

    def start(self, begin_at: datetime) -> LiveWriter:
        """Run in a thread, writing from ``begin_at`` on."""
        self._thread = threading.Thread(target=self.run, args=(begin_at,),
                                        name="live-bigtable-writer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)


# --- the run ---------------------------------------------------------------------------------
def stream_id_of(history) -> str:
    """The stream id the Bigtable DAG gives the emulator's table."""
    return "".join(c if c.isalnum() else "_" for c in history.table_id).lower()


def dag_env(emulator, history, window_minutes: int) -> dict[str, str]:
    """The Bigtable DAG's environment for the emulator's table."""
    return {
        "BIGTABLE_EMULATOR_HOST": emulator.emulator_host,
        "CDC_BIGTABLE_PROJECT": history.config.project,
        "CDC_BIGTABLE_INSTANCE": history.config.instance,
        "CDC_BIGTABLE_TABLE": history.table_id,
        "CDC_BIGTABLE_APP_PROFILE": "default",
        "CDC_WINDOW_MINUTES": str(window_minutes),
    }


def run_live(settings: LiveSettings, base: Path, log=print) -> WriterLiveResult:
    from demo.bigtable import compare
    from airflow_cdc_emulators.bigtable import BigtableEmulator, BigtableHistory

    recreate(base)
    # The table is created now; the first window starts at a boundary at least a minute on
    # (services take ~30-60 s to come up on a loaded 2-core machine), so its run is on time
    # and it starts after the table exists and the writer thread started; the writer's first
    # call is at its start.
    created = datetime.now(timezone.utc).replace(microsecond=0)
    history = BigtableHistory.empty(start=created)
    schedule = LiveSchedule.starting_after(created, settings.window_seconds, settings.windows,
                                           settings.gate_bound_seconds)
    first, last_end = schedule.first, schedule.last_end
    result = WriterLiveResult(last_end=last_end)
    stream_id = stream_id_of(history)
    log(f"live-bigtable: table {history.table_name} created {created.isoformat()}; windows of "
        f"{settings.window_seconds}s from {first.isoformat()} to {last_end.isoformat()}; gate "
        f"bound {settings.gate_bound_seconds:.0f}s after each window end")
    with BigtableEmulator(history) as emulator:
        airflow = LiveAirflow("live-bigtable", base, DAG_FILE, schedule,
                              dag_env(emulator, history, settings.window_minutes), log=log)
        writer = LiveWriter(emulator.client(), emulator.table_name, settings).start(first)
        try:
            with airflow:
                airflow.wait_for_windows(
                    result, stream_id,
                    details=lambda counts: {"mutations": counts.get("mutations"),
                                            "changes": counts.get("changes"),
                                            "unconfirmed": bool(counts.get("unconfirmed"))},
                    describe=lambda w: (f" (planned {w['planned_after_end_s']:.0f}s after its "
                                        f"end), {w['mutations']} mutations"))
        finally:
            writer.stop()
        result.writer_calls = writer.calls
        result.writer_errors = writer.errors
        log(f"live-bigtable: the writer made {sum(writer.calls.values())} calls "
            f"{dict(sorted(writer.calls.items()))}, {len(writer.errors)} refused"
            + (f", e.g. {writer.errors[0]}" if writer.errors else ""))
        if result.windows:
            # The targets after the last window that completed (all of them on success).
            done_end = max(w["end"] for w in result.windows)
            result.comparison = compare(base, emulator, done_end, log=log, prefix="live-bigtable")
            if result.comparison.get("mismatches"):
                # What the table went through, for a look at the differences afterwards.
                (base / "commits.pickle").write_bytes(pickle.dumps(emulator.commits))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=str(ROOT / ".live-bigtable"), help="working folder")
    parser.add_argument("--windows", type=int, default=LiveSettings.windows)
    parser.add_argument("--seed", type=int, default=LiveSettings.seed)
    args = parser.parse_args(argv)
    settings = LiveSettings(windows=args.windows, seed=args.seed)
    result = run_live(settings, Path(args.base).resolve(), log=lambda m: print(m, flush=True))
    status = run_status(result, settings)
    print(summary_line("live-bigtable", status, result))
    return 0 if status == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
