"""One workload's driver: ``spark-submit`` in its own process group, from setup to its outcome.

A :class:`DriverRun` does, on a thread of its own:

1. setup: creates the workload's folder, checks that every file it names exists (a missing
   one ends the run FAILED, as a job whose file cannot be fetched does on Dataproc), writes
   the command line to ``<folder>/command.json``, then reports ``setup_done``;
2. starts ``spark-submit`` in a new session (its own process group) with stdout and stderr
   in the driver output file, writes its pid to ``<folder>/driver.pid``, reports ``running``;
3. waits for it and reports the :class:`Outcome`: ``succeeded`` (exit 0), ``failed`` (the
   driver's last Python or Java exception, else its exit code) or ``cancelled``.

:meth:`DriverRun.cancel` before the start ends the run cancelled without a process; while
the driver runs it sends SIGTERM to the whole process group (the JVM and the Python driver it
forked) and SIGKILL after ``kill_grace_seconds``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"
TAIL_BYTES = 256 * 1024  # the part of the driver output searched for the failure


@dataclass(frozen=True)
class Outcome:
    """How a driver ended: ``kind`` is SUCCEEDED, FAILED or CANCELLED."""

    kind: str
    message: str = ""
    exit_code: int | None = None


@dataclass(frozen=True)
class DriverSetup:
    """Where and how a workload runs (the parts every workload of an emulator shares)."""

    spark_submit: str
    master: str
    env: Mapping[str, str]
    kill_grace_seconds: float


def failure_message(output: Path, exit_code: int | None) -> str:
    """The driver's last uncaught exception (``ValueError: boom``), else its exit code."""
    try:
        with output.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - TAIL_BYTES))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        lines = []
    found = None
    for index, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            # The exception line is the first one after the indented frames.
            for after in lines[index + 1 :]:
                if after and not after[0].isspace():
                    found = after.strip()
                    break
        elif line.startswith('Exception in thread "main" '):
            found = line.removeprefix('Exception in thread "main" ').strip()
    if found:
        return found
    return f"the driver exited with code {exit_code}"


class DriverRun:
    """Runs one workload's ``spark-submit`` and reports its stages to ``on_stage``.

    ``on_stage(stage, outcome)`` is called from the run's thread with stage ``"setup_done"``,
    ``"running"``, ``"cancel_started"`` (SIGTERM sent) and finally ``"finished"`` with the
    :class:`Outcome`.
    """

    def __init__(
        self,
        *,
        name: str,
        command: Callable[[], list[str]],
        missing_files: Callable[[], list[str]],
        folder: Path,
        output: Path,
        setup: DriverSetup,
        on_stage: Callable[[str, Outcome | None], None],
        output_links: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self._command = command
        self._missing_files = missing_files
        self.folder = folder
        self.output = output
        self.output_links = output_links
        self.setup = setup
        self._on_stage = on_stage
        self._lock = threading.Lock()
        self._cancel_requested = False
        self._process: subprocess.Popen | None = None
        self._terminator: threading.Thread | None = None
        self._thread = threading.Thread(target=self._run, name=f"dataproc-{name}", daemon=True)

    @property
    def pid(self) -> int | None:
        """The spark-submit process id (also its process group id), once started."""
        process = self._process
        return None if process is None else process.pid

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def cancel(self) -> None:
        """Ask the run to end: before its start it never starts, else its group is killed."""
        with self._lock:
            if self._cancel_requested:
                return
            self._cancel_requested = True
            process = self._process
            if process is not None and process.poll() is None:
                self._terminator = threading.Thread(
                    target=self._terminate, args=(process,), name=f"cancel-{self.name}"
                )
                self._terminator.start()

    # -- the run's thread -----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            outcome = self._drive()
        except Exception as error:  # the emulator must report, never lose, a run
            outcome = Outcome(FAILED, f"the emulator could not run the driver: {error}")
        self._on_stage("finished", outcome)

    def _drive(self) -> Outcome:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.output.touch()
        for link in self.output_links:
            (self.folder / link).unlink(missing_ok=True)
            (self.folder / link).symlink_to(self.output.name)
        missing = self._missing_files()
        if missing:
            message = f"File not found: {', '.join(missing)}"
            self.output.write_text(message + "\n")
            return Outcome(FAILED, message)
        command = self._command()
        (self.folder / "command.json").write_text(json.dumps(command, indent=1) + "\n")
        self._on_stage("setup_done", None)
        with self._lock:
            if self._cancel_requested:
                return Outcome(CANCELLED, "cancelled before the driver started")
            with self.output.open("wb") as log:
                self._process = subprocess.Popen(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.folder,
                    env=dict(self.setup.env),
                    start_new_session=True,  # its own process group: cancel kills what it forks
                )
        (self.folder / "driver.pid").write_text(f"{self._process.pid}\n")
        self._on_stage("running", None)
        exit_code = self._process.wait()
        with self._lock:
            terminator = self._terminator
        if terminator is not None:
            terminator.join()  # reported only once the whole process group is gone
            return Outcome(CANCELLED, "cancelled while the driver ran", exit_code)
        _kill_group(self._process.pid, signal.SIGKILL)  # nothing the driver forked outlives it
        if exit_code == 0:
            return Outcome(SUCCEEDED, "", 0)
        return Outcome(FAILED, failure_message(self.output, exit_code), exit_code)

    def _terminate(self, process: subprocess.Popen) -> None:
        self._on_stage("cancel_started", None)
        stop_process_group(process, self.setup.kill_grace_seconds)


def stop_process_group(process: subprocess.Popen, grace_seconds: float) -> None:
    """SIGTERM to the process group of ``process``, SIGKILL if it is not gone in time."""
    if process.poll() is not None:
        _kill_group(process.pid, signal.SIGKILL)  # the leader is gone; leave no child behind
        return
    _kill_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        pass
    _kill_group(process.pid, signal.SIGKILL)
    process.wait()


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
