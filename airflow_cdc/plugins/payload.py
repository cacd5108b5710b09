"""What the CDC view's API returns: JSON-ready dicts of streams, windows and partitions.

Only what an operator of the pipeline needs to see: states, times, counts, durations, the DAG
run of a window. Never a secret: the state store's URL is shown without its password, and
partitions' resume positions (Spanner tokens, Bigtable continuation tokens) are left out.
Instants are ISO-8601 UTC text (``2024-05-01T10:00:00.000000Z``), durations seconds.
"""

from __future__ import annotations

from datetime import datetime

from airflow_cdc.model import format_ts
from airflow_cdc.pipeline.stream_health import duration_text


def _ts(value: datetime | None) -> str | None:
    return format_ts(value) if value is not None else None


def _run(run: tuple[str, str] | None) -> dict | None:
    return {"dag_id": run[0], "run_id": run[1]} if run else None


def lease_payload(record, now: datetime) -> dict | None:
    """Who holds an open window and until when (:meth:`~airflow_cdc.state.records.WindowRecord.
    lease_at`): while ``live``, no other run may plan the window and the stream's next window
    waits for it; an expired lease is taken over by the window's next plan. None once no step
    of the window needs a lease (applied, complete, failed)."""
    lease = record.lease_at(now) if record is not None else None
    if lease is None:
        return None
    return {
        "owner": lease.owner,
        "run": _run(lease.dag_run),
        "expires_at": _ts(lease.expires_at),
        "live": lease.live,
        "expires_in_seconds": (lease.expires_at - now).total_seconds(),
    }


def window_brief(record) -> dict | None:
    if record is None:
        return None
    return {
        "start": _ts(record.start),
        "end": _ts(record.end),
        "state": record.state.value,
        "low_watermark": _ts(record.low_watermark),
    }


def stream_payload(health, now: datetime) -> dict:
    """A row of the streams table; ``lease`` is the newest window's (see :func:`lease_payload`)."""
    return {
        "stream_id": health.stream_id,
        "source_kind": health.source_kind,
        "state": health.state,
        "windows": health.windows,
        "windows_by_state": dict(health.windows_by_state),
        "newest_window": window_brief(health.newest),
        "lease": lease_payload(health.newest, now),
        "last_complete_window": window_brief(health.last_complete),
        "freshness_seconds": health.freshness_seconds,
        "freshness": duration_text(health.freshness_seconds),
        "lag_seconds": health.lag_seconds,
        "lag": duration_text(health.lag_seconds),
        "live_partitions": health.live_partitions,
        "lagging_partitions": health.lagging_partitions,
        "backlog_seconds": health.backlog_seconds,
        "backlog": duration_text(health.backlog_seconds),
        "intervals_behind": health.intervals_behind,
        "oldest_unplanned": format_ts(health.oldest_unplanned) if health.oldest_unplanned else None,
        "newest_covers": health.newest_covers,
    }


def covered_by_window(covered) -> dict[datetime, list]:
    """Covered-interval records grouped by the start of the window that read them."""
    grouped: dict[datetime, list] = {}
    for interval in covered:
        grouped.setdefault(interval.window_start, []).append(interval)
    return grouped


def window_payload(window, now: datetime, covered=()) -> dict:
    """A row of a stream's windows table. ``covered``: the intervals of later DAG runs this
    (catch-up) window read, as their runs recorded them (a run not yet past its plan has no
    record yet)."""
    record = window.record
    return {
        "covered_intervals": [{"start": _ts(c.start), "end": _ts(c.end),
                               "recorded_at": _ts(c.recorded_at)} for c in covered],
        **window_brief(record),
        "attempt": record.attempt,
        "changes": window.changes,
        "dead_letters": window.dead_letters,
        "partitions": (record.counts or {}).get("partitions"),
        "lag_seconds": window.lag_seconds,
        "lag": duration_text(window.lag_seconds),
        "delay_seconds": window.delay_seconds,
        "delay": duration_text(window.delay_seconds),
        "step_seconds": dict(window.step_seconds),
        "gate_reason": window.gate_reason,
        "failure_reason": record.failure_reason,
        "completeness_note": record.completeness_note,
        "run": _run(window.run),
        "lease": lease_payload(record, now),
    }


def partition_payload(partition) -> dict:
    """A row of a stream's partitions table (no resume position: it may be a token)."""
    return {
        "partition_id": partition.partition_id,
        "state": partition.state,
        "watermark": _ts(partition.watermark),
        "since": _ts(partition.since),
        "lag_seconds": partition.lag_seconds,
        "lag": duration_text(partition.lag_seconds),
        "lagging": partition.lagging,
        "stalled": partition.stalled,
    }
