"""The Dataproc runners through the google provider's hook, the real google-cloud-dataproc
client and the Dataproc stand-in (spark-submit on ``local[1]``), with the work root on a GCS
emulator: files staged by content, jobs and batches to their final states, the driver's
output in failures, cancel on kill, and the deferrable wait's trigger."""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import pytest

from airflow_cdc import work_root
from demo.cluster import GcsEmulator
from airflow_cdc.spark.dataproc import (
    DataprocBatchRunner,
    DataprocJobRunner,
    Staging,
)
from airflow_cdc.spark.job import SparkJobError, SparkJobSpec

PROJECT, REGION, CLUSTER = "test-project", "europe-west1", "cdc-cluster"
APP = """
import sys, time
from pyspark.sql import SparkSession
from airflow_cdc import work_root
from airflow_cdc.spark_jobs.secret_conf import load_secret_conf
spark = SparkSession.builder.getOrCreate()
load_secret_conf(spark)
if sys.argv[1] == "fail":
    raise ValueError("the job was told to fail")
if sys.argv[1] == "sleep":
    time.sleep(120)
count = spark.range(int(sys.argv[1])).count()
work_root.write_text(sys.argv[2], f"{count} {spark.conf.get('spark.cdc.test', '-')}")
spark.stop()
"""


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    from airflow_cdc_emulators.dataproc import DataprocEmulator

    folder = tmp_path_factory.mktemp("dataproc")
    app = folder / "count_app.py"
    app.write_text(APP)
    patch = pytest.MonkeyPatch()
    with GcsEmulator("runs") as gcs:
        patch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
        with DataprocEmulator(master="local[1]", clusters=[CLUSTER], work_dir=folder / "work",
                              driver_env={"STORAGE_EMULATOR_HOST": gcs.url,
                                          "PYSPARK_PYTHON": sys.executable}) as dataproc:
            patch.setenv("DATAPROC_EMULATOR_HOST", dataproc.emulator_host)
            yield {"app": str(app), "dataproc": dataproc, "root": "gs://runs/cdc"}
    patch.undo()


def hook():
    from airflow_cdc.hooks.dataproc import CdcDataprocHook

    return CdcDataprocHook()


def job_runner(services, **kwargs) -> DataprocJobRunner:
    return DataprocJobRunner(hook=hook(), region=REGION, project_id=PROJECT,
                             work_root=services["root"], cluster_name=CLUSTER,
                             poll_seconds=0.5, **kwargs)


def spec(services, *args: str, name: str = "count") -> SparkJobSpec:
    return SparkJobSpec(application=services["app"], application_args=args, name=name,
                        conf={"spark.cdc.test": "conf-reached"})


def test_a_job_on_a_cluster_runs_from_files_staged_under_the_work_root(services):
    result_uri = f"{services['root']}/results/count.txt"

    result = job_runner(services).run(spec(services, "42", result_uri))

    jobs = list(services["dataproc"].job_client().list_jobs(project_id=PROJECT, region=REGION))
    staged = [str(p) for p in work_root.work_path(services["root"], "_staging").rglob("*.py")]
    assert work_root.read_text(result_uri) == "42 conf-reached"
    assert result.return_code == 0
    assert any(j.status.state.name == "DONE" for j in jobs)
    assert any(p.endswith("/count_app.py") for p in staged)


def test_a_failed_job_raises_with_the_driver_output_naming_the_error(services):
    with pytest.raises(SparkJobError) as error:
        job_runner(services).run(spec(services, "fail", "unused", name="failing"))

    assert "ERROR" in str(error.value)
    assert "the job was told to fail" in "\n".join(error.value.log_tail)


def test_killing_a_running_job_cancels_it_on_dataproc(services):
    runner = job_runner(services)
    outcome = {}

    def run():
        try:
            runner.run(spec(services, "sleep", "unused", name="sleeper"))
        except SparkJobError as error:
            outcome["error"] = str(error)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 60
    while runner._current is None and time.monotonic() < deadline:
        time.sleep(0.2)
    job_id = runner._current.resource_id
    time.sleep(2)
    runner.kill()
    thread.join(timeout=90)

    job = services["dataproc"].job_client().get_job(project_id=PROJECT, region=REGION,
                                                     job_id=job_id)
    assert job.status.state.name == "CANCELLED"
    assert "CANCELLED" in outcome["error"]


@pytest.mark.long
def test_a_serverless_batch_runs_with_its_runtime_properties(services):
    result_uri = f"{services['root']}/results/batch.txt"
    runner = DataprocBatchRunner(hook=hook(), region=REGION, project_id=PROJECT,
                                 work_root=services["root"], poll_seconds=0.5,
                                 runtime_version="2.2", service_account="cdc@p.iam",
                                 extra_properties={"spark.cdc.test": "batch-property"})

    runner.run(spec(services, "7", result_uri, name="batch"))

    assert work_root.read_text(result_uri) == "7 batch-property"


@pytest.mark.long
def test_the_deferred_wait_fires_done_with_the_final_state(services):
    from airflow_cdc.triggers.dataproc import CdcDataprocRunTrigger

    runner = job_runner(services)
    run = runner.submit(spec(services, "3", f"{services['root']}/results/deferred.txt",
                             name="deferred"))
    trigger = CdcDataprocRunTrigger(run=run.to_dict(), poll_interval=0.5)

    async def first_event():
        async for event in trigger.run():
            return event.payload

    event = asyncio.run(first_event())

    assert (event["status"], event["state"], event["succeeded"]) == ("done", "DONE", True)
    assert CdcDataprocRunTrigger(**trigger.serialize()[1]).run_info == run.to_dict()


def test_a_local_work_root_is_refused_for_dataproc_naming_the_fix(tmp_path):
    with pytest.raises(ValueError, match="gs://"):
        Staging(str(tmp_path))


def test_a_new_try_follows_the_job_an_earlier_try_left_running_instead_of_submitting_another(
        services):
    first, second = job_runner(services), job_runner(services)
    sleeper = spec(services, "sleep", "unused", name="window-step-left-running")

    left = first.submit(sleeper)
    followed = second.submit(sleeper)
    first.cancel(left)

    assert followed.resource_id == left.resource_id


def test_secret_conf_reaches_the_job_through_the_work_root_never_its_properties(services):
    result_uri = f"{services['root']}/results/secret.txt"
    secret = SparkJobSpec(application=services["app"], application_args=("5", result_uri),
                          name="with-secret", secret_conf={"spark.cdc.test": "canary-7d1f"})

    job_runner(services).run(secret)

    jobs = list(services["dataproc"].job_client().list_jobs(project_id=PROJECT, region=REGION))
    properties = [dict(j.pyspark_job.properties) for j in jobs]
    assert work_root.read_text(result_uri) == "5 canary-7d1f"
    assert not any("canary-7d1f" in str(p) for p in properties)
    assert list(work_root.work_path(services["root"], "_secrets").glob("*.json")) == []
