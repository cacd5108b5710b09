"""Step 0 for Datastream: a window is planned once the evidence that completes it has landed."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from airflow_cdc.sources.datastream.discovery import list_local_files
from airflow_cdc.sources.datastream.readiness import WindowEvidence, newest_read_timestamp
from airflow_cdc.sources.datastream.writer import write_avro_events, write_json_events

from .support import mysql, postgres, window

LATENESS = timedelta(minutes=5)
SETTLE = 60.0
WIN = window(0)  # [T0, T0 + 30 min)
NEEDED = WIN.end + LATENESS


def land(path: Path, events: list[dict], updated, avro: bool = False) -> Path:
    (write_avro_events if avro else write_json_events)(path, events)
    os.utime(path, (updated.timestamp(), updated.timestamp()))
    return path


def evidence_read(reads: list[str]) -> WindowEvidence:
    def read_file(event_file):
        reads.append(event_file.path)
        return Path(event_file.path).read_bytes()

    return WindowEvidence(read_file)


def readiness(folder: Path, now, *, consumed=(), progress=None, idle=None, reads=None,
              evidence=None):
    evidence = evidence or evidence_read(reads if reads is not None else [])
    return evidence.readiness(
        WIN, now, lambda: list_local_files(str(folder)), set(consumed), progress, LATENESS,
        SETTLE, idle,
    )


def test_a_window_waits_until_evidence_in_a_settled_file_can_exist(tmp_path):
    early = WIN.end + timedelta(minutes=2)
    status = readiness(tmp_path, early)
    assert not status.ready
    assert status.retry_at == NEEDED + timedelta(seconds=SETTLE)


def test_a_settled_new_file_with_an_event_read_after_end_plus_lateness_makes_it_ready(tmp_path):
    read = NEEDED + timedelta(seconds=3)
    land(tmp_path / "a.jsonl", [mysql({"id": 1}, read=read)], read + timedelta(seconds=5))
    status = readiness(tmp_path, read + timedelta(minutes=2))
    assert status.ready
    assert "a.jsonl holds an event read at" in status.reason


def test_files_holding_only_events_read_before_end_plus_lateness_keep_it_waiting(tmp_path):
    read = NEEDED - timedelta(seconds=10)
    land(tmp_path / "a.jsonl", [mysql({"id": 1}, read=read)], NEEDED + timedelta(seconds=1))
    status = readiness(tmp_path, NEEDED + timedelta(minutes=3))
    assert not status.ready
    assert "newest event read in a new file" in status.reason


def test_an_unsettled_file_is_no_evidence_yet(tmp_path):
    read = NEEDED + timedelta(seconds=3)
    now = NEEDED + timedelta(minutes=3)
    land(tmp_path / "a.jsonl", [mysql({"id": 1}, read=read)], now - timedelta(seconds=10))
    assert not readiness(tmp_path, now).ready


def test_a_consumed_file_is_not_read_again_but_the_streams_progress_counts(tmp_path):
    read = NEEDED + timedelta(seconds=3)
    path = land(tmp_path / "a.jsonl", [mysql({"id": 1}, read=read)], read)
    now = NEEDED + timedelta(minutes=3)
    assert not readiness(tmp_path, now, consumed=[str(path)]).ready
    assert readiness(tmp_path, now, consumed=[str(path)], progress=WIN.end).ready


def test_the_idle_timeout_makes_a_window_without_evidence_ready(tmp_path):
    now = WIN.end + timedelta(minutes=20)
    assert not readiness(tmp_path, now, idle=timedelta(minutes=30)).ready
    status = readiness(tmp_path, now, idle=timedelta(minutes=15))
    assert status.ready and "idle timeout" in status.reason


def test_an_avro_file_is_evidence_too(tmp_path):
    read = NEEDED + timedelta(seconds=3)
    land(tmp_path / "c.avro", [postgres({"id": 1, "name": "a"}, read=read)], read, avro=True)
    assert readiness(tmp_path, read + timedelta(minutes=2)).ready


def test_polling_downloads_each_unchanged_file_once(tmp_path):
    land(tmp_path / "a.jsonl", [mysql({"id": 1}, read=NEEDED - timedelta(seconds=1))], NEEDED)
    reads: list[str] = []
    evidence = evidence_read(reads)
    for minutes in (3, 4, 5):
        readiness(tmp_path, NEEDED + timedelta(minutes=minutes), evidence=evidence)
    assert len(reads) == 1


def test_newest_read_timestamp_skips_lines_that_are_not_events():
    content = b'not json\n{"read_timestamp": "2030-01-01T00:40:00.000Z"}\n[1]\n{"read_timestamp": 5}\n'
    newest = newest_read_timestamp(content, "json")
    assert newest.isoformat() == "2030-01-01T00:40:00+00:00"


def test_a_catchup_window_reaches_the_last_interval_whose_evidence_past_lateness_landed(tmp_path):
    from airflow_cdc.model import Window
    from airflow_cdc.pipeline.catchup import catchup_window

    length = WIN.end - WIN.start
    read = WIN.end + 2 * length + LATENESS + timedelta(seconds=3)  # covers two more intervals
    land(tmp_path / "a.jsonl", [mysql({"id": 1}, read=read)], read + timedelta(seconds=5))
    now = read + 10 * length
    evidence = evidence_read([])

    def ready(span: Window) -> bool:
        return evidence.readiness(span, now, lambda: list_local_files(str(tmp_path)), set(),
                                  None, LATENESS, SETTLE).ready

    ends = [WIN.end + k * length for k in range(1, 6)]
    assert catchup_window(WIN, ends, ready) == Window(WIN.stream_id, WIN.start, WIN.end + 2 * length)
