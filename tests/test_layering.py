"""The import rules of ARCHITECTURE.md: which libraries each layer may load, and which way
imports run inside the package.

Libraries, checked by importing each module in a fresh interpreter:

* ``airflow_cdc.model``, ``.sources``, ``.state``, ``.pipeline`` import neither airflow nor
  pyspark (Spark executors import them without Airflow; DAG parsing must not start a JVM);
* ``airflow_cdc.spark`` imports no airflow at module level (executors unpack it too);
* Airflow-side modules (assets, hooks, operators, sensors, triggers) import no pyspark at
  module level;
* ``airflow_cdc.spark_jobs`` (the repository's ``spark_jobs/`` folder) imports no airflow;
* ``airflow_cdc_emulators``, a distribution of its own, imports neither airflow_cdc nor
  airflow nor pyspark (it installs alone);
* ``airflow_cdc.capture`` imports neither airflow nor pyspark, and loads JPype and Debezium
  (pydbzengine) only inside the function that runs the engine, never on import.

A rule's modules are imported together in a new interpreter and ``sys.modules`` is inspected,
so an indirect import through another module is caught too; when that finds a forbidden
library, each module is imported alone, to name the ones that pull it in.

Direction, checked by reading every ``import`` and ``from ... import`` statement (at module
level and inside functions) of ``airflow_cdc`` (with its Spark jobs): a module imports only its
own layer and the layers below it (:data:`LAYERS`, each layer naming those directly below;
the rest follows). Layer by layer, with the layers directly below it::

    faults                   nothing: the crash points of the reliability matrix (off
                             unless a test arms one)
    model                    faults: the shared values
    sources                  model: adapters and the canonical column types
    state                    model: the metadata tables
    work_root                model: where the hand-over files live (a folder or a URI)
    spark                    work_root: job specs, runners, Iceberg configuration
    capture                  model: Debezium's embedded engine into the sink file layout
    pipeline                 sources, state, work_root: the window protocol
    hooks                    pipeline, spark: connections (state store, source clients,
                             Iceberg catalogs)
    triggers                 hooks, spark: waiting in the triggerer (for a window's evidence,
                             for a Dataproc job)
    assets                   spark: Airflow Assets and OpenLineage datasets
    operators.task_context   model: the run's window, summary and deferral default
    metrics                  model: what a step reports when it succeeded (its timing in
                             the state store, the window's metrics through Airflow's Stats)
    sensors                  triggers, operators.task_context, metrics: the gate
    operators                sensors, assets, spark: the protocol's tasks and TaskGroups
    charts                   model: a stream's windows drawn by matplotlib (lag-chart, view)
    cli                      hooks, spark, capture, charts: the command line (doctor reads
                             the Spark install; ``capture debezium`` runs the capture)
    plugins                  hooks, charts: the CDC view in the Airflow UI (the api-server's
                             plugin: page, read-only API, charts)
    spark_jobs               pipeline, spark: Spark entry points (never the Airflow side)

Wire formats only, checked by reading every import statement (at module level and inside
functions): ``airflow_cdc.sources`` holds the sources' wire formats and imports no pyspark at
all (:data:`NO_IMPORT_ANYWHERE`); what of a source builds or takes DataFrames is its Spark side,
``airflow_cdc.spark_jobs.sources.<kind>``, found by kind (``spark_jobs/sources/__init__.py``).

So ``sources``, ``state`` and ``spark`` sit side by side and never import each
other; a sensor shares only ``operators.task_context`` with the operators. ``airflow_cdc``
itself (the provider-info ``__init__``) imports only the model, and any module may import it.
"""

from __future__ import annotations

import ast
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
    "airflow_cdc.faults": ("airflow", "pyspark"),
    "airflow_cdc.model": ("airflow", "pyspark"),
    "airflow_cdc.sources": ("airflow", "pyspark"),
    "airflow_cdc.state": ("airflow", "pyspark"),
    "airflow_cdc.pipeline": ("airflow", "pyspark"),
    "airflow_cdc.spark": ("airflow", "pyspark"),
    "airflow_cdc.assets": ("pyspark",),
    "airflow_cdc.hooks": ("pyspark",),
    "airflow_cdc.operators": ("pyspark",),
    "airflow_cdc.sensors": ("pyspark",),
    "airflow_cdc.triggers": ("pyspark",),
    "airflow_cdc.metrics": ("pyspark",),
    "airflow_cdc.plugins": ("pyspark",),
    "airflow_cdc.charts": ("airflow", "pyspark"),
    "airflow_cdc.spark_jobs": ("airflow",),
    "airflow_cdc_emulators": ("airflow_cdc", "airflow", "pyspark"),
    "airflow_cdc.capture": ("airflow", "pyspark", "jpype", "_jpype", "pydbzengine"),
}

