"""The package registers itself as an Airflow provider with the cdc_state connection type."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema

import airflow
from airflow_cdc import get_provider_info

VENV_BIN = Path(sys.executable).parent


def test_provider_info_is_valid_for_airflow():
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_provider_info_lists_modules_that_import():
    import importlib

    info = get_provider_info()
    for section in ("hooks", "operators", "sensors", "triggers"):
        for group in info[section]:
            for module in group["python-modules"]:
                importlib.import_module(module)
    hook_path = info["connection-types"][0]["hook-class-name"]
    module, _, cls = hook_path.rpartition(".")
    assert getattr(importlib.import_module(module), cls).conn_type == "cdc_state"


def test_airflow_providers_list_shows_airflow_cdc(tmp_path):
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
    proc = subprocess.run(
        [str(VENV_BIN / "airflow"), "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    providers = {p["package_name"]: p for p in json.loads(proc.stdout[proc.stdout.index("[") :])}
    assert providers["airflow-cdc"]["version"] == airflow_cdc_version()


def test_airflow_knows_the_cdc_state_connection_type(tmp_path):
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
    proc = subprocess.run(
        [str(VENV_BIN / "airflow"), "providers", "hooks", "--output", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    hooks = {h["connection_type"]: h for h in json.loads(proc.stdout[proc.stdout.index("[") :])}
    assert hooks["cdc_state"]["class"] == "airflow_cdc.hooks.state.CdcStateHook"
    assert hooks["cdc_state"]["package_name"] == "airflow-cdc"


def airflow_cdc_version() -> str:
    import airflow_cdc

    return airflow_cdc.__version__
