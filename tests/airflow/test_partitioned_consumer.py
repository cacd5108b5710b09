"""A partitioned-asset consumer runs once per interval, including the intervals a catch-up
window covered, under real Airflow services (api-server, scheduler, dag-processor, triggerer).

The state store holds one catch-up window over three 1-minute intervals, applied. The gate DAG
(``dags/cdc_window_gate.py``, catchup on) gets a run per interval: the first run's gate
proves the window complete, the two covered runs' gates open on it; each emits its interval's
event with its partition key. ``dags/cdc_partition_consumer.py``, scheduled with
``PartitionedAssetTimetable`` on the table's Asset, must run exactly once per interval.
"""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from demo.services import AirflowServices
from airflow_cdc.model import Window, WindowState, format_ts
from airflow_cdc.state import StateStore

from cdc_airflow_support import T0, applied

pytestmark = pytest.mark.long  # make test-long (CI runs it)

ROOT = Path(__file__).resolve().parents[2]
STEP_TIMEOUT = 300  # seconds for any one step on a loaded 2-core machine
MINUTE = timedelta(minutes=1)
SPAN = Window("orders", T0, T0 + 3 * MINUTE)
KEYS = [f"{T0 + n * MINUTE:%Y-%m-%dT%H:%M:%S}" for n in range(3)]


class Deployment(AirflowServices):
    """A throw-away Airflow with the gate DAG (catchup on) and the partitioned consumer."""

    def __init__(self, base: Path) -> None:
        dags = base / "dags"
        dags.mkdir(parents=True)
        for dag_file in ("cdc_window_gate.py", "cdc_partition_consumer.py"):
            shutil.copy(ROOT / "dags" / dag_file, dags)
        self.state_url = f"sqlite:///{base / 'cdc_state.db'}"
        super().__init__(base, dags, {
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW_CDC_STATE_URL": self.state_url,
            "CDC_GATE_STREAM": "orders",
            "CDC_GATE_WINDOW_MINUTES": "1",
            "CDC_GATE_START": T0.isoformat(),
            "CDC_GATE_END": SPAN.end.isoformat(),
            "CDC_GATE_CATCHUP": "true",
            "CDC_GATE_ASSET_PARTITIONS": "true",
            "CDC_GATE_POLL_SECONDS": "1",
            "CDC_GATE_TABLES": "current.orders",
            "CDC_CONSUMER_TABLE": "current.orders",
        })


def at_least(deployment, count: int, sql: str):
    """A check for ``wait_for``: the query's rows once there are ``count`` of them."""
    def check():
        rows = deployment.query(sql)
        return rows if len(rows) >= count else None
    return check


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    base = tmp_path_factory.mktemp("partitions")
    deployment = Deployment(base)
    store = StateStore(deployment.state_url)
    store.migrate()
    store.register_stream("orders", "test", "f")
    applied(store, window=SPAN)  # one catch-up window over three intervals, its gate next
    deployment.start()
    try:
        gated = deployment.wait_for("the gate DAG's three runs to finish", at_least(
            deployment, 3,
            "select data_interval_start, state from dag_run where dag_id = 'cdc_window_gate' "
            "and state in ('success', 'failed') order by data_interval_start"), STEP_TIMEOUT)
        consumed = deployment.wait_for("the consumer's runs to finish", at_least(
            deployment, 3,
            "select r.partition_key, r.state, x.value from dag_run r left join xcom x "
            "on x.run_id = r.run_id and x.dag_id = r.dag_id and x.key = 'return_value' "
            "where r.dag_id = 'cdc_partition_consumer' and r.state in ('success', 'failed') "
            "order by r.partition_key"), STEP_TIMEOUT)
        yield {"store": store, "deployment": deployment, "gated": gated, "consumed": consumed}
    finally:
        deployment.stop()


def test_every_intervals_gate_run_succeeds_and_the_catchup_window_completes(deployment):
    assert [state for _, state in deployment["gated"]] == ["success"] * 3
    assert deployment["store"].get_window("orders", T0).state is WindowState.COMPLETE


def test_each_interval_emits_one_event_per_asset_with_its_partition_key(deployment):
    rows = deployment["deployment"].query(
        "select e.partition_key, e.extra from asset_event e join asset a on a.id = e.asset_id "
        "where a.name = 'lake.current.orders' order by e.partition_key"
    )

    assert [key for key, _ in rows] == KEYS
    assert [json.loads(extra).get("covered_by") for _, extra in rows] == [
        None, SPAN.window_id, SPAN.window_id]
    assert {json.loads(extra)["window_end"] for _, extra in rows} == {format_ts(SPAN.end)}


def test_the_partitioned_consumer_runs_once_per_interval(deployment):
    consumed = deployment["consumed"]

    assert [(key, state) for key, state, _ in consumed] == [(key, "success") for key in KEYS]
    assert [json.loads(value)["partition_key"] for _, _, value in consumed] == KEYS
