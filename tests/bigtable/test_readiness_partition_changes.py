"""Readiness of a window planned after the table's partitions split or merged.

The evidence for a window ``[s, e)`` is the low watermark at ``e`` of every partition live at
``e``. Partitions born after ``e`` cannot give it (their stream starts after ``e``): the probe
follows the close they answer with (the partitions live at ``e``, with tokens) and the closes
of those partitions in turn (their children, with tokens), so a catch-up across a split or a
merge, and a split landing between a window's end and its plan, do not wait forever.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc_emulators.bigtable import BigtableEmulator, generate_history
from airflow_cdc_emulators.bigtable.timeline import to_datetime
from airflow_cdc.model import Window
from airflow_cdc.sources.registry import build_source, source_spec

START = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
WINDOW = timedelta(minutes=15)
STREAM = "events"


@pytest.fixture(scope="module")
def history():
    return generate_history(seed=7, start=START, hours=1.0, commits_per_second=0.5)


@pytest.fixture(scope="module")
def emulator(history):
    with BigtableEmulator(history, now=START + timedelta(hours=1)) as running:
        yield running


def source_for(emulator, evidence_delay_seconds=1):
    spec = source_spec("bigtable_change_stream", STREAM, {
        "project": "demo-project", "instance": "demo-instance", "table": "events",
        "app_profile": "default",
        "settings": {"heartbeat_seconds": 0.2, "probe_seconds": 5,
                     "evidence_delay_seconds": evidence_delay_seconds},
    })
    spec["connection"] = {"emulator_host": emulator.emulator_host}
    return build_source(spec)


def events_between(history, kind, start, end):
    low, high = int(start.timestamp() * 1e6), int(end.timestamp() * 1e6)
    return [e for e in history.timeline.events if e.kind == kind and low <= e.at_us < high]


def test_a_window_planned_an_hour_after_its_end_across_a_split_and_a_merge_is_ready(
        emulator, history):
    window = Window(STREAM, START, START + WINDOW)
    planned = window.end + timedelta(hours=1)
    assert events_between(history, "split", window.end, planned)
    assert events_between(history, "merge", window.end, planned)
    born_after_end = [p for p in history.partitions_live_at(planned)
                      if p not in history.partitions_live_at(window.end)]
    assert born_after_end
    emulator.set_now(planned)

    status = source_for(emulator).readiness(window, planned, [], None)

    assert status.ready, status.reason


# (kind, which of the hour's events of that kind): the last split; the last merge; the first
# merge (three parents), where one parent's watermark passes the end before its close.
CHANGES = {"split": ("split", -1), "merge": ("merge", -1),
           "merge-after-a-parent-passed-the-end": ("merge", 0)}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_window_whose_end_precedes_a_split_or_merge_by_a_second_is_ready_after_it(
        emulator, history, change):
    kind, index = CHANGES[change]
    event = [e for e in history.timeline.events if e.kind == kind][index]
    born = to_datetime(event.at_us)
    end = born.replace(microsecond=0) - timedelta(seconds=1)
    window = Window(STREAM, max(START, end - WINDOW), end)
    planned = born + timedelta(seconds=4)
    emulator.set_now(planned)

    status = source_for(emulator).readiness(window, planned, [], None)

    assert status.ready, status.reason


@pytest.mark.live  # a real clock: the split lands seconds after a window's end, in wall time
def test_under_a_real_clock_a_split_between_window_end_and_plan_does_not_block_the_window(
        history):
    """The probe asked as the plan task's trigger asks it: first at the window end plus the
    evidence delay, then again at each answer's ``retry_at``, on the wall clock."""
    import time

    split = [e for e in history.timeline.events if e.kind == "split"][-1]
    offset = timedelta(microseconds=split.at_us) - timedelta(microseconds=history.start_us)
    end = (datetime.now(timezone.utc) + timedelta(seconds=12)).replace(microsecond=0)
    # The same seeded history, started so that its last split lands 1.5 s after the end.
    live = generate_history(seed=7, start=end + timedelta(seconds=1.5) - offset, hours=1.0,
                            commits_per_second=0.5)
    window = Window(STREAM, end - timedelta(minutes=1), end)
    live_split = to_datetime([e for e in live.timeline.events if e.kind == "split"][-1].at_us)
    with BigtableEmulator(live) as running:  # its clock is the wall clock
        source = source_for(running, evidence_delay_seconds=4)
        assert end < live_split < end + source.evidence_delay()
        asked = window.end + source.evidence_delay()
        status = None
        while datetime.now(timezone.utc) < window.end + timedelta(seconds=40):
            time.sleep(max(0.0, (asked - datetime.now(timezone.utc)).total_seconds()))
            status = source.readiness(window, datetime.now(timezone.utc), [], None)
            if status.ready:
                break
            asked = status.retry_at

    assert status is not None and status.ready, status and status.reason


def test_a_window_ending_after_the_tables_clock_is_not_ready_whatever_the_workers_clock(
        emulator):
    window = Window(STREAM, START + timedelta(minutes=45), START + timedelta(hours=2))

    status = source_for(emulator).readiness(window, window.end + timedelta(hours=1), [], None)

    assert not status.ready
    assert "behind" in status.reason
