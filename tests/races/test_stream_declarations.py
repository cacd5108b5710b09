"""Two DAGs declaring the same stream with different configurations: the second is refused.

A stream's recorded partitions and positions belong to the configuration that registered it
(its source kind and config fingerprint, ``StreamConfig.fingerprint``). Two DAG files declare
stream ``orders`` over two different change logs. Run one after the other (``dag.test``), the
second DAG's plan is refused before it plans anything, and its error names the stream and both
fingerprints (the registered one and its own), and the fix. Run at once, in two OS processes
(``airflow tasks test``, marker ``races_long``), whichever registers the stream first plans
its window and the other is refused the same way. Below that, two processes registering the
stream at the same instant, on SQLite and on PostgreSQL (where both can read "not
registered" before either inserts), end the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_cdc.pipeline.protocol import StreamConfig

from .support import wait_for_files

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "tests" / "seam" / "plugins"
SOURCE = "split_once_source:SplitOnceSource"
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
DAG_FILE = """
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG
from airflow.timetables.interval import DeltaDataIntervalTimetable

from airflow_cdc.operators.pipeline import CdcPipeline

with DAG({dag_id!r}, schedule=DeltaDataIntervalTimetable(timedelta(minutes=10)),
         start_date=datetime(2025, 1, 1, tzinfo=timezone.utc), catchup=False):
    CdcPipeline(group_id="cdc", source={source!r}, stream_id="orders", spec={{"log": {log!r}}},
                deferrable=False)
"""
WORKER = """
import json, sys, time
from pathlib import Path
from airflow_cdc.state import StateStore
from airflow_cdc.model import CdcError
url, fingerprint, sync = sys.argv[1], sys.argv[2], Path(sys.argv[3])
store = StateStore(url)
store.streams()  # connected, schema checked
(sync / f"ready-{fingerprint}").touch()
while not (sync / "go").exists():
    time.sleep(0.002)
try:
    store.register_stream("orders", "split_once", fingerprint)
    print(json.dumps({"fingerprint": fingerprint, "error": None}))
except CdcError as error:
    print(json.dumps({"fingerprint": fingerprint, "error": [type(error).__name__, str(error)]}))
