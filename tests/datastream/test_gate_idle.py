"""The Datastream gate: the shared contract, plus a visible mark on idle-timeout windows."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import timedelta
from types import SimpleNamespace

import pytest

from airflow_cdc.model import PartitionOutcome
from airflow_cdc.pipeline.files import WindowOutcomeFile, write_private
from airflow_cdc.pipeline.protocol import StreamConfig
from airflow_cdc.sources.datastream import PROGRESS_PARTITION
from airflow_cdc.pipeline.protocol import commit_window, plan_window
from airflow_cdc.sources.datastream.plan import plan_options
from airflow_cdc.sources.datastream.source import DatastreamSource


def initial_positions(win):
    return DatastreamSource({"prefix": "/x"}).initial_positions(win)
from airflow_cdc.state import StateStore

from .support import at, window

OWNER = "datastream_to_iceberg/run-0"


class FakeTaskInstance:
    def __init__(self) -> None:
        self.xcom: dict = {}

    def xcom_push(self, key, value) -> None:
        self.xcom[key] = value


@pytest.fixture
def state_path(tmp_path, monkeypatch):
    path = tmp_path / "state.db"
    monkeypatch.setenv(
        "AIRFLOW_CONN_CDC_STATE_DEFAULT",
        json.dumps({"conn_type": "cdc_state", "extra": {"path": str(path)}}),
    )
    return path


def applied_window(path, tmp_path, *, idle: bool, watermark):
    """Window 0 of stream shop, applied, its progress partition at ``watermark``."""
    config = StreamConfig("shop", "datastream", {"kind": "datastream", "prefix": "/x"},
                          work_root=str(tmp_path / "work"))
    win = window(0)
    with StateStore(f"sqlite:///{path}") as store:
        store.migrate()
        plan_window(
            store, config, win, OWNER, 600, initial_positions(win), "lake",
            plan_options=lambda kept, _positions: plan_options(
                kept, planned_at=at(60), allowed_lateness=timedelta(minutes=5),
                idle_timeout=timedelta(minutes=10),
            ),
        )
        outcome = WindowOutcomeFile(
            win.window_id, (PartitionOutcome(PROGRESS_PARTITION, False, watermark),), (),
            {"events": 0, "idle_declared": 1 if idle else 0},
        )
        write_private(config.outcome_path(win), outcome.to_json())
        store.mark_extracted(win, OWNER, 1)
        commit_window(store, config, win, OWNER)
        store.mark_applied(win, OWNER, {})


def poke(tmp_path):
    from airflow.sdk import Asset

    from airflow_cdc.sensors.gate import CdcWindowCompleteSensor

    asset = Asset("x-iceberg://lake/cdc/shop_changelog")
    sensor = CdcWindowCompleteSensor(task_id="gate", stream_id="shop", source="datastream",
                                     outlets=[asset])
    outlet_events = defaultdict(lambda: SimpleNamespace(extra={}))
    context = {
        "data_interval_start": window(0).start,
        "data_interval_end": window(0).end,
        "ti": FakeTaskInstance(),
        "outlet_events": outlet_events,
        "dag": SimpleNamespace(dag_id="datastream_to_iceberg"),
        "run_id": "run-0",
    }
    opened = sensor.poke(context)
    return opened, outlet_events[asset].extra


def test_idle_window_is_marked_idle_timeout_in_the_window_row_and_asset_extra(state_path, tmp_path):
    applied_window(state_path, tmp_path, idle=True, watermark=window(0).end)

    opened, extra = poke(tmp_path)

    with StateStore(f"sqlite:///{state_path}") as store:
        record = store.get_window("shop", window(0).start)
    assert opened is True
    assert record.completeness_note.startswith("idle-timeout")
    assert extra["completeness"] == "idle-timeout"


def test_gate_stays_closed_while_no_event_proves_the_window_end(state_path, tmp_path):
    applied_window(state_path, tmp_path, idle=False, watermark=at(20))

    opened, extra = poke(tmp_path)

    assert opened is False and extra == {}
