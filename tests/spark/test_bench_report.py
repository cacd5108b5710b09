"""The benchmark table of docs/performance.md is made from `make bench` output (bench/report.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import BEGIN, END, render, replace_block, result_rows

ROOT = Path(__file__).resolve().parents[2]


def test_result_lines_become_rows_and_progress_lines_do_not():
    text = ("# make bench, a run\n"
            "bench window: changes=954 window_seconds=4.87 ratio=1.77\n"
            "bench window: warm-up window ending 08:10: 3.1 s\n"
            "some Spark log line\n")

    assert result_rows(text) == [("window", "changes=954 window_seconds=4.87 ratio=1.77")]
    assert "_make bench, a run_" in render(text)


def test_the_table_replaces_only_what_lies_between_the_markers():
    document = f"# Title\n\nbefore\n\n{BEGIN}\nold table\n{END}\n\nafter\n"

    written = replace_block(document, render("bench apply: changes=10 ratio=1.90\n"))

    assert written.startswith("# Title\n\nbefore\n\n" + BEGIN)
    assert written.endswith(END + "\n\nafter\n")
    assert "| `bench/apply.py` | changes=10 ratio=1.90 |" in written
    assert "old table" not in written


def test_results_without_a_result_line_are_refused():
    with pytest.raises(ValueError):
        render("bench window: warm-up window ending 08:10: 3.1 s\n")


def test_the_performance_page_holds_the_table_of_the_last_recorded_run():
    checked = subprocess.run([sys.executable, "bench/report.py", "bench/results.txt",
                              "--check", "docs/performance.md"], cwd=ROOT, capture_output=True, text=True)

    assert checked.returncode == 0, checked.stderr
