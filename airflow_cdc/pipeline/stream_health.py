"""A stream's health as the state store shows it, defined once for every place that reports it:
``airflow-cdc status`` and ``lag-chart``, the CDC view in the Airflow UI, and the window metrics.

* **freshness**: now minus the end of the stream's last COMPLETE window: how old the newest
  data a consumer may rely on is;
* a window's **lag**: how far its low watermark trails its end (0 once every partition reached
  the end); a window not committed yet has no low watermark, so its lag runs from its start.
  The stream's lag is its newest window's;
* a window's **delay**: how long after its end it became COMPLETE (the freshness a consumer
  had when the gate opened);
* the **backlog**: now minus the end of the stream's newest window, the start of the oldest
  interval no window reads yet; counted in intervals of the stream's schedule (the newest
  window's first interval: a catch-up window reads several, see
  :mod:`airflow_cdc.pipeline.catchup`). A stream that keeps up has a backlog under one
  interval plus its window's cost;
* a **lagging** partition: a live partition whose watermark is before the end of the stream's
  newest committed window, the partitions a gate waits for; a **stalled** one: a lagging
  partition whose watermark has not moved for ``stall_seconds`` (a partition that caught up
  waits for the next window without moving: it is not stalled).

Every read is bounded (the newest windows, the lowest partitions, counts), so a stream with
100,000 windows and 10,000 partitions reads as fast as one with ten.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from airflow_cdc.model import WindowState, format_ts

DEFAULT_STALL_SECONDS = 600
# Open windows whose gate is asked why it is closed, newest first, per read: each answer reads
# the window's whole plan (thousands of partitions on a wide stream). The newest is the one
# the stream's current DAG run waits on.
GATE_REASONS = 1
# Windows whose gate has not opened: the view and `status` show them before complete ones.
OPEN_STATES = (
    WindowState.PLANNED,
    WindowState.EXTRACTED,
    WindowState.COMMITTED,
    WindowState.APPLIED,
    WindowState.FAILED,
)
_UNCOMMITTED = (WindowState.PLANNED, WindowState.EXTRACTED, WindowState.FAILED)


def duration_text(seconds: float | None) -> str:
    """``1h02m03s`` style (days from 48 hours on); ``-`` for None."""
    if seconds is None:
        return "-"
    seconds = int(max(0, seconds))
    days, rest = divmod(seconds, 86400)
    if days >= 2:
        return f"{days}d{rest // 3600:02d}h"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def window_lag(record) -> float:
    """Seconds the window's low watermark trails its end (from its start until it commits)."""
    reached = record.low_watermark or record.start
    if record.state in _UNCOMMITTED:
        reached = record.start
    return max(0.0, (record.end - reached).total_seconds())


def completion_delay(record) -> float | None:
    """Seconds from the window's end until it became COMPLETE; None while it is not."""
    if record.state is not WindowState.COMPLETE:
        return None
    return max(0.0, (record.updated_at - record.end).total_seconds())


def run_of(record) -> tuple[str, str] | None:
    """(dag_id, run_id) of the DAG run that holds or last held the window (its lease owner)."""
    owner = record.lease_owner or ""
    if "/" not in owner:
        return None
    dag_id, run_id = owner.split("/", 1)
    return (dag_id, run_id) if dag_id and run_id else None


@dataclass(frozen=True)
class StreamHealth:
    """One stream at a glance: the row of the view's stream table and of ``status``."""

    stream_id: str
    source_kind: str
    state: str  # new | ok | running | waiting | failed
    windows: int
    windows_by_state: dict
    newest: object | None  # WindowRecord
    last_complete: object | None  # WindowRecord
    freshness_seconds: float | None
    lag_seconds: float | None
    live_partitions: int
    lagging_partitions: int
    behind: datetime | None  # the end of the newest committed window: lagging is before it
    oldest_unplanned: datetime | None = None  # the newest window's end
    backlog_seconds: float | None = None
    intervals_behind: int | None = None
    newest_covers: int = 0  # intervals of later runs the newest window read (catch-up)


def stream_health(store, stream, now: datetime) -> StreamHealth:
    """The health of ``stream`` (a StreamRecord) at ``now``, in five bounded queries."""
    from airflow_cdc.state.records import COMMITTED_OR_LATER

    by_state = store.window_state_counts(stream.stream_id)
    newest = next(iter(store.newest_windows(stream.stream_id, 1)), None)
    complete = store.newest_windows(stream.stream_id, 1, states=[WindowState.COMPLETE])
    last_complete = complete[0] if complete else None
    committed = store.newest_windows(stream.stream_id, 1, states=COMMITTED_OR_LATER)
    behind = committed[0].end if committed else None
    live, lagging = store.count_live_partitions(stream.stream_id, behind)
    covered = store.covered_intervals(stream.stream_id, newest.start) if newest else []
    if newest is None:
        state = "new"
    elif newest.state is WindowState.FAILED:
        state = "failed"
    elif newest.state is WindowState.COMPLETE:
        state = "ok"
    elif newest.state is WindowState.APPLIED and lagging:
        state = "waiting"
    else:
        state = "running"
    return StreamHealth(
        stream_id=stream.stream_id,
        source_kind=stream.source_kind,
        state=state,
        windows=sum(by_state.values()),
        windows_by_state={s.value: n for s, n in sorted(by_state.items(), key=lambda kv: kv[0].value)},
        newest=newest,
        last_complete=last_complete,
        freshness_seconds=(
            max(0.0, (now - last_complete.end).total_seconds()) if last_complete else None
        ),
        lag_seconds=window_lag(newest) if newest else None,
        live_partitions=live,
        lagging_partitions=lagging,
        behind=behind,
        **backlog(newest, covered, now),
    )


