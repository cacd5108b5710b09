"""The extract's source overrides (a short-lived access token) never outlive the task: a
driver on this machine reads them from the task's memory, a driver elsewhere from a 0600
file that the job deletes once read and the task when the job ends."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

CANARY = "ya29.canary-" + uuid.uuid4().hex

# A task process that holds the overrides of an extract whose driver runs on this machine,
# then dies by SIGKILL (no finally runs) while the job would be reading them.
KILLED_TASK = """
import os, signal, sys
from pathlib import Path
from airflow_cdc.operators.spanner import spanner_stream_config
from airflow_cdc.operators.extract import CdcExtractOperator

class Extract(CdcExtractOperator):
    def source_overrides(self, context):
        return {"connection": {"access_token": sys.argv[1]}}

folder = Path(sys.argv[2])
extract = Extract(task_id="extract", stream=spanner_stream_config(
    instance_id="i", database_id="d", change_stream="S", work_root=str(folder)))
with extract._overrides_file({}, folder) as path:
    print(path, open(path).read(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_task_killed_during_its_extract_leaves_no_credential_file(tmp_path):
    task = subprocess.run([sys.executable, "-c", KILLED_TASK, CANARY, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)

    path, seen = task.stdout.split(maxsplit=1)
    assert task.returncode == -signal.SIGKILL
    assert path.startswith("/proc/") and json.loads(seen)["connection"]["access_token"] == CANARY
    assert [p for p in tmp_path.rglob("*") if p.is_file() and CANARY in p.read_text(errors="replace")] == []


class RemoteDriver:
    driver_is_local = False


def test_a_driver_elsewhere_gets_a_private_file_deleted_when_the_job_ends(tmp_path):
    from airflow_cdc.operators.spanner import spanner_stream_config
    from airflow_cdc.operators.extract import CdcExtractOperator

    class Extract(CdcExtractOperator):
        def source_overrides(self, context):
            return {"connection": {"access_token": CANARY}}

        def runner(self):
            return RemoteDriver()

    extract = Extract(task_id="extract", stream=spanner_stream_config(
        instance_id="i", database_id="d", change_stream="S", work_root=str(tmp_path)))
    with extract._overrides_file({}, tmp_path) as path:
        mode = Path(path).stat().st_mode & 0o777
        content = json.loads(Path(path).read_text())

    assert Path(path).parent == tmp_path and mode == 0o600
    assert content["connection"]["access_token"] == CANARY
    assert not Path(path).exists()


def test_the_extract_job_deletes_a_secret_file_once_read(tmp_path):
    from airflow_cdc.spark_jobs.extract import forget_secret_file

    secret = tmp_path / "source-overrides.json"
    secret.write_text(json.dumps({"connection": {"access_token": CANARY}}))

    forget_secret_file(None, str(secret))

    assert not secret.exists()