"""


def declared(log: Path) -> StreamConfig:
    """The stream a DAG file declares (its source imported from the plugins folder)."""
    with pytest.MonkeyPatch.context() as patched:
        patched.syspath_prepend(str(PLUGINS))
        return StreamConfig.for_source(SOURCE, "orders", {"log": str(log)})


@pytest.fixture
def two_dags(airflow_db, tmp_path, state_url):
    from airflow_cdc.state import StateStore

    bundle = tmp_path / "dags"
    bundle.mkdir()
    logs = {}
    for region in ("eu", "us"):
        logs[region] = tmp_path / f"changes-{region}.json"
        logs[region].write_text(json.dumps({"split_at": "2030-01-01T00:00:00Z", "changes": []}))
        (bundle / f"orders_{region}.py").write_text(
            DAG_FILE.format(dag_id=f"orders_{region}", source=SOURCE, log=str(logs[region])))
    with StateStore(state_url) as store:
        store.migrate()
    local = "airflow.dag_processing.bundles.local.LocalDagBundle"
    env = {
        **os.environ,
        "AIRFLOW_CDC_STATE_URL": state_url,
        "AIRFLOW_CDC_WORK_ROOT": str(tmp_path / "work"),
        "PYTHONPATH": os.pathsep.join([str(PLUGINS), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
            [{"name": "races", "classpath": local, "kwargs": {"path": str(bundle)}}]),
    }
    return {"logs": logs, "env": env, "state_url": state_url, "tmp": tmp_path}


def run_plans_at_once(two_dags) -> dict[str, tuple[str, int]]:
    """Both DAGs' plan tasks of the first window, started together: {region: (output, status)}."""
    airflow = str(Path(sys.executable).parent / "airflow")
    end = (T0 + timedelta(minutes=10)).isoformat()
    # `tasks test` runs a DAG Airflow has serialized: both DAG files, once, first.
    subprocess.run([airflow, "dags", "reserialize", "-B", "races"], env=two_dags["env"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    processes = {
        region: subprocess.Popen(
            [airflow, "tasks", "test", "-B", "races", f"orders_{region}", "cdc.plan", end],
            env=two_dags["env"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for region in two_dags["logs"]
    }
    return {region: task_outcome(p.communicate(timeout=600)[0]) for region, p in processes.items()}


def task_outcome(output: str) -> tuple[str, str | None]:
    """(output, the state the task instance ended in): ``tasks test`` exits 0 either way."""
    states = [state for state in ("success", "failed") if f"new_state={state}" in output]
    return output, (states[0] if len(states) == 1 else None)


@pytest.mark.parametrize("state_url", ["sqlite"], indirect=True)
def test_a_second_dag_declaring_a_stream_differently_is_refused_at_plan_naming_both_fingerprints(
    two_dags, monkeypatch, capfd
):
    from airflow.dag_processing.dagbag import DagBag

    from airflow_cdc.state import StateStore

    for key in ("AIRFLOW_CDC_STATE_URL", "AIRFLOW_CDC_WORK_ROOT", "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"):
        monkeypatch.setenv(key, two_dags["env"][key])
    monkeypatch.syspath_prepend(str(PLUGINS))  # as Airflow puts the DAGs folder on sys.path
    bag = DagBag(str(two_dags["tmp"] / "dags"))
    end = T0 + timedelta(minutes=10)
    # The plan tasks run; the Spark steps after them are marked done (not what is tested here).
    later_steps = r"cdc\.(extract|commit|apply|gate)"
    first = bag.dags["orders_eu"].test(logical_date=end, mark_success_pattern=later_steps)
    second = bag.dags["orders_us"].test(logical_date=end, mark_success_pattern=later_steps)
    output = capfd.readouterr().out
    fingerprints = {region: declared(log).fingerprint for region, log in two_dags["logs"].items()}
    with StateStore(two_dags["state_url"]) as store:
        [stream] = store.streams()

    assert (str(first.state), str(second.state)) == ("success", "failed")
    assert stream.config_fingerprint == fingerprints["eu"]
    assert "StreamConfigChangedError" in output
    assert f"stream 'orders' was registered as split_once with config fingerprint " \
           f"'{fingerprints['eu']}' and is now configured as split_once with fingerprint " \
           f"'{fingerprints['us']}'" in output


@pytest.mark.races_long
@pytest.mark.parametrize("state_url", ["postgresql"], indirect=True)  # the production store
def test_two_dags_declaring_one_stream_differently_at_once_plan_it_once_and_refuse_the_other_naming_both_fingerprints(
    two_dags,
):
    from airflow_cdc.state import StateStore

    results = run_plans_at_once(two_dags)
    fingerprints = {region: declared(log).fingerprint for region, log in two_dags["logs"].items()}
    with StateStore(two_dags["state_url"]) as store:
        [stream] = store.streams()
        windows = store.list_windows("orders")
    [winner] = [region for region, fp in fingerprints.items() if fp == stream.config_fingerprint]
    [loser] = [region for region in fingerprints if region != winner]
    output, state = results[loser]

    assert results[winner][1] == "success", results[winner][0][-3000:]
    assert state == "failed", output[-3000:]
    assert "StreamConfigChangedError" in output
    assert f"stream 'orders' was registered as split_once with config fingerprint " \
           f"'{fingerprints[winner]}' and is now configured as split_once with fingerprint " \
           f"'{fingerprints[loser]}'" in output
    assert "reset the stream" in output
    assert [(w.end, w.lease_owner.split("/")[0]) for w in windows] == [
        (T0 + timedelta(minutes=10), f"orders_{winner}")]


def test_two_processes_registering_one_stream_differently_at_the_same_instant_register_it_once(
    state_url, tmp_path
):
    from airflow_cdc.state import StateStore

    with StateStore(state_url) as store:
        store.migrate()
    script = tmp_path / "register.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    processes = [
        subprocess.Popen([sys.executable, str(script), state_url, fingerprint, str(tmp_path)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for fingerprint in ("fp-eu", "fp-us")
    ]
    wait_for_files([tmp_path / "ready-fp-eu", tmp_path / "ready-fp-us"], processes)
    (tmp_path / "go").touch()
    outcomes = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-3000:]
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
    with StateStore(state_url) as store:
        [stream] = store.streams()

    winners = [o["fingerprint"] for o in outcomes if o["error"] is None]
    assert winners == [stream.config_fingerprint]
    [refused] = [o for o in outcomes if o["error"] is not None]
    assert refused["error"][0] == "StreamConfigChangedError"
    assert f"fingerprint {winners[0]!r}" in refused["error"][1]
    assert f"fingerprint {refused['fingerprint']!r}" in refused["error"][1]
