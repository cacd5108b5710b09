"""The Dataproc emulator through the real google-cloud-dataproc client, running real spark-submit.

Jobs and batches run on ``local[1]`` (2 cores on every machine of the project); one test starts
a standalone master and worker on 127.0.0.1 and proves a job ran there. Scripts that need no
Spark (sleep, raise, print) still go through spark-submit, but skip the SparkSession.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
from google.api_core import exceptions
from google.cloud import dataproc_v1

from airflow_cdc_emulators.dataproc import (
    DATAPROC_EMULATOR_HOST,
    DataprocEmulator,
    dataproc_client,
)

PROJECT, REGION, CLUSTER = "cdc-project", "europe-west1", "cdc-cluster"
PARENT = f"projects/{PROJECT}/locations/{REGION}"
JobState = dataproc_v1.JobStatus.State
BatchState = dataproc_v1.Batch.State
SMALL_SPARK = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1"}

COUNT_SCRIPT = """
import sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
count = spark.range(1000).count()
with open(sys.argv[1], "w") as result:
    result.write(f"{count} {spark.sparkContext.master}")
spark.stop()
"""
FAILING_SCRIPT = """
def load_orders():
    raise ValueError("orders table is missing")

load_orders()
"""
SLEEPING_SCRIPT = """
import os, sys, time

with open(sys.argv[1], "w") as started:
    started.write(str(os.getpid()))
