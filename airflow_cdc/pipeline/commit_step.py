"""Step 3 of the window protocol: record the extract's partition outcomes in one state-store
transaction (:func:`~airflow_cdc.pipeline.protocol.commit_window`), and what the commit
task reports of them."""

from __future__ import annotations

from airflow_cdc.model import Window, format_ts
from airflow_cdc.pipeline.protocol import StreamConfig, commit_window


def commit_step(store, config: StreamConfig, window: Window, owner: str, lease_seconds: float,
                log=None):
    """Commit the window (renewing the lease first) and log each partition's progress; the
    window's record."""
    record = commit_window(store, config, window, owner, lease_seconds)
    if log is not None:
        log_partition_progress(log, store, window)
    return record


def source_counts(source, record, window: Window, log=None) -> dict:
    """The source's own counts for the commit summary
    (:attr:`~airflow_cdc.sources.base.ChangeSource.summary_counts`); the source's warnings
    about the window's counts are logged."""
    counts = dict(record.counts or {})
    if log is not None:
        for warning in source.commit_warnings(counts):
            log.warning("window %s: %s", window.window_id, warning)
    return {k: counts.get(k) for k in source.summary_counts}


def log_partition_progress(log, store, window: Window) -> None:
    """One line per partition the window read: records, watermark, lag behind the window end."""
    rows = store.window_partitions(window)
    log.info("window %s read %d partition(s):", window.window_id, len(rows))
    for row in sorted(rows, key=lambda r: (r.watermark or r.start, r.partition_id)):
        watermark = row.watermark or row.start
        lag = max(0.0, (window.end - watermark).total_seconds())
        log.info(
            "  partition %s: %s records, watermark %s, lag %.3fs%s",
            row.partition_id[:48], row.records if row.records is not None else "?",
            format_ts(watermark), lag, ", finished" if row.finished else "",
        )
