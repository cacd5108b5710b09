"""One OS process acting on a window, for the race tests: ``python race_worker.py '<json>'``.

The JSON names the store URL, the window, the owner and a list of steps:
``["signal", name]`` creates file ``name`` in the sync folder, ``["wait", name]`` waits for it,
``["wait_lease_expired"]`` waits until the window's lease has expired, and ``["plan", lease]``,
``["extract"]``, ``["renew", lease]``, ``["commit"]`` call the store. The last stdout line is
JSON: ``{"owner": ..., "done": [steps], "error": null | [type, message]}``.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from airflow_cdc.model import (  # noqa: E402  (after the sys.path line: run as a script)
    CdcError,
    PartitionOutcome,
    PartitionPosition,
    Window,
    parse_ts,
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
    window = Window(spec["stream"], parse_ts(spec["start"]), parse_ts(spec["end"]))
    owner = spec["owner"]
    sync = Path(spec["sync_dir"])
    initial = [PartitionPosition(pid, window.start) for pid in spec["partitions"]]
    outcomes = [
        PartitionOutcome(pid, False, window.end, spec["records"], f"resume-by-{owner}")
        for pid in spec["partitions"]
    ]
    store.streams()  # connect and check the schema before the starting signal
    done: list[str] = []
    try:
        for step in spec["steps"]:
            action = step[0]
            if action == "signal":
                (sync / step[1]).touch()
            elif action == "wait":
                _wait_for(sync / step[1])
            elif action == "wait_lease_expired":
                lease_end = store.get_window(window.stream_id, window.start).lease_expires_at
                while datetime.now(timezone.utc) <= lease_end:
                    time.sleep(0.01)
            elif action == "plan":
                store.plan_window(window, owner, step[1], initial)
            elif action == "extract":
                store.mark_extracted(window, owner, spec["snapshot_id"])
            elif action == "renew":
                store.renew_lease(window, owner, step[1])
            elif action == "commit":
                store.commit_window(window, owner, outcomes, {"worker": owner})
            else:
                raise ValueError(f"unknown step {step!r}")
            done.append(action)
    except CdcError as exc:
        return {"owner": owner, "done": done, "error": [type(exc).__name__, str(exc)]}
    finally:
        store.close()
    return {"owner": owner, "done": done, "error": None}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
