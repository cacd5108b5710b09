"""The table of current benchmark figures in docs/performance.md, made from ``make bench`` output.

    .venv/bin/python bench/report.py RESULTS                 # print the table
    .venv/bin/python bench/report.py RESULTS --write DOC     # replace the table in DOC
    .venv/bin/python bench/report.py RESULTS --check DOC     # exit 1 unless DOC holds it

Every benchmark in ``bench/`` prints its figures on stdout as one line per measurement,
``bench <name>: key=value key=value ...`` (progress and details go to stderr). ``make bench``
keeps those lines in a results file; this script turns each into a table row (the benchmark,
then its figures as printed) and puts the table between the two markers of the document, so the
table is never edited by hand and always says which run it came from.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

BEGIN = "<!-- bench-table:begin (bench/report.py writes this table; do not edit) -->"
END = "<!-- bench-table:end -->"
RESULT_LINE = re.compile(r"^bench (?P<name>\w+): (?P<figures>.*\w+=\S+.*)$")
SOURCE_LINE = re.compile(r"^# (?P<note>.+)$")


def result_rows(text: str) -> list[tuple[str, str]]:
    """(benchmark, figures) for every result line of ``text``, in order."""
    rows = []
    for line in text.splitlines():
        found = RESULT_LINE.match(line.strip())
        if found:
            rows.append((found["name"], found["figures"].strip()))
    return rows


def render(text: str) -> str:
    """The markdown block (markers included) for the results ``text``; its ``# `` lines (the
    run's date and machine, written by ``make bench``) head the table as a note."""
    notes = [m["note"] for m in map(SOURCE_LINE.match, text.splitlines()) if m]
    rows = result_rows(text)
    if not rows:
        raise ValueError("no 'bench <name>: key=value ...' line in the results")
    lines = [BEGIN]
    lines += [f"_{note}_" for note in notes]
    if notes:
        lines.append("")
    lines += ["| benchmark | figures |", "|---|---|"]
    lines += [f"| `bench/{name}.py` | {figures.replace('|', '/')} |" for name, figures in rows]
    lines.append(END)
    return "\n".join(lines)


def replace_block(document: str, block: str) -> str:
    """``document`` with the text between (and including) the markers replaced by ``block``."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the document has no {BEGIN!r} ... {END!r} block")
    return document[:start] + block + document[end + len(END):]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, help="a file of `make bench` output")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", type=Path, metavar="DOC", help="replace the table in DOC")
    action.add_argument("--check", type=Path, metavar="DOC", help="exit 1 unless DOC holds the table")
    args = parser.parse_args(argv)
    block = render(args.results.read_text())
    if args.write:
        args.write.write_text(replace_block(args.write.read_text(), block))
    elif args.check:
        if replace_block(args.check.read_text(), block) != args.check.read_text():
            print(f"{args.check}: its benchmark table is not the one {args.results} gives; "
                  f"run bench/report.py {args.results} --write {args.check}", file=sys.stderr)
            return 1
    else:
        print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
