"""The crash points themselves: off unless armed on purpose, fired once, refused when unknown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from airflow_cdc.faults import ARMED_ENV, POINT_ENV, POINTS

PROBE = (
    "from airflow_cdc.faults import crash_point\n"
    "crash_point('commit.in_transaction')\n"
    "print('survived', flush=True)\n"
)


def probe(env: dict) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in (POINT_ENV, ARMED_ENV)}
    return subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env},
                          capture_output=True, text=True, timeout=60)


def test_crash_points_are_off_without_the_environment():
    from airflow_cdc import faults

    assert os.environ.get(POINT_ENV) is None
    assert faults.crash_point is faults._off


def test_an_armed_point_kills_its_process_once_and_consumes_the_arming_file(tmp_path):
    armed = tmp_path / "armed"
    armed.write_text("commit.in_transaction")
    env = {POINT_ENV: "commit.in_transaction", ARMED_ENV: str(armed)}

    first = probe(env)
    second = probe(env)

    assert first.returncode == -signal.SIGKILL and "survived" not in first.stdout
    assert not armed.exists()
    assert second.returncode == 0 and "survived" in second.stdout


def test_the_point_variable_alone_arms_nothing(tmp_path):
    result = probe({POINT_ENV: "commit.in_transaction"})

    assert result.returncode == 0 and "survived" in result.stdout


def test_an_arming_file_naming_another_point_arms_nothing(tmp_path):
    armed = tmp_path / "armed"
    armed.write_text("plan.in_transaction")

    result = probe({POINT_ENV: "commit.in_transaction", ARMED_ENV: str(armed)})

    assert result.returncode == 0 and armed.exists()


def test_an_unknown_point_name_is_refused_at_import(tmp_path):
    result = probe({POINT_ENV: "comit.in_transaction", ARMED_ENV: str(tmp_path / "armed")})

    assert result.returncode == 1
    assert "'comit.in_transaction' is not a crash point" in result.stderr


@pytest.mark.parametrize("point", sorted(POINTS))
def test_every_point_is_placed_in_the_code(point):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sources = [*root.joinpath("airflow_cdc").rglob("*.py"), *root.joinpath("spark_jobs").rglob("*.py")]
    placed = [p for p in sources if p.name != "faults.py" and f'crash_point("{point}")' in p.read_text()]

    assert placed, f"crash point {point} is declared but placed nowhere"
