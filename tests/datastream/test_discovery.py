"""Which files a window consumes: never by time, always the not-yet-consumed settled ones."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_cdc.model import PartitionOutcome, format_ts
from airflow_cdc.pipeline.files import WindowOutcomeFile, write_private
from airflow_cdc.pipeline.protocol import StreamConfig
from airflow_cdc.sources.datastream import PROGRESS_PARTITION
from airflow_cdc.sources.datastream.discovery import (
    EventFile,
    file_partitions,
    list_local_files,
    settled_files,
)
from airflow_cdc.pipeline.protocol import commit_window, plan_window
from airflow_cdc.sources.datastream.plan import plan_options
from airflow_cdc.sources.datastream.source import DatastreamSource


def initial_positions(win):
    return DatastreamSource({"prefix": "/x"}).initial_positions(win)
from airflow_cdc.state import StateStore

from .support import at, window

LATENESS = timedelta(minutes=5)


@pytest.fixture
def store(tmp_path):
    with StateStore(f"sqlite:///{tmp_path / 'state.db'}") as opened:
        opened.migrate()
        yield opened


@pytest.fixture
def config(tmp_path):
    return StreamConfig("shop", "datastream", {"kind": "datastream", "prefix": "/x"},
                        work_root=str(tmp_path / "work"))


def listed(*names: str) -> list[EventFile]:
    return [EventFile(f"/landing/{n}", 10, at(0)) for n in names]


def plan(store, config, index, files, owner="run"):
    win = window(index)
    return plan_window(
        store, config, win, f"{owner}-{index}", 600, initial_positions(win), "lake",
        new_partitions=file_partitions(files, win.start),
        plan_options=lambda kept, _positions: plan_options(
            kept, planned_at=win.end, allowed_lateness=LATENESS, idle_timeout=None,
        ),
    )


def finish(store, config, index, plan_file, owner="run"):
    """Extract and commit the window as the job would: every file finished."""
    outcomes = [
        PartitionOutcome(p.partition_id, finished=p.partition_id != PROGRESS_PARTITION,
                         watermark=p.start)
        for p in plan_file.positions
    ]
    write_private(config.outcome_path(window(index)),
                  WindowOutcomeFile(window(index).window_id, tuple(outcomes), (), {"events": 1}).to_json())
    store.mark_extracted(window(index), f"{owner}-{index}", index + 1)
    return commit_window(store, config, window(index), f"{owner}-{index}")


def files_of(plan_file) -> list[str]:
    return [p.partition_id for p in plan_file.positions if p.partition_id != PROGRESS_PARTITION]


def test_late_file_is_consumed_by_the_next_window(store, config):
    first = plan(store, config, 0, listed("a.jsonl"))
    finish(store, config, 0, first)

    second = plan(store, config, 1, listed("a.jsonl", "late-for-window-0.avro", "b.jsonl"))

    assert files_of(second) == ["/landing/b.jsonl", "/landing/late-for-window-0.avro"]


def test_rerun_of_a_window_consumes_exactly_the_same_files(store, config):
    first = plan(store, config, 0, listed("a.jsonl"))

    again = plan(store, config, 0, listed("a.jsonl", "arrived-since.jsonl"))

    assert files_of(again) == files_of(first) == ["/landing/a.jsonl"]


def test_committed_window_records_its_files_as_finished_partitions(store, config):
    finish(store, config, 0, plan(store, config, 0, listed("a.jsonl", "b.avro")))

    consumed = {wp.partition_id: wp.finished for wp in store.window_partitions(window(0))}

    assert consumed == {"/landing/a.jsonl": True, "/landing/b.avro": True, PROGRESS_PARTITION: False}


def test_window_counts_keep_datastream_counts(store, config):
    record = finish(store, config, 0, plan(store, config, 0, listed("a.jsonl")))

    assert record.counts["events"] == 1


def test_replan_keeps_the_first_plans_instant_and_primary_keys(store, config):
    def plan_at(minutes, keys):
        win = window(0)
        return plan_window(
            store, config, win, "run-0", 600, initial_positions(win), "lake",
            plan_options=lambda kept, _positions: plan_options(
                kept, planned_at=at(minutes), allowed_lateness=LATENESS, idle_timeout=None,
                source_primary_keys=lambda: keys,
            ),
        )

    first = plan_at(40, {"shop.orders": ("id",)})
    again = plan_at(50, {"shop.orders": ("other",)})

    assert again.options == first.options
    assert again.options["planned_at"] == format_ts(at(40))
    assert again.options["source_primary_keys"] == {"shop.orders": ["id"]}


def test_a_window_past_planned_returns_its_recorded_plan_file(store, config):
    first = plan(store, config, 0, listed("a.jsonl"))
    store.mark_extracted(window(0), "run-0", 1)

    again = plan(store, config, 0, listed("a.jsonl", "b.jsonl"))

    assert again == first


def test_files_newer_than_the_settle_time_wait_for_the_next_window():
    files = [EventFile("/l/old.jsonl", 5, at(0)), EventFile("/l/new.jsonl", 5, at(9.5))]

    assert [f.path for f in settled_files(files, at(10), settle_seconds=60)] == ["/l/old.jsonl"]


def test_local_listing_finds_event_files_at_any_depth_and_nothing_else(tmp_path):
    for name in ("t/2030/01/a.jsonl", "t/2030/02/b.avro", "t/notes.txt", "t/.hidden.jsonl"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}\n")

    found = [(f.path, f.file_format) for f in list_local_files(str(tmp_path / "t"))]

    assert found == [(str(tmp_path / "t/2030/01/a.jsonl"), "json"),
                     (str(tmp_path / "t/2030/02/b.avro"), "avro")]


def test_missing_local_prefix_is_refused_naming_it():
    with pytest.raises(ValueError, match="'/no/such/prefix' is not a folder"):
        list_local_files("/no/such/prefix")