_PROBE = textwrap.dedent(
    """
    import importlib, json, sys
    sys.path.insert(0, sys.argv[1])
    for module in json.loads(sys.argv[2]):
        importlib.import_module(module)
    forbidden = json.loads(sys.argv[3])
    found = sorted(
        name for name in sys.modules
        if any(name == top or name.startswith(top + ".") for top in forbidden)
    )
    print(json.dumps(found))
    """
)


# Packages whose folder is not their dotted name under the repository root: the Spark jobs
# (setup.py's package-dir mapping) and the emulators' distribution.
SOURCE_FOLDERS = {
    "airflow_cdc.spark_jobs": Path("spark_jobs"),
    "airflow_cdc_emulators": Path("emulators", "airflow_cdc_emulators"),
}


def source_path(root: Path, dotted: str, folders=SOURCE_FOLDERS) -> Path:
    """Where a dotted name lives in the repository (without a .py suffix)."""
    for package, folder in sorted(folders.items(), key=lambda item: -len(item[0])):
        if dotted == package or dotted.startswith(package + "."):
            rest = dotted[len(package):].lstrip(".")
            return root / folder / Path(*rest.split(".")) if rest else root / folder
    return root / Path(*dotted.split("."))


def modules_under(root: Path, dotted: str, folders=SOURCE_FOLDERS) -> list[str]:
    """Every module of a package (or the module itself), found from files, not by importing."""
    path = source_path(root, dotted, folders)
    if path.with_suffix(".py").is_file():
        return [dotted]
    found = []
    for file in sorted(path.rglob("*.py")):
        parts = file.relative_to(path).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.append(".".join([dotted, *parts]))
    return found


def forbidden_imports(root: Path, modules: list[str], forbidden: tuple[str, ...]) -> list[str]:
    """Names from ``forbidden`` that importing ``modules`` (together, in a fresh interpreter)
    puts into sys.modules."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, str(root), json.dumps(modules), json.dumps(list(forbidden))],
        capture_output=True,
        text=True,
        cwd=root,
    )
    if proc.returncode != 0:
        raise AssertionError(f"importing {modules} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def violations(root: Path, rules: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """Each rule's modules, imported together in one interpreter: what a module pulls in
    alone, it pulls in beside the others too, so a clean union means every module is clean.
    Only a rule whose union is not clean has its modules imported one by one, to name them
    (one interpreter per rule instead of one per module: 28.5 s -> 5.8 s)."""
    def check(rule):
        package, forbidden = rule
        modules = modules_under(root, package)
        if not forbidden_imports(root, modules, forbidden):
            return []
        return [(m, found) for m in modules if (found := forbidden_imports(root, [m], forbidden))]

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(check, rules.items())
    return {module: found for rule in results for module, found in rule}


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


# --- direction inside the package -------------------------------------------------------------
# layer -> (module prefixes it covers, layers directly below it). The longest prefix wins, so
# ``airflow_cdc.operators.task_context`` sits below the sensors while ``airflow_cdc.operators``
# sits above them.
LAYERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "faults": (("airflow_cdc.faults",), ()),
    "model": (("airflow_cdc.model",), ("faults",)),
    "package": ((), ("model",)),  # airflow_cdc/__init__.py itself (see layer_of)
    "sources": (("airflow_cdc.sources",), ("model",)),
    "state": (("airflow_cdc.state",), ("model",)),
    "work_root": (("airflow_cdc.work_root",), ("model",)),
    "spark": (("airflow_cdc.spark",), ("work_root",)),
    "capture": (("airflow_cdc.capture",), ("model",)),
    "pipeline": (("airflow_cdc.pipeline",), ("sources", "state", "work_root")),
    "hooks": (("airflow_cdc.hooks",), ("pipeline", "spark")),
    "triggers": (("airflow_cdc.triggers",), ("hooks", "spark")),
    "assets": (("airflow_cdc.assets",), ("spark",)),
    "task_context": (("airflow_cdc.operators.task_context",), ("model",)),
    "metrics": (("airflow_cdc.metrics",), ("model",)),
    "sensors": (("airflow_cdc.sensors",), ("triggers", "task_context", "metrics")),
    "operators": (("airflow_cdc.operators",), ("sensors", "assets", "spark")),
    "charts": (("airflow_cdc.charts",), ("model",)),
    "cli": (("airflow_cdc.cli",), ("hooks", "spark", "capture", "charts")),
    "plugins": (("airflow_cdc.plugins",), ("hooks", "charts")),
    "spark_jobs": (("airflow_cdc.spark_jobs",), ("pipeline", "spark")),
}


# The package's own ``__init__`` (provider info, import-light) is the layer "package".
PACKAGE_ROOT = "airflow_cdc"


def layer_of(module: str, layers=LAYERS) -> str | None:
    """The layer of a dotted module name (longest matching prefix), None outside all layers."""
    if module == PACKAGE_ROOT:
        return "package"
    best, length = None, -1
    for layer, (prefixes, _below) in layers.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = layer, len(prefix)
    return best


def reachable(layer: str, layers=LAYERS) -> set[str]:
    """The layer itself and every layer below it."""
    seen, todo = set(), [layer]
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(layers[current][1])
    return seen


def imported_modules(file: Path, module: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every import statement in the file, wherever it stands."""
    is_package = file.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing module's package
                package = module.split(".")
                package = package[: len(package) - node.level + (1 if is_package else 0)]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # ``from pkg import name`` may import the submodule pkg.name: judge the deeper one
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def module_file(root: Path, module: str, folders=SOURCE_FOLDERS) -> Path:
    """The file of a dotted module: its ``__init__.py`` for a package."""
    path = source_path(root, module, folders)
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def upward_imports(root: Path, packages=("airflow_cdc", "airflow_cdc.spark_jobs"), layers=LAYERS,
                   folders=SOURCE_FOLDERS) -> list[str]:
    """``module:line imports name (layer -> higher layer)`` for each import against the order."""
    found = []
    for package in packages:
        for module in modules_under(root, package, folders):
            importer = layer_of(module, layers)
            if importer is None:
                continue
            file = module_file(root, module, folders)
            # Every module may import the package root: it holds the provider info only.
            allowed = reachable(importer, layers) | {"package"}
            for line, name in imported_modules(file, module):
                target = layer_of(name, layers)
                if target is not None and target not in allowed:
                    found.append(f"{module}:{line} imports {name} ({importer} -> {target})")
    return found


