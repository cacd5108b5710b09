"""Crash points: named places in the window protocol where the reliability matrix kills the
process doing the work (``tests/faults``, ``make faults``).

Off, which is how production runs, :func:`crash_point` is a function that returns at once: the
environment is read once, when this module is imported, and nothing is read per call.

On only when, at import, BOTH hold:

* ``AIRFLOW_CDC_CRASH_POINT`` names one of :data:`POINTS`, and
* ``AIRFLOW_CDC_CRASH_ARMED`` is the path of an existing file whose whole content is that
  same point name (the test writes it).

A stray variable alone arms nothing, and an unknown point name is refused at import (so a typo
in a test cannot silently test nothing). The point fires once: the process that reaches it
first removes the arming file (an atomic unlink, so of several Spark workers exactly one wins)
and is then killed with SIGKILL, like a machine loss: no ``finally``, no ``on_kill``, no
``atexit`` runs. The re-run finds no arming file and runs through.

Which process dies is the point's: an Airflow task point kills the task's own process; a Spark
point kills the whole spark-submit that runs it: the ``SparkSubmit`` JVM found among the
process's ancestors and every process below it (Python driver, Python workers), so the
Airflow task sees its job die as it would on a lost driver node.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

POINT_ENV = "AIRFLOW_CDC_CRASH_POINT"
ARMED_ENV = "AIRFLOW_CDC_CRASH_ARMED"

# point -> (process killed, where)
POINTS: dict[str, tuple[str, str]] = {
    "plan.in_transaction": ("task", "plan: inside the state-store transaction that opens the window"),
    "extract.reading": ("spark", "extract: while the partitions are being read"),
    "extract.after_changelog_commit": (
        "spark", "extract: after the changelog commit, before the outcome file"),
    "commit.before_transaction": (
        "task", "commit: the outcome file read, before the state-store transaction"),
    "commit.in_transaction": ("task", "commit: inside the state-store transaction"),
    "apply.after_target_commit": (
        "spark", "apply: after the target commit, before the tombstone and history commits"),
    "apply.before_state_update": (
        "task", "apply: every table committed, before the state store records it"),
    "gate.after_asset_event": (
        "task", "gate: window complete and its asset events set, before the task ends"),
}


def _armed_point() -> str | None:
    point = os.environ.get(POINT_ENV)
    if not point:
        return None
    if point not in POINTS:
        raise ValueError(
            f"{POINT_ENV}={point!r} is not a crash point; use one of {sorted(POINTS)} "
            f"(or unset it)"
        )
    armed = os.environ.get(ARMED_ENV)
    if not armed:
        return None
    try:
        content = Path(armed).read_text().strip()
    except OSError:
        return None
    return point if content == point else None


def _kill(point: str) -> None:
    armed = os.environ[ARMED_ENV]
    try:
        os.unlink(armed)  # exactly one process fires the point
    except FileNotFoundError:
        return
    if POINTS[point][0] == "spark":
        driver = _spark_submit_ancestor()
        if driver is not None:
            for pid in (driver, *_descendants(driver)):
                _sigkill(pid)
    os.kill(os.getpid(), signal.SIGKILL)


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _spark_submit_ancestor() -> int | None:
    pid = _parent(os.getpid())
    while pid and pid > 1:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        if b"org.apache.spark.deploy.SparkSubmit" in cmdline:
            return pid
        pid = _parent(pid)
    return None


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = _parent(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _sigkill(pid: int) -> None:
    if pid != os.getpid():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _off(point: str) -> None:
    """Crash points are off: nothing happens."""


def _on(point: str) -> None:
    """Kill the process here when ``point`` is the armed one."""
    if point == _ARMED:
        _kill(point)
    elif point not in POINTS:
        raise ValueError(f"crash_point({point!r}) names no crash point")


_ARMED = _armed_point()
crash_point = _on if _ARMED else _off
