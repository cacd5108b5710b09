"""The window metrics, received by a real StatsD listener (a UDP socket) through Airflow's Stats
configured by Airflow's own ``[metrics] statsd_*`` settings, and the recorded step timings.

The gate's metrics come from a real task: ``dags/cdc_window_gate.py`` run by ``dag.test``; the
commit's and apply's from :func:`airflow_cdc.metrics.report_step`, the one call those
operators make after their step.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc.model import Window
from airflow_cdc.state import StateStore

from cdc_airflow_support import T0, W1, applied

DAG_FILE = os.path.join(os.path.dirname(__file__), "..", "..", "dags", "cdc_window_gate.py")
W2 = Window("orders", W1.end, W1.end + timedelta(hours=1))


class StatsdListener:
    """A UDP socket on 127.0.0.1 collecting StatsD lines (``name:value|type``)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received: list[str] = []

    def lines(self) -> list[str]:
        found = []
        while True:
            try:
                data, _ = self.sock.recvfrom(65535)
            except TimeoutError:
                return found
            found.extend(data.decode().splitlines())

    def values(self, name: str) -> list[tuple[str, str]]:
        """(value, type) of each line for ``name`` (without StatsD's prefix) received so far."""
        return [tuple(line.split(":", 1)[1].split("|")[:2]) for line in self.received
                if line.split(":", 1)[0] == f"airflow.{name}"]

    def drain(self) -> None:
        self.received = self.lines()


@pytest.fixture(scope="module")
def statsd(airflow_db):
    """Airflow's StatsD backend pointed at a listener, initialized as the task runner does."""
    from airflow.sdk._shared.observability.metrics import stats
    from airflow.sdk.observability.metrics import stats_utils

    listener = StatsdListener()
    saved = dict(os.environ)
    os.environ.update({
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(listener.port),
        "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
    })
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
    yield listener
    os.environ.clear()
    os.environ.update(saved)
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
    listener.sock.close()


@pytest.fixture(scope="module")
def gate_run(statsd, tmp_path_factory):
    """W1 applied, then the gate DAG run for it; the StatsD lines it sent."""
    from airflow.dag_processing.dagbag import DagBag

    saved = dict(os.environ)
    url = f"sqlite:///{tmp_path_factory.mktemp('metrics') / 'cdc_state.db'}"
    os.environ.update({
        "AIRFLOW_CDC_STATE_URL": url, "CDC_GATE_STREAM": "orders", "CDC_GATE_START": T0.isoformat(),
        "CDC_GATE_POLL_SECONDS": "0.2", "CDC_GATE_TABLES": "", "CDC_GATE_TIMEOUT_SECONDS": "600",
        "CDC_GATE_SOFT_FAIL": "false", "CDC_GATE_DEFERRABLE": "true",
    })
    store = StateStore(url)
    store.migrate()
    store.register_stream("orders", "test", "f")
    applied(store, window=W1)
    store.record_step(W1, "plan", W1.end, W1.end + timedelta(seconds=2))
    statsd.lines()  # only the gate's lines from here
    try:
        run = DagBag(os.path.abspath(DAG_FILE)).get_dag("cdc_window_gate").test(logical_date=W1.end)
        statsd.drain()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return run, store


def test_the_gate_counts_a_completed_window(gate_run, statsd):
    assert statsd.values("airflow_cdc.window.completed.orders") == [("1", "c")]


def test_the_gate_times_the_window_from_plan_start_to_gate_open(gate_run, statsd):
    [(value, kind)] = statsd.values("airflow_cdc.window.duration.orders")
    planned = W1.end  # the plan step recorded above started at the window's end
    elapsed_ms = (datetime.now(timezone.utc) - planned).total_seconds() * 1000
    assert kind == "ms" and 0 < float(value) <= elapsed_ms


def test_the_gate_reports_freshness_and_the_live_and_lagging_partitions(gate_run, statsd):
    [(freshness, kind)] = statsd.values("airflow_cdc.stream.freshness.orders")
    assert kind == "g" and float(freshness) >= (datetime.now(timezone.utc) - W1.end).total_seconds() - 120
    assert statsd.values("airflow_cdc.partitions.live.orders") == [("2", "g")]
    assert statsd.values("airflow_cdc.partitions.lagging.orders") == [("0", "g")]


def test_the_gate_times_its_own_step_and_records_it_in_the_state_store(gate_run, statsd):
    run, store = gate_run
    [(_, kind)] = statsd.values("airflow_cdc.step.duration.gate.orders")
    gate = store.window_steps("orders", [W1.start])[W1.start]["gate"]
    assert kind == "ms" and gate.finished_at >= gate.started_at


def test_commit_reports_changes_lag_and_the_partitions_behind_the_window_end(statsd, store):
    from airflow_cdc.metrics import report_step

    applied(store, window=W1, apply=False, b_watermark=W1.start + timedelta(minutes=20))
    statsd.lines()
    report_step(None, store, W1, "commit", store.get_window("orders", W1.start))
    statsd.drain()
    assert statsd.values("airflow_cdc.window.committed.orders") == [("1", "c")]
    assert statsd.values("airflow_cdc.window.changes.orders") == [("5", "c")]
    assert statsd.values("airflow_cdc.window.lag.orders") == [("2400.0", "g")]
    assert statsd.values("airflow_cdc.partitions.lagging.orders") == [("1", "g")]
    assert "commit" in store.window_steps("orders", [W1.start])[W1.start]


def test_apply_counts_the_rows_it_sent_to_dead_letters(statsd, store):
    from airflow_cdc.metrics import report_step

    applied(store, window=W1)
    statsd.lines()
    record = store.get_window("orders", W1.start)
    report_step(None, store, W1, "apply", record, {"dead_letter_rows": 3})
    statsd.drain()
    assert statsd.values("airflow_cdc.window.dead_letters.orders") == [("3", "c")]
    apply = store.window_steps("orders", [W1.start])[W1.start]["apply"]
    assert apply.details == {"dead_letter_rows": 3}


def test_a_report_that_cannot_be_written_never_fails_the_step(statsd, tmp_path, caplog):
    from airflow_cdc.metrics import report_step

    unplanned = StateStore(f"sqlite:///{tmp_path / 'empty.db'}")
    unplanned.migrate()
    report_step(None, unplanned, W2, "extract")
    assert "could not record the extract step of window" in caplog.text
