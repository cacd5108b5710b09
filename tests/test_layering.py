"""The import rules of ARCHITECTURE.md, checked by importing each module in a fresh interpreter.

* ``airflow_cdc.model``, ``.sources``, ``.state``, ``.pipeline`` import neither airflow nor
  pyspark (Spark executors import them without Airflow; DAG parsing must not start a JVM);
* ``airflow_cdc.spark`` imports no airflow at module level (executors unpack it too);
* Airflow-side modules (hooks, operators, sensors, triggers) import no pyspark at module level;
* ``spark_jobs`` imports no airflow.

Each module is imported alone in a new interpreter and ``sys.modules`` is inspected, so an
indirect import through another module is caught too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

RULES = {
    # package or module -> top-level packages it must not pull into sys.modules
    "airflow_cdc.model": ("airflow", "pyspark"),
    "airflow_cdc.sources": ("airflow", "pyspark"),
    "airflow_cdc.state": ("airflow", "pyspark"),
    "airflow_cdc.pipeline": ("airflow", "pyspark"),
    "airflow_cdc.spark": ("airflow", "pyspark"),
    "airflow_cdc.hooks": ("pyspark",),
    "airflow_cdc.operators": ("pyspark",),
    "airflow_cdc.sensors": ("pyspark",),
    "airflow_cdc.triggers": ("pyspark",),
    "spark_jobs": ("airflow",),
}

_PROBE = textwrap.dedent(
    """
    import importlib, json, sys
    sys.path.insert(0, sys.argv[1])
    importlib.import_module(sys.argv[2])
    forbidden = json.loads(sys.argv[3])
    found = sorted(
        name for name in sys.modules
        if any(name == top or name.startswith(top + ".") for top in forbidden)
    )
    print(json.dumps(found))
    """
)


def modules_under(root: Path, dotted: str) -> list[str]:
    """Every module of a package (or the module itself), found from files, not by importing."""
    path = root / Path(*dotted.split("."))
    if path.with_suffix(".py").is_file():
        return [dotted]
    found = []
    for file in sorted(path.rglob("*.py")):
        parts = file.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.append(".".join(parts))
    return found


def forbidden_imports(root: Path, module: str, forbidden: tuple[str, ...]) -> list[str]:
    """Names from ``forbidden`` that importing ``module`` alone puts into sys.modules."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, str(root), module, json.dumps(list(forbidden))],
        capture_output=True,
        text=True,
        cwd=root,
    )
    if proc.returncode != 0:
        raise AssertionError(f"importing {module} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def violations(root: Path, rules: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    jobs = [(m, forbidden) for pkg, forbidden in rules.items() for m in modules_under(root, pkg)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(lambda job: (job[0], forbidden_imports(root, *job)), jobs)
    return {module: found for module, found in results if found}


def test_every_module_keeps_the_layer_import_rules():
    found = violations(ROOT, RULES)
    assert found == {}, "modules breaking ARCHITECTURE.md's import rules: " + json.dumps(
        {m: sorted({n.split(".")[0] for n in names}) for m, names in found.items()}
    )


def test_layer_check_catches_an_indirect_forbidden_import(tmp_path):
    pkg = tmp_path / "fake_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "clean.py").write_text("import json\n")
    (pkg / "helper.py").write_text("import email.mime.text\n")
    (pkg / "leaky.py").write_text("from fake_pkg import helper\n")
    found = violations(tmp_path, {"fake_pkg": ("email",)})
    assert set(found) == {"fake_pkg.helper", "fake_pkg.leaky"}


@pytest.mark.parametrize("layer", sorted(RULES))
def test_each_layer_has_modules_to_check(layer):
    assert modules_under(ROOT, layer), f"{layer} has no modules: the rule would check nothing"
