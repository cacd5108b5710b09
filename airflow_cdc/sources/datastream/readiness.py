"""When a Datastream window can be planned: once the evidence that completes it has landed.

A window ``[s, e)`` is complete once an event read at or after ``e + allowed_lateness`` was
read (:mod:`.progress`). The DAG run for the window starts at ``e``, when no such event can
exist yet; planning then would consume only the files present at ``e`` and leave the gate
waiting for evidence the window never reads. So planning waits until:

1. ``e + allowed_lateness + settle_seconds`` has passed: the earliest instant a *settled*
   file (unchanged for ``settle_seconds``) can hold an event read at ``e + allowed_lateness``;
2. and then either the stream's progress already covers ``e`` (an earlier window read such
   an event), or a settled file not consumed yet holds one (read from the newest files
   first: an object cannot hold an event read after it was last written, so only files
   updated at or after ``e + allowed_lateness`` can hold the evidence), or the idle timeout
   has passed (``e + idle_timeout``: the window is then declared idle by the extract job if
   it reads no events).

Airflow-free: the caller lists the files and reads them (GCS hook or local folder).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from airflow_cdc.model import Readiness, Window, format_ts
from airflow_cdc.sources.datastream.discovery import EventFile, settled_files
from airflow_cdc.sources.datastream.events import MalformedEventError, parse_event_time

# An object's update time and Datastream's read_timestamp come from different clocks.
CLOCK_SLACK = timedelta(seconds=30)


def newest_read_timestamp(content: bytes, file_format: str, enough: datetime | None = None):
    """The newest ``read_timestamp`` of a Datastream file's events (None if it has none).

    Stops early at the first event read at or after ``enough``. Lines or records that are
    not events are skipped here: the extract job dead-letters them.
    """
    newest = None
    for value in _read_timestamps(content, file_format):
        try:
            read = parse_event_time("read_timestamp", value)
        except MalformedEventError:
            continue
        if newest is None or read > newest:
            newest = read
        if enough is not None and newest >= enough:
            break
    return newest


def _read_timestamps(content: bytes, file_format: str) -> Iterable[object]:
    if file_format == "avro":
        import fastavro

        try:
            for record in fastavro.reader(io.BytesIO(content)):
                if isinstance(record, dict):
                    yield record.get("read_timestamp")
        except Exception:  # noqa: BLE001 - an unreadable file is the extract's dead letter
            return
        return
    for line in content.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            yield event.get("read_timestamp")


class WindowEvidence:
    """Decides whether a window's evidence has landed; remembers files it has already read.

    ``read_file(event_file) -> bytes``; the memory (path and update time -> newest read
    timestamp) makes polling cheap: a file is downloaded once unless it changes.
    """

    def __init__(self, read_file: Callable[[EventFile], bytes]) -> None:
        self.read_file = read_file
        self._newest: dict[tuple[str, datetime], datetime | None] = {}

    def readiness(
        self,
        window: Window,
        now: datetime,
        list_files: Callable[[], list[EventFile]],
        consumed: set[str],
        progress_watermark: datetime | None,
        allowed_lateness: timedelta,
        settle_seconds: float,
        idle_timeout: timedelta | None = None,
    ) -> Readiness:
        """Whether ``window`` may be planned at ``now`` (``list_files`` lists the prefix).

        ``consumed`` are the stream's known partition ids (files read by earlier windows),
        ``progress_watermark`` the stream's read progress (the progress partition's watermark).
        """
        needed = window.end + allowed_lateness
        earliest = needed + timedelta(seconds=settle_seconds)
        if now < earliest:
            return Readiness(
                False,
                f"no settled file can hold an event read at or after {format_ts(needed)} "
                f"(window end + allowed lateness) before {format_ts(earliest)}",
                retry_at=earliest,
            )
        if progress_watermark is not None and progress_watermark >= window.end:
            return Readiness(True, f"the stream's read progress is at {format_ts(progress_watermark)}")
        candidates = [
            f for f in settled_files(list_files(), now, settle_seconds)
            if f.path not in consumed and f.updated >= needed - CLOCK_SLACK
        ]
        newest_seen = None
        for file in sorted(candidates, key=lambda f: (f.updated, f.path), reverse=True):
            key = (file.path, file.updated)
            if key not in self._newest:
                self._newest[key] = newest_read_timestamp(
                    self.read_file(file), file.file_format or "json", enough=needed
                )
            newest = self._newest[key]
            if newest is not None and newest >= needed:
                return Readiness(True, f"{file.path} holds an event read at {format_ts(newest)}")
            if newest is not None and (newest_seen is None or newest > newest_seen):
                newest_seen = newest
        if idle_timeout is not None and now >= window.end + idle_timeout:
            return Readiness(
                True, f"the idle timeout passed at {format_ts(window.end + idle_timeout)}"
            )
        seen = f"newest event read in a new file: {format_ts(newest_seen)}" if newest_seen else (
            "no new settled file holds an event")
        return Readiness(
            False,
            f"waiting for an event read at or after {format_ts(needed)} (window end + allowed "
            f"lateness) in a settled file; {seen}",
        )
