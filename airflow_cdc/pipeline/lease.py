"""A window's lease while a step runs: how long it lasts, and renewing it during a long job.

The lease owner is the DAG run, so a cleared task of the same run continues its own window
while a second run of the same interval cannot commit it too (I6). Each step renews the lease
when it starts; a Spark job keeps renewing it while it runs (:func:`kept_lease`).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from airflow_cdc.model import Window

# Long enough for scheduling gaps between a window's tasks, short enough that a run killed
# holding it blocks a re-run for minutes, not hours.
DEFAULT_LEASE_SECONDS = 10 * 60


@contextmanager
def kept_lease(store, window: Window, owner: str, lease_seconds: float, log=None):
    """Renew ``owner``'s lease every third of its length while the block runs (a Spark job).

    A renewal that finds the lease lost stops renewing and is logged; the step's own guarded
    transition afterwards fails with LeaseLostError and changes nothing (I6).
    """
    stop = threading.Event()
    every = max(1.0, float(lease_seconds) / 3)

    def renew() -> None:
        while not stop.wait(every):
            try:
                store.renew_lease(window, owner, lease_seconds)
            except Exception as error:  # noqa: BLE001 - reported, the step decides
                if log is not None:
                    log.warning("stopped renewing the lease on %s: %s", window.window_id, error)
                return

    keeper = threading.Thread(target=renew, name=f"lease-{window.stream_id}", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join(timeout=30)