def backlog(newest, covered, now: datetime) -> dict:
    """The backlog fields of :class:`StreamHealth` from the newest window and the intervals of
    later runs it covered (recorded so far). The interval is the newest window's first: up to
    its first covered interval when it is a catch-up window whose later runs ran, else the
    window itself."""
    if newest is None:
        return {}
    first = covered[0].start if covered else newest.end
    interval = (first - newest.start).total_seconds()
    seconds = max(0.0, (now - newest.end).total_seconds())
    return {
        "oldest_unplanned": newest.end,
        "backlog_seconds": seconds,
        "intervals_behind": int(seconds // interval) if interval > 0 else None,
        "newest_covers": len(covered),
    }


@dataclass(frozen=True)
class PartitionHealth:
    """A live partition and how far behind it is."""

    partition_id: str
    state: str
    watermark: datetime
    since: datetime  # when its watermark last moved
    lag_seconds: float  # now minus its watermark
    lagging: bool  # its watermark is before the newest committed window's end
    stalled: bool  # lagging, and its watermark has not moved for stall_seconds


def partition_health(
    store,
    stream_id: str,
    now: datetime,
    limit: int,
    behind: datetime | None = None,
    stall_seconds: float = DEFAULT_STALL_SECONDS,
) -> list[PartitionHealth]:
    """At most ``limit`` live partitions, the ones holding the stream back first: stalled,
    then lowest watermark (the lowest watermarks are read first, so lagging ones always are)."""
    rows = []
    for p in store.lowest_live_partitions(stream_id, limit):
        lagging = behind is not None and p.watermark < behind
        rows.append(
            PartitionHealth(
                partition_id=p.partition_id,
                state=p.state.value,
                watermark=p.watermark,
                since=p.watermark_since,
                lag_seconds=max(0.0, (now - p.watermark).total_seconds()),
                lagging=lagging,
                stalled=lagging and (now - p.watermark_since).total_seconds() >= stall_seconds,
            )
        )
    rows.sort(key=lambda r: (not r.stalled, r.watermark, r.partition_id))
    return rows


@dataclass(frozen=True)
class WindowHealth:
    """One window as the view and the charts show it."""

    record: object  # WindowRecord
    lag_seconds: float
    delay_seconds: float | None
    changes: int | None
    dead_letters: int
    step_seconds: dict = field(default_factory=dict)  # step -> seconds, in protocol order
    gate_reason: str | None = None  # why the gate is still closed (open windows only)
    run: tuple[str, str] | None = None  # (dag_id, run_id)


def window_health(
    store,
    stream_id: str,
    limit: int,
    before: datetime | None = None,
    gate_reasons: int = GATE_REASONS,
    open_first: bool = False,
    source_kind: str | None = None,
) -> list[WindowHealth]:
    """At most ``limit`` windows of the stream, newest first (before ``before`` if given), with
    their recorded step durations and, for windows whose gate has not opened, the reason.

    ``open_first``: windows whose gate has not opened come first, however old (at most
    ``limit`` of them), then the newest complete ones. ``gate_reasons``: how many of the open
    windows (newest first) get the gate's reason; ``source_kind`` gives it its source's rule
    (the base rule when None or unknown).
    """
    records = store.newest_windows(stream_id, limit, before=before)
    if open_first:
        still_open = store.newest_windows(stream_id, limit, states=OPEN_STATES, before=before)
        seen = {w.start for w in still_open}
        records = still_open + [w for w in records if w.start not in seen]
        records.sort(key=lambda w: (w.state is WindowState.COMPLETE, -w.start.timestamp()))
        records = records[:limit]
    return describe_windows(store, stream_id, records, gate_reasons, source_kind)


def gate_rule(source_kind: str | None):
    """The gate's rule of the source kind; the base rule when it is unknown here."""
    from airflow_cdc.sources.base import ChangeSource
    from airflow_cdc.sources.registry import source_covers

    try:
        return source_covers(source_kind)
    except Exception:  # noqa: BLE001 - a kind this install lacks: show the base rule's reason
        return ChangeSource.covers


def describe_windows(
    store, stream_id: str, records: Iterable, gate_reasons: int = GATE_REASONS,
    source_kind: str | None = None,
) -> list[WindowHealth]:
    """The WindowHealth of each record, with one query for all their steps; the newest
    ``gate_reasons`` open windows get the gate's reason, older open ones say where to ask."""
    from airflow_cdc.pipeline.protocol import gate_status
    from airflow_cdc.state.steps import STEPS

    records = list(records)
    covers = gate_rule(source_kind) if gate_reasons else None
    asked = {w.start for w in sorted((w for w in records if w.state is not WindowState.COMPLETE),
                                     key=lambda w: w.start, reverse=True)[:gate_reasons]}
    steps = store.window_steps(stream_id, [w.start for w in records])
    described = []
    for record in records:
        recorded = steps.get(record.start, {})
        counts = record.counts or {}
        apply_step = recorded.get("apply")
        dead = int(counts.get("dead_letters") or 0) + int(
            (apply_step.details.get("dead_letter_rows") if apply_step else 0) or 0
        )
        reason = None
        if record.start in asked:
            reason = gate_status(store, record.window, covers).reason
        elif gate_reasons and record.state is not WindowState.COMPLETE:
            reason = (f"not asked here (only the newest open window is): "
                      f"airflow-cdc inspect-window {stream_id} {format_ts(record.start)} shows it")
        described.append(
            WindowHealth(
                record=record,
                lag_seconds=window_lag(record),
                delay_seconds=completion_delay(record),
                changes=counts.get("changes"),
                dead_letters=dead,
                step_seconds={s: recorded[s].seconds for s in STEPS if s in recorded},
                gate_reason=reason,
                run=run_of(record),
            )
        )
    return described
