"""A Spark step keeps its window's lease while its job runs, and stops once the lease is lost."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone

from airflow_cdc.model import PartitionPosition
from airflow_cdc.pipeline.lease import kept_lease
from airflow_cdc.state import StateStore

from cdc_airflow_support import W1


def planned(tmp_path, lease_seconds: float) -> StateStore:
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.migrate()
    store.register_stream("orders", "test", "f")
    store.plan_window(W1, "dag/run-1", lease_seconds, [PartitionPosition("a", W1.start)])
    return store


def test_a_lease_shorter_than_the_job_is_renewed_while_the_job_runs(tmp_path):
    store = planned(tmp_path, 1.5)
    with kept_lease(store, W1, "dag/run-1", 1.5):
        time.sleep(4)  # the job: longer than the lease
        expires = store.get_window("orders", W1.start).lease_expires_at
        assert expires > datetime.now(timezone.utc)


def test_renewal_stops_and_is_logged_once_another_run_took_the_window(tmp_path, caplog):
    store = planned(tmp_path, 1.5)
    log = logging.getLogger("kept-lease-test")
    with caplog.at_level(logging.WARNING, logger="kept-lease-test"):
        with kept_lease(store, W1, "dag/run-1", 1.5, log=log):
            store.release_lease(W1, "dag/run-1")
            store.plan_window(W1, "dag/run-2", 600)
            time.sleep(2.5)
    assert store.get_window("orders", W1.start).lease_owner == "dag/run-2"
    assert "stopped renewing the lease" in caplog.text
