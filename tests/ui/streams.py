"""Demo-like streams in a real state store, written through the StateStore API as tasks do.

* ``allchanges`` (Spanner change stream): 8 half-hour windows; its first partition splits in
  two in window 2, one child splits again in window 5; the newest window is APPLIED and its
  gate waits for a partition stuck 12 minutes before the window end;
* ``shop`` (Datastream): 5 windows with dead letters, the newest FAILED;
* ``events`` (Bigtable change stream): 3 windows, all COMPLETE.

Every step of every window records its timing; windows complete a few minutes after their
end (the store's clock is moved along), the newest ones ending just before ``now``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow_cdc.model import ChildPartition, PartitionOutcome, PartitionPosition, Window
from airflow_cdc.state import StateStore

HALF_HOUR = timedelta(minutes=30)
STEP_SECONDS = {"plan": 2.1, "extract": 24.0, "commit": 0.8, "apply": 31.0, "gate": 0.6}


class MovingClock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def window_end_before(now: datetime) -> datetime:
    """The last half-hour boundary before ``now``."""
    floor = now.replace(minute=0, second=0, microsecond=0)
    while floor + HALF_HOUR <= now:
        floor += HALF_HOUR
    return floor


def build(url: str, now: datetime | None = None) -> dict[str, int]:
    """Fill the (empty) store at ``url``; returns windows per stream."""
    now = now or datetime.now(timezone.utc)
    clock = MovingClock(now)
    store = StateStore(url, clock=clock)
    store.migrate()
    last_end = window_end_before(now - timedelta(minutes=3))
    built = {
        "allchanges": _allchanges(store, clock, last_end),
        "shop": _shop(store, clock, last_end),
        "events": _events(store, clock, last_end),
    }
    store.close()
    return built


def _run_id(window: Window) -> str:
    return f"scheduled__{window.end.strftime('%Y-%m-%dT%H:%M:%S')}+00:00"


def _steps(store, clock, window: Window, upto: str, details=None) -> None:
    at = window.end + timedelta(seconds=20)
    for step, seconds in STEP_SECONDS.items():
        seconds = seconds * (1 + (window.start.minute % 7) / 10)
        store.record_step(window, step, at, at + timedelta(seconds=seconds),
                          (details or {}).get(step))
        at += timedelta(seconds=seconds + 1)
        if step == upto:
            break
    clock.now = at


def _window(store, clock, dag_id, window, positions, outcomes, counts, upto="gate", details=None,
            new_partitions=(), complete_after=timedelta(minutes=2)):
    """Plan, extract, commit and apply ``window`` as its DAG run would, recording each step;
    then complete it (``upto="gate"``), stop after apply, or fail it after plan."""
    owner = f"{dag_id}/{_run_id(window)}"
    clock.now = window.end + timedelta(seconds=20)
    store.plan_window(window, owner, 3600, positions, new_partitions=new_partitions)
    if upto == "failed":
        _steps(store, clock, window, "plan")
        store.mark_failed(window, owner, counts["reason"])
        return
    store.mark_extracted(window, owner, 1000 + int(window.start.timestamp()) % 1000)
    store.commit_window(window, owner, outcomes, counts)
    store.mark_applied(window, owner, {"lake.current.orders": 7})
    _steps(store, clock, window, upto, details)
    if upto == "gate":
        clock.now += complete_after
        store.mark_complete(window, "every partition live in the window reached its end")


def _registered(store, stream_id: str, kind: str, count: int, last_end) -> list[Window]:
    """Register the stream; its ``count`` half-hour windows ending at ``last_end``."""
    store.register_stream(stream_id, kind, f"fp-{stream_id}")
    first = last_end - count * HALF_HOUR
    return [Window(stream_id, first + i * HALF_HOUR, first + (i + 1) * HALF_HOUR)
            for i in range(count)]


def _allchanges(store, clock, last_end) -> int:
    dag = "spanner_change_stream_to_iceberg"
    live = ["p0"]
    for i, w in enumerate(_registered(store, "allchanges", "spanner_change_stream", 8, last_end)):
        positions = [PartitionPosition("p0", w.start)] if i == 0 else []
        outcomes = []
        for pid in list(live):
            if i == 1 and pid == "p0":
                children = (ChildPartition("p0-a", w.start + timedelta(minutes=10), ("p0",)),
                            ChildPartition("p0-b", w.start + timedelta(minutes=10), ("p0",)))
                outcomes.append(PartitionOutcome("p0", True, w.start + timedelta(minutes=10), 40,
                                                 children=children))
                outcomes += [PartitionOutcome(c.partition_id, False, w.end, 80) for c in children]
                live = ["p0-a", "p0-b"]
            elif i == 4 and pid == "p0-b":
                children = (ChildPartition("p0-b1", w.start + timedelta(minutes=5), ("p0-b",)),
                            ChildPartition("p0-b2", w.start + timedelta(minutes=5), ("p0-b",)))
                outcomes.append(PartitionOutcome("p0-b", True, w.start + timedelta(minutes=5), 9,
                                                 children=children))
                outcomes += [PartitionOutcome(c.partition_id, False, w.end, 60) for c in children]
                live = ["p0-a", "p0-b1", "p0-b2"]
            elif i == 7 and pid == "p0-b2":
                outcomes.append(PartitionOutcome(pid, False, w.end - timedelta(minutes=12), 15))
            else:
                outcomes.append(PartitionOutcome(pid, False, w.end, 100 + 13 * i))
        changes = sum(o.records for o in outcomes)
        _window(store, clock, dag, w, positions, outcomes, {"changes": changes, "transactions": changes // 3},
                upto="apply" if i == 7 else "gate")
    return 8


def _shop(store, clock, last_end) -> int:
    dag = "datastream_to_iceberg"
    for i, w in enumerate(_registered(store, "shop", "datastream", 5, last_end)):
        files = [PartitionPosition(f"shop/orders/2024/{i:02d}/file-{k}.jsonl", w.start) for k in range(3)]
        if i == 4:
            _window(store, clock, dag, w, [], [], {"reason": "extract failed: Spark driver lost "
                                                   "(exit code 137); the task's retry runs it again"},
                    upto="failed")
            continue
        outcomes = [PartitionOutcome(p.partition_id, True, w.end, 200 + 17 * k)
                    for k, p in enumerate(files)]
        # Datastream's files are new partitions each window (plan_window's new_partitions).
        _window(store, clock, dag, w, [], outcomes,
                {"changes": 600 + 40 * i, "dead_letters": i % 3, "events": 640 + 40 * i},
                details={"apply": {"dead_letter_rows": 1 if i == 2 else 0}},
                new_partitions=files, complete_after=timedelta(minutes=4))
    return 5


def _events(store, clock, last_end) -> int:
    dag = "bigtable_change_stream_to_iceberg"
    for i, w in enumerate(_registered(store, "events", "bigtable_change_stream", 3, last_end)):
        positions = [PartitionPosition(r, w.start) for r in ("[a,m)", "[m,z)")] if i == 0 else []
        outcomes = [PartitionOutcome(r, False, w.end, 70 + i) for r in ("[a,m)", "[m,z)")]
        _window(store, clock, dag, w, positions, outcomes, {"changes": 140 + 2 * i})
    return 3
