"""When a Debezium window may be read: its heartbeat evidence is in the sink's files (seed 002).

Debezium's heartbeat topic (``heartbeat.interval.ms``) carries the evidence: a heartbeat at
``H`` means the connector had sent everything before ``H``; the sink flushes within its
rotation interval (``flush_lateness``), so everything before ``H - flush_lateness`` is in
files. A window ``[s, e)`` may be planned once a heartbeat at or after ``e + flush_lateness``
is in a file of the heartbeat topic-partition (:func:`heartbeat_readiness`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from airflow_cdc.model import Readiness, Window, format_ts
from airflow_cdc.sources.debezium.records import Heartbeat, parse_line
from airflow_cdc.sources.debezium.errors import MalformedEventError
from airflow_cdc.sources.debezium.layout import SinkListing, parse_partition_id, read_sink_file


def heartbeat_readiness(window: Window, now: datetime, flush_lateness: timedelta,
                        heartbeat_partition: str, newest: Callable[[], datetime | None]) -> Readiness:
    """Whether ``window`` may be planned at ``now`` (``newest()``: the newest heartbeat in the
    sink, asked only once one could prove the window)."""
    due = window.end + flush_lateness
    if now < due:
        return Readiness(False, f"no heartbeat can prove {format_ts(window.end)} before "
                                f"{format_ts(due)}", retry_at=due)
    found = newest()
    if found is not None and found >= due:
        return Readiness(True, f"heartbeat at {format_ts(found)} in the sink")
    seen = format_ts(found) if found else "none yet"
    return Readiness(False, f"topic-partition {heartbeat_partition} holds the evidence "
                            f"back: newest heartbeat {seen}, needed {format_ts(due)} (check "
                            f"heartbeat.interval.ms and the sink's rotation)")


def newest_heartbeat(listing: SinkListing, reader, heartbeat_partition: str) -> datetime | None:
    """The newest heartbeat in the newest file of the heartbeat topic-partition holding one."""
    topic, part = parse_partition_id(heartbeat_partition)
    for sink_file in reversed(listing.of(topic, part)):
        times = [beat.at for beat in heartbeats(read_sink_file(reader, sink_file))]
        if times:
            return max(times)
    return None


def heartbeats(lines):
    """The heartbeats among (offset, line) pairs of a heartbeat file. A line that is not one
    is no evidence; the extract sends it to the dead-letter table with the reason."""
    for _, line in lines:
        try:
            event = parse_line(line)
        except MalformedEventError:
            continue
        if isinstance(event, Heartbeat):
            yield event