def test_imports_run_only_downward_between_layers():
    found = upward_imports(ROOT)
    assert found == [], "imports against the layer order of this module's docstring:\n" + (
        "\n".join(found)
    )


def test_every_package_module_has_a_layer():
    unplaced = [m for m in modules_under(ROOT, "airflow_cdc") if layer_of(m) is None]
    assert unplaced == [], f"modules outside every layer (add them to LAYERS): {unplaced}"


def test_direction_check_catches_an_upward_import_inside_a_function(tmp_path):
    pkg = tmp_path / "fake_pkg"
    (pkg / "high").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from fake_pkg.high import thing\n")
    (pkg / "high" / "__init__.py").write_text("from ..low import f\n")
    layers = {
        "low": (("fake_pkg.low",), ()),
        "high": (("fake_pkg.high",), ("low",)),
    }
    found = upward_imports(tmp_path, ("fake_pkg",), layers, folders={})
    assert found == ["fake_pkg.low:2 imports fake_pkg.high.thing (low -> high)"]


def test_no_module_imports_the_spark_jobs_by_a_top_level_name():
    """The Spark jobs ship as ``airflow_cdc.spark_jobs``; a ``spark_jobs`` import works only in
    a source checkout run from its root, and would fail in every installed environment."""
    found = [
        f"{module}:{line} imports {name}"
        for package in ("airflow_cdc", "airflow_cdc.spark_jobs", "airflow_cdc_emulators")
        for module in modules_under(ROOT, package)
        for line, name in imported_modules(module_file(ROOT, module), module)
        if name == "spark_jobs" or name.startswith("spark_jobs.")
    ]
    assert found == []


# --- wire formats only --------------------------------------------------------------------------
# package -> top-level packages none of its modules imports, at module level or inside a function.
NO_IMPORT_ANYWHERE = {
    "airflow_cdc.sources": ("pyspark",),
}


def imports_anywhere(root: Path, rules: dict[str, tuple[str, ...]], folders=SOURCE_FOLDERS) -> list[str]:
    """``module:line imports name`` for each import statement of a forbidden package."""
    return [
        f"{module}:{line} imports {name}"
        for package, forbidden in rules.items()
        for module in modules_under(root, package, folders)
        for line, name in imported_modules(module_file(root, module, folders), module)
        if name.split(".")[0] in forbidden
    ]


def test_the_sources_hold_wire_formats_only_and_import_no_pyspark_even_in_a_function():
    found = imports_anywhere(ROOT, NO_IMPORT_ANYWHERE)
    assert found == [], (
        "modules of airflow_cdc.sources importing pyspark (move the code that builds or takes "
        "DataFrames to the source's Spark side, spark_jobs/sources/<kind>.py):\n" + "\n".join(found))


def test_wire_format_check_catches_a_pyspark_import_inside_a_function(tmp_path):
    pkg = tmp_path / "fake_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "wire.py").write_text("import json\n\ndef f():\n    from pyspark.sql import functions as F\n")
    found = imports_anywhere(tmp_path, {"fake_pkg": ("pyspark",)}, folders={})
    assert found == ["fake_pkg.wire:4 imports pyspark.sql.functions"]
