"""One DAG run acting on one window through the protocol's steps, as its own OS process.

``python window_worker.py '<json>'``: the JSON names the state store URL, the work root, the
window (``start``, ``end``), the run (``owner``, ``dag_id/run_id``), a sync folder and a list
of steps, each what the run's operator does (:mod:`airflow_cdc.operators.window`) without
its Spark job:

* ``["plan"]``: ``plan_window`` (one partition ``p`` when the stream starts);
* ``["extract", snapshot_id]``: nothing when the window is committed (the operator's skip),
  else the outcome file (``p`` continues to the window end) and ``mark_extracted``;
* ``["commit"]``: ``commit_window``;
* ``["apply"]``: nothing when COMPLETE, else the apply order check (when COMMITTED) and
  ``mark_applied``;
* ``["signal", name]`` / ``["wait", name]``: create / wait for a file in the sync folder.

The last stdout line is JSON: ``{"owner", "done": [steps], "skipped": [steps], "error": null |
[type, message]}``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from airflow_cdc.model import (  # noqa: E402  (after the sys.path line: run as a script)
    CdcError,
    PartitionOutcome,
    PartitionPosition,
    Window,
    WindowState,
    parse_ts,
)
from airflow_cdc.pipeline.files import WindowOutcomeFile, write_private  # noqa: E402
from airflow_cdc.pipeline.protocol import (  # noqa: E402
    StreamConfig,
    commit_window,
    committed_window,
    plan_window,
    require_earlier_windows_applied,
)
from airflow_cdc.state import StateStore  # noqa: E402

WAIT_SECONDS = 60.0


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {WAIT_SECONDS} s for {path.name}")
        time.sleep(0.005)


def main(spec: dict) -> dict:
    store = StateStore(spec["url"])
    config = StreamConfig("orders", "test", {"table": "orders"}, work_root=spec["work_root"])
    window = Window("orders", parse_ts(spec["start"]), parse_ts(spec["end"]))
    owner, sync = spec["owner"], Path(spec["sync_dir"])
    done: list[str] = []
    skipped: list[str] = []
    store.streams()  # connected, schema checked
    try:
        for step in spec["steps"]:
            action = step[0]
            if action == "signal":
                (sync / step[1]).touch()
            elif action == "wait":
                _wait_for(sync / step[1])
            elif action == "plan":
                plan_window(store, config, window, owner, 600,
                            [PartitionPosition("p", window.start)], "lake")
            elif action == "extract":
                if committed_window(store, window) is not None:
                    skipped.append(action)
                else:
                    outcome = WindowOutcomeFile(
                        window.window_id, (PartitionOutcome("p", False, window.end, 1, "p"),), (),
                        {"changes": 1})
                    write_private(config.outcome_path(window), outcome.to_json())
                    store.mark_extracted(window, owner, int(step[1]))
            elif action == "commit":
                commit_window(store, config, window, owner, 600)
            elif action == "apply":
                record = store.get_window(window.stream_id, window.start)
                if record.state is WindowState.COMPLETE:
                    skipped.append(action)
                else:
                    if record.state is WindowState.COMMITTED:
                        require_earlier_windows_applied(store, window)
                    store.mark_applied(window, owner, {"lake.current.orders": 1})
            else:
                raise ValueError(f"unknown step {step!r}")
            done.append(action)
    except CdcError as error:
        return {"owner": owner, "done": done, "skipped": skipped,
                "error": [type(error).__name__, str(error)]}
    finally:
        store.close()
    return {"owner": owner, "done": done, "skipped": skipped, "error": None}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
