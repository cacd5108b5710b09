"""The rows ``airflow-cdc status`` shows for a Debezium incremental snapshot are the rows read
over the whole snapshot (issue 64): READ rows a window took before any notification named
their signal count toward that signal's snapshot, and the connector's ``total_rows_scanned``
(counted since its last start) never stands in for them."""

from __future__ import annotations

from airflow_cdc.sources.debezium.progress import (
    WindowSnapshotProgress,
    describe,
    join_window_counts,
    parse_notification,
    stream_snapshot_state,
    table_rows_count,
)
from tests.debezium.test_snapshot_progress import W2, at, in_progress, notification


def window(lines=(), rows: int = 0) -> dict:
    """One window's progress counts: its notification lines and its READ rows of public.orders."""
    counts = WindowSnapshotProgress.of_notifications([parse_notification(line) for line in lines]).to_counts()
    if rows:
        counts[table_rows_count("public.orders")] = rows
    return join_window_counts(counts)


def scan_completed(when, total_rows_scanned: int) -> str:
    return notification("TABLE_SCAN_COMPLETED", when, scanned_collection="public.orders",
                        total_rows_scanned=str(total_rows_scanned), status="SUCCEEDED",
                        data_collections="public.orders")


def test_read_rows_of_a_window_before_the_first_notification_count_toward_the_snapshot():
    rows_first = window(rows=120)
    notifications_next = window([notification("STARTED", at(1, W2), data_collections="public.orders"),
                                 in_progress(at(2, W2), "2"), in_progress(at(3, W2), "4"),
                                 scan_completed(at(4, W2), 120), notification("COMPLETED", at(5, W2))])

    entry = stream_snapshot_state([rows_first, notifications_next])["public.orders"]

    assert (entry.status, entry.signal_id, entry.rows, entry.chunks) == ("completed", "sig-1", 120, 2)
    assert describe(entry).startswith("completed, signal sig-1, 120 rows in 2 chunk(s), key 4 of 4")


def test_after_a_capture_restart_the_rows_shown_are_those_read_over_the_whole_snapshot():
    before_restart = window([notification("STARTED", at(1), data_collections="public.orders"),
                             in_progress(at(2), "2")], rows=2)
    # The restarted connector's scan counter starts again at zero: it counted 2 of the 4 rows.
    after_restart = window([in_progress(at(2, W2), "4"), scan_completed(at(3, W2), 2),
                            notification("COMPLETED", at(4, W2))], rows=2)

    entry = stream_snapshot_state([before_restart, after_restart])["public.orders"]
    shown = describe(entry)

    assert entry.rows == 4
    assert "4 rows in 2 chunk(s)" in shown and "2 rows scanned" not in shown
    assert "the connector counted 2 since its last start" in shown


def test_a_new_signal_after_a_completed_snapshot_starts_its_rows_afresh():
    first = window([notification("STARTED", at(1), data_collections="public.orders"),
                    in_progress(at(2), "4"), notification("COMPLETED", at(3))], rows=4)
    second = window([notification("STARTED", at(1, W2), signal_id="sig-2", data_collections="public.orders"),
                     in_progress(at(2, W2), "4", signal_id="sig-2")], rows=3)

    entry = stream_snapshot_state([first, second])["public.orders"]

    assert (entry.signal_id, entry.rows, entry.chunks) == ("sig-2", 3, 1)
