"""The shape rules of the provider's code (the airflow-cdc wheel: ``airflow_cdc`` and its Spark
jobs): functions short enough to read whole, no branch-heavy block, and no timing figure in a
comment or docstring.

* A function is at most :data:`MAX_FUNCTION_LINES` lines: past that it does several things,
  and each deserves a name.
* No block has radon's grade E or F (cyclomatic complexity above 30): a reader cannot hold
  that many paths at once, and tests cannot cover them.
* No ``N s -> M s`` figure in the code: figures change with the machine and the day, rules do
  not. Figures live in ``docs/performance.md``; a strategy's comment names what it saves and
  the benchmark that shows it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from radon.complexity import cc_rank, cc_visit

ROOT = Path(__file__).resolve().parent.parent
PROVIDER_FOLDERS = (ROOT / "airflow_cdc", ROOT / "spark_jobs")
MAX_FUNCTION_LINES = 80
# "2.1 s -> 0.4 s", "12 min -> 7.0 min", "3.3-4.0 s to ... instead of 1.3 s", "150 ms"...
TIMING = re.compile(
    r"\d+(?:[.,]\d+)?\s*(?:s|ms|µs|us|min|minutes|seconds)\s*(?:->|→)\s*\d"
    r"|\d+(?:\.\d+)?\s*(?:s|ms|µs|min)\b[^.\n]{0,40}\binstead of\s+\d"
)


def provider_files() -> list[Path]:
    return sorted(p for folder in PROVIDER_FOLDERS for p in folder.rglob("*.py"))


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``name (n lines)`` of each function longer than ``limit`` lines."""
    return [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > limit
    ]


def complex_blocks(source: str) -> list[str]:
    """``name (grade complexity)`` of each block radon grades E or F."""
    return [
        f"{block.fullname} ({cc_rank(block.complexity)} {block.complexity})"
        for block in cc_visit(source)
        if cc_rank(block.complexity) in ("E", "F")
    ]


def timing_figures(source: str) -> list[str]:
    """``line: text`` of each comment or docstring line holding a timing figure."""
    return [
        f"{number}: {line.strip()[:100]}"
        for number, line in enumerate(source.splitlines(), 1)
        if TIMING.search(line)
    ]


@pytest.mark.parametrize("rule", [long_functions, complex_blocks, timing_figures])
def test_provider_code_keeps_the_shape_rule(rule):
    found = {
        str(path.relative_to(ROOT)): hits
        for path in provider_files()
        if (hits := rule(path.read_text()))
    }
    assert found == {}, f"{rule.__name__}: {found}"


def test_shape_rules_catch_a_long_branchy_function_with_a_figure():
    body = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(45))
    source = f"def f(x):\n    # the read 2.5 s -> 0.4 s\n{body}\n"

    assert long_functions(source) == ["f (92 lines)"]
    assert complex_blocks(source) == ["f (F 46)"]
    assert timing_figures(source) == ["2: # the read 2.5 s -> 0.4 s"]