time.sleep(300)
"""
HELLO_SCRIPT = 'print("hello from the driver")\n'


@pytest.fixture(scope="module")
def scripts(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("scripts")
    found = {}
    for name, text in (
        ("count", COUNT_SCRIPT),
        ("failing", FAILING_SCRIPT),
        ("sleeping", SLEEPING_SCRIPT),
        ("hello", HELLO_SCRIPT),
    ):
        found[name] = folder / f"{name}.py"
        found[name].write_text(text)
    return found


@pytest.fixture(scope="module")
def dataproc_emulator(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("dataproc-work")
    with DataprocEmulator(
        master="local[1]", clusters=(CLUSTER, "reporting"), work_dir=work_dir,
        kill_grace_seconds=5,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def job_client(dataproc_emulator) -> dataproc_v1.JobControllerClient:
    return dataproc_emulator.job_client()


@pytest.fixture(scope="module")
def batch_client(dataproc_emulator) -> dataproc_v1.BatchControllerClient:
    return dataproc_emulator.batch_client()


def pyspark_job(script: Path, *args: str, cluster: str = CLUSTER, **fields) -> dict:
    return {
        "placement": {"cluster_name": cluster},
        "pyspark_job": {
            "main_python_file_uri": script.as_uri(),
            "args": list(args),
            "properties": SMALL_SPARK,
        },
        **fields,
    }


def submit(client, job: dict) -> dataproc_v1.Job:
    return client.submit_job(project_id=PROJECT, region=REGION, job=job)


def wait_for_job(client, job_id: str, until=lambda job: job.done, timeout=120) -> dataproc_v1.Job:
    deadline = time.monotonic() + timeout  # a limit against hanging, not a speed assertion
    while True:
        job = client.get_job(project_id=PROJECT, region=REGION, job_id=job_id)
        if until(job) or time.monotonic() > deadline:
            return job
        time.sleep(0.2)


def history(job: dataproc_v1.Job) -> list[str]:
    return [status.state.name for status in job.status_history] + [job.status.state.name]


def local_file(uri: str) -> Path:
    parsed = urlparse(uri)
    assert parsed.scheme == "file", uri
    return Path(parsed.path)


def live_group_members(pgid: int) -> list[int]:
    """Processes of process group ``pgid`` that are not zombies (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended while we looked
        state, group = fields[0], int(fields[2])
        if group == pgid and state != "Z":
            found.append(int(stat.parent.name))
    return found


def is_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# -- jobs ---------------------------------------------------------------------------------------
@pytest.mark.long
def test_pyspark_job_runs_to_done_with_its_status_history_in_order(job_client, scripts, tmp_path):
    result = tmp_path / "count.txt"
    submitted = submit(job_client, pyspark_job(scripts["count"], str(result)))

    job = wait_for_job(job_client, submitted.reference.job_id)

    assert submitted.status.state == JobState.PENDING
    assert len(submitted.reference.job_id) == 32  # generated when the request left it empty
    assert history(job) == ["PENDING", "SETUP_DONE", "RUNNING", "DONE"]
    starts = [s.state_start_time for s in job.status_history] + [job.status.state_start_time]
    assert starts == sorted(starts)
    assert job.done
    assert result.read_text() == "1000 local[1]"
    assert local_file(job.driver_output_resource_uri).is_file()
    assert job.placement.cluster_uuid and job.job_uuid


def test_job_whose_script_raises_ends_error_naming_the_exception(job_client, scripts):
    submitted = submit(job_client, pyspark_job(scripts["failing"]))

    job = wait_for_job(job_client, submitted.reference.job_id)

    assert history(job) == ["PENDING", "SETUP_DONE", "RUNNING", "ERROR"]
    assert "ValueError: orders table is missing" in job.status.details
    output = local_file(job.driver_output_resource_uri).read_text()
    assert "Traceback (most recent call last)" in output
    assert 'raise ValueError("orders table is missing")' in output
    # Dataproc's name of the first output chunk reads the same file
    first_chunk = Path(str(local_file(job.driver_output_resource_uri)) + ".000000000")
    assert first_chunk.read_text() == output


def test_cancelled_job_ends_cancelled_and_its_processes_are_gone(job_client, scripts, tmp_path):
    started = tmp_path / "driver.pid"
    submitted = submit(job_client, pyspark_job(scripts["sleeping"], str(started)))
    job_id = submitted.reference.job_id
    wait_for_job(job_client, job_id, until=lambda job: started.exists() and started.read_text())
    python_driver = int(started.read_text())
    job = job_client.get_job(project_id=PROJECT, region=REGION, job_id=job_id)
    spark_submit = int((local_file(job.driver_control_files_uri) / "driver.pid").read_text())

    answer = job_client.cancel_job(project_id=PROJECT, region=REGION, job_id=job_id)
    job = wait_for_job(job_client, job_id)

    assert answer.status.state == JobState.CANCEL_PENDING
    assert history(job) == [
        "PENDING", "SETUP_DONE", "RUNNING", "CANCEL_PENDING", "CANCEL_STARTED", "CANCELLED"
    ]
    deadline = time.monotonic() + 5
    while live_group_members(spark_submit) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_group_members(spark_submit) == []
    assert not is_alive(python_driver)


def test_cancelling_a_finished_job_is_failed_precondition(job_client, tmp_path):
    submitted = submit(job_client, pyspark_job(tmp_path / "absent.py"))
    job = wait_for_job(job_client, submitted.reference.job_id)
    assert job.status.state == JobState.ERROR

    with pytest.raises(exceptions.FailedPrecondition, match="in state 'ERROR'"):
        job_client.cancel_job(project_id=PROJECT, region=REGION, job_id=job.reference.job_id)


def test_job_naming_a_missing_file_ends_error_naming_it(job_client, tmp_path):
    missing = tmp_path / "nowhere.py"
    submitted = submit(job_client, pyspark_job(missing))

    job = wait_for_job(job_client, submitted.reference.job_id)

    assert history(job) == ["PENDING", "ERROR"]
    assert f"File not found: {missing.as_uri()}" in job.status.details


def test_unknown_cluster_is_not_found_naming_it_and_the_known_ones(job_client, scripts):
    with pytest.raises(exceptions.NotFound) as refused:
        submit(job_client, pyspark_job(scripts["hello"], cluster="cdc-clustr"))

    message = str(refused.value)
    assert f"projects/{PROJECT}/regions/{REGION}/clusters/cdc-clustr" in message
    assert "['cdc-cluster', 'reporting']" in message


def test_main_file_that_is_not_python_is_invalid_argument_naming_the_field(job_client, tmp_path):
    job = pyspark_job(tmp_path / "job.jar")
    with pytest.raises(exceptions.InvalidArgument, match="job.pyspark_job.main_python_file_uri"):
        submit(job_client, job)


def test_job_id_taken_is_already_exists(job_client, tmp_path):
    job = pyspark_job(tmp_path / "absent.py", reference={"job_id": "orders-window-0007"})
    submit(job_client, job)

    with pytest.raises(exceptions.AlreadyExists, match="jobs/orders-window-0007"):
        submit(job_client, job)


def test_list_jobs_filters_by_cluster_and_get_job_returns_the_job(job_client, tmp_path):
    reporting = submit(job_client, pyspark_job(tmp_path / "absent.py", cluster="reporting"))
    submit(job_client, pyspark_job(tmp_path / "absent.py"))

    listed = list(
        job_client.list_jobs(
            request={"project_id": PROJECT, "region": REGION, "cluster_name": "reporting"}
        )
    )
    got = job_client.get_job(project_id=PROJECT, region=REGION, job_id=reporting.reference.job_id)

    assert [job.reference.job_id for job in listed] == [reporting.reference.job_id]
    assert got.placement.cluster_name == "reporting"
    assert got.reference.project_id == PROJECT


def test_deleted_job_is_not_found_afterwards(job_client, tmp_path):
    submitted = submit(job_client, pyspark_job(tmp_path / "absent.py"))
    job_id = wait_for_job(job_client, submitted.reference.job_id).reference.job_id

    job_client.delete_job(project_id=PROJECT, region=REGION, job_id=job_id)

    with pytest.raises(exceptions.NotFound, match=f"jobs/{job_id}"):
        job_client.get_job(project_id=PROJECT, region=REGION, job_id=job_id)


def test_job_submitted_as_operation_resolves_to_the_done_job(job_client, scripts):
    operation = job_client.submit_job_as_operation(
        project_id=PROJECT, region=REGION, job=pyspark_job(scripts["hello"])
    )

    job = operation.result(timeout=120)

    assert job.status.state == JobState.DONE
    assert operation.metadata.job_id == job.reference.job_id
    output = local_file(job.driver_output_resource_uri).read_text()
    assert "hello from the driver" in output


# -- batches ------------------------------------------------------------------------------------
def pyspark_batch(script: Path, *args: str) -> dict:
    return {
        "pyspark_batch": {"main_python_file_uri": script.as_uri(), "args": list(args)},
        "runtime_config": {"properties": SMALL_SPARK},
        "environment_config": {
            "execution_config": {
                "subnetwork_uri": "projects/cdc-project/regions/europe-west1/subnetworks/cdc",
                "service_account": "cdc-jobs@cdc-project.iam.gserviceaccount.com",
            }
        },
        "labels": {"stream": "orders"},
    }


@pytest.mark.long  # make test-long (CI runs it)
def test_batch_created_with_create_batch_result_ends_succeeded(batch_client, scripts, tmp_path):
    result = tmp_path / "count.txt"
    operation = batch_client.create_batch(
        parent=PARENT, batch=pyspark_batch(scripts["count"], str(result)), batch_id="orders-0001"
    )

    batch = operation.result(timeout=120)

    assert batch.name == f"{PARENT}/batches/orders-0001"
    assert batch.state == BatchState.SUCCEEDED
    assert [h.state.name for h in batch.state_history] == ["PENDING", "RUNNING"]
    assert operation.metadata.batch == batch.name
    assert result.read_text() == "1000 local[1]"
    assert local_file(batch.runtime_info.output_uri).is_file()
    execution = batch.environment_config.execution_config
    assert execution.service_account == "cdc-jobs@cdc-project.iam.gserviceaccount.com"


def test_batch_cancelled_through_its_operation_ends_cancelled(batch_client, scripts, tmp_path):
    started = tmp_path / "driver.pid"
    operation = batch_client.create_batch(
        parent=PARENT, batch=pyspark_batch(scripts["sleeping"], str(started))
    )
    deadline = time.monotonic() + 60
    while not (started.exists() and started.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)

    operation.cancel()
    batch = operation.result(timeout=60)

    assert batch.state == BatchState.CANCELLED
    assert [h.state.name for h in batch.state_history] == ["PENDING", "RUNNING", "CANCELLING"]
    assert not is_alive(int(started.read_text()))


def test_list_batches_and_get_batch(batch_client, tmp_path):
    operation = batch_client.create_batch(
        parent=PARENT, batch=pyspark_batch(tmp_path / "absent.py"), batch_id="listed-0001"
    )
    with pytest.raises(exceptions.Unknown, match="File not found"):
        operation.result(timeout=60)  # a FAILED batch fails its operation

    listed = list(
        batch_client.list_batches(request={"parent": PARENT, "filter": "labels.stream = orders"})
    )
    got = batch_client.get_batch(name=f"{PARENT}/batches/listed-0001")

    assert f"{PARENT}/batches/listed-0001" in [batch.name for batch in listed]
    assert got.state == BatchState.FAILED
    assert "File not found" in got.state_message
    assert got.labels["stream"] == "orders"


def test_batch_id_taken_is_already_exists(batch_client, tmp_path):
    batch = pyspark_batch(tmp_path / "absent.py")
    batch_client.create_batch(parent=PARENT, batch=batch, batch_id="taken-0001")

    with pytest.raises(exceptions.AlreadyExists, match="batches/taken-0001"):
        batch_client.create_batch(parent=PARENT, batch=batch, batch_id="taken-0001")


def test_repeated_request_id_returns_the_first_batch_operation(batch_client, tmp_path):
    batch = pyspark_batch(tmp_path / "absent.py")
    first = batch_client.create_batch(
        request={"parent": PARENT, "batch": batch, "request_id": "retry-of-window-7"}
    )

    again = batch_client.create_batch(
        request={"parent": PARENT, "batch": batch, "request_id": "retry-of-window-7"}
    )

    assert again.operation.name == first.operation.name
    assert again.metadata.batch == first.metadata.batch


def test_unknown_batch_is_not_found(batch_client):
    with pytest.raises(exceptions.NotFound, match=f"{PARENT}/batches/nothing-here"):
        batch_client.get_batch(name=f"{PARENT}/batches/nothing-here")


# -- connecting ---------------------------------------------------------------------------------
def test_client_reaches_the_emulator_through_dataproc_emulator_host(
    dataproc_emulator, monkeypatch
):
    monkeypatch.setenv(DATAPROC_EMULATOR_HOST, dataproc_emulator.emulator_host)

    client = dataproc_client(dataproc_v1.JobControllerClient)

    with pytest.raises(exceptions.NotFound, match="jobs/no-such-job"):
        client.get_job(project_id=PROJECT, region=REGION, job_id="no-such-job")


# -- a standalone master ------------------------------------------------------------------------
@pytest.fixture
def standalone_master(tmp_path):
    """A Spark standalone master and one 1-core worker on 127.0.0.1 (killed afterwards)."""
    from demo.cluster import StandaloneSpark

    with StandaloneSpark(tmp_path / "standalone", cores=1, memory="1g") as cluster:
        yield cluster.master_url, cluster.state


@pytest.mark.long  # make test-long (CI runs it)
def test_job_runs_on_the_standalone_master_the_emulator_is_given(
    standalone_master, scripts, tmp_path
):
    master_url, master_state = standalone_master
    result = tmp_path / "count.txt"
    with DataprocEmulator(master=master_url, work_dir=tmp_path / "work") as emulator:
        client = emulator.job_client()
        submitted = submit(client, pyspark_job(scripts["count"], str(result)))
        job = wait_for_job(client, submitted.reference.job_id)

    assert job.status.state == JobState.DONE, job.status.details
    assert result.read_text() == f"1000 {master_url}"
    applications = [app["name"] for app in master_state()["completedapps"]]
    assert job.reference.job_id in applications
