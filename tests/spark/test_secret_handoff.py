"""Secrets handed to a Spark driver on this machine live in an anonymous memory file of the
task's process: readable by the driver while the task runs, gone when the task ends, however
it ends (a SIGKILL included), never on a disk."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from airflow_cdc.spark.job import SECRET_CONF_FILE_KEY, SparkJobSpec
from airflow_cdc.spark.runners import secret_conf_file
from airflow_cdc.spark.secrets import process_files_supported, process_secret_file

CANARY = "canary-" + uuid.uuid4().hex

pytestmark = pytest.mark.skipif(not process_files_supported(), reason="needs memfd and /proc")

HOLDER = """
import sys, time
from airflow_cdc.spark.job import SECRET_CONF_FILE_KEY, SparkJobSpec
from airflow_cdc.spark.runners import secret_conf_file
spec = SparkJobSpec("app.py", secret_conf={"spark.sql.catalog.lake.jdbc.password": sys.argv[1]})
with secret_conf_file(spec) as public:
    print(public.conf[SECRET_CONF_FILE_KEY], flush=True)
    time.sleep(600)
"""


def read_in_another_process(path: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", f"print(open({path!r}).read())"],
                          capture_output=True, text=True, timeout=60)


def names_the_secret(path: str) -> bool:
    """Whether ``path`` still leads to a secret memory file (its fd number may be reused)."""
    try:
        return os.readlink(path).startswith("/memfd:airflow-cdc-secret")
    except OSError:
        return False


def test_a_process_secret_file_is_readable_by_another_process_only_while_held():
    with process_secret_file(CANARY) as path:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        while_held = read_in_another_process(path)

    assert mode == 0o600
    assert while_held.stdout.strip() == CANARY
    assert not names_the_secret(path)


def test_secret_conf_for_a_driver_on_this_machine_is_never_a_file_on_disk():
    spec = SparkJobSpec("app.py", secret_conf={"spark.sql.catalog.lake.jdbc.password": CANARY})

    with secret_conf_file(spec) as public:
        path = public.conf[SECRET_CONF_FILE_KEY]
        target = os.readlink(path)

    assert path.startswith("/proc/") and target.startswith("/memfd:")
    assert public.secret_conf == {} and CANARY not in json.dumps(dict(public.conf))


def test_a_task_killed_while_holding_its_secret_leaves_nothing_behind(tmp_path):
    before = set(Path(tempfile.gettempdir()).iterdir())
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, CANARY], stdout=subprocess.PIPE,
                              text=True, cwd=tmp_path)
    try:
        path = holder.stdout.readline().strip()
        while_alive = read_in_another_process(path)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    after_kill = read_in_another_process(path)
    new_files = [p for p in set(Path(tempfile.gettempdir()).iterdir()) - before if p.is_file()]

    assert CANARY in while_alive.stdout
    assert holder.returncode == -signal.SIGKILL
    assert after_kill.returncode != 0
    assert not [p for p in [*new_files, *tmp_path.rglob("*")]
                if p.is_file() and CANARY in p.read_text(errors="replace")]
