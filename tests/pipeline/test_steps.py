"""The window protocol's Airflow-free steps, called the way the operators call them: the
first window's order, taking a window over, the Dataproc resume check, the secret hand-over,
and the extract's skip rule."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc.model import Window, WindowState
from airflow_cdc.pipeline.extract_step import extract_skip
from airflow_cdc.pipeline.plan_step import plan_or_take_over, previous_interval_wait
from airflow_cdc.pipeline.secret_handover import OVERRIDES_FILE, overrides_handover
from airflow_cdc.pipeline.step_errors import JobWaitError, StepFailure, check_resumed_job
from airflow_cdc.state.errors import WindowLeaseHeldError, WindowOrderError
from airflow_cdc.state.records import COMMITTED_OR_LATER

T = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
W = Window("orders", T, T + timedelta(minutes=10))


@dataclass
class Previous:
    run_id: str
    start: datetime
    end: datetime
    state: str | None


def test_a_first_window_waits_while_the_plan_of_the_interval_before_it_is_unfinished():
    previous = Previous("scheduled__1", T - timedelta(minutes=10), T, "running")

    assert "waits for the interval before it" in previous_interval_wait(W, "plan", previous)


def test_a_first_window_is_refused_when_the_plan_before_it_failed_naming_the_fix():
    previous = Previous("scheduled__1", T - timedelta(minutes=10), T, "failed")

    with pytest.raises(WindowOrderError, match="Clear 'plan' of 'scheduled__1'"):
        previous_interval_wait(W, "plan", previous)


@pytest.mark.parametrize("previous", [
    None,
    Previous("scheduled__1", T - timedelta(minutes=10), T, "success"),
    Previous("scheduled__1", T - timedelta(minutes=20), T - timedelta(minutes=10), "failed"),
])
def test_a_first_window_after_no_gap_is_planned(previous):
    assert previous_interval_wait(W, "plan", previous) is None


class Store:
    def __init__(self):
        self.released = []

    def release_lease(self, window, holder):
        self.released.append(holder)


def test_a_window_held_by_a_run_that_is_gone_is_taken_over():
    store, calls = Store(), []

    def plan():
        calls.append(1)
        if len(calls) == 1:
            raise WindowLeaseHeldError("held", holder="dag/old")
        return "planned"

    assert plan_or_take_over(store, W, plan, lambda holder: (True, "failed")) == "planned"
    assert store.released == ["dag/old"]


def test_a_window_held_by_a_running_run_stays_its_own_naming_what_airflow_said():
    def plan():
        raise WindowLeaseHeldError("held", holder="dag/live")

    with pytest.raises(WindowLeaseHeldError, match=r"held \(Airflow says that DAG run is running\)"):
        plan_or_take_over(Store(), W, plan, lambda h: (False, "Airflow says that DAG run is running"))


def test_a_resumed_task_takes_only_its_own_jobs_final_state():
    check_resumed_job({"status": "done"}, "cdc-extract-x", "job 1", "cdc-extract-x")
    with pytest.raises(StepFailure, match="clear the task"):
        check_resumed_job({"status": "done"}, "cdc-apply-x", "job 1", "cdc-extract-x")
    with pytest.raises(JobWaitError, match="lost"):
        check_resumed_job({"status": "error", "message": "lost"}, "j", "job 1", "j")


class Deferred(Exception):
    pass


def test_a_secret_file_is_kept_while_the_task_defers_and_deleted_when_it_resumes(tmp_path):
    secret = {"connection": {"access_token": "t"}}
    with pytest.raises(Deferred):
        with overrides_handover(secret, tmp_path, resumed=False, kept_on=(Deferred,)) as path:
            raise Deferred

    assert json.loads((tmp_path / OVERRIDES_FILE).read_text()) == secret
    with overrides_handover(secret, tmp_path, resumed=True, kept_on=(Deferred,)) as again:
        assert again == path
    assert not (tmp_path / OVERRIDES_FILE).exists()


def test_no_overrides_hand_over_nothing(tmp_path):
    with overrides_handover({}, tmp_path, resumed=False) as path:
        assert path is None
    assert list(tmp_path.iterdir()) == []


@dataclass
class Record:
    state: WindowState
    changelog_snapshot_id: int | None = None

    @property
    def committed(self):
        return self.state in COMMITTED_OR_LATER


class Windows:
    def __init__(self, record):
        self.record = record

    def get_window(self, stream_id, start):
        return self.record


def test_an_extract_skips_a_committed_window_and_one_proven_empty_but_reads_a_planned_one(tmp_path):
    assert extract_skip(Windows(Record(WindowState.COMMITTED, 7)), W, tmp_path).reason == "committed"
    assert extract_skip(Windows(Record(WindowState.EXTRACTED)), W, tmp_path) is None
    (tmp_path / "outcome.json").write_text("{}")
    assert extract_skip(Windows(Record(WindowState.EXTRACTED)), W, tmp_path).reason == "proven-empty"
    assert extract_skip(Windows(Record(WindowState.EXTRACTED, 7)), W, tmp_path) is None
    assert extract_skip(Windows(Record(WindowState.PLANNED)), W, tmp_path) is None
