"""`airflow-cdc status` names who holds a stream's open window and until when (its lease)."""

from __future__ import annotations

import io
import os
from datetime import datetime, timedelta, timezone

from airflow_cdc.cli import main
from airflow_cdc.model import PartitionPosition, format_ts
from airflow_cdc.state import StateStore

from cdc_airflow_support import W1, applied

HOLDER = "cdc_orders/scheduled__2024-05-01T10:00:00+00:00"


def status() -> str:
    out = io.StringIO()
    assert main(["status"], out=out) == 0
    return out.getvalue()


def window_lines(out: str) -> list[str]:
    return [" ".join(line.split())
            for line in out.split("windows:")[1].split("partitions:")[0].strip().splitlines()]


def planned_at(now: datetime) -> StateStore:
    """The fixture's store on a clock standing at ``now``; W1 planned by HOLDER (600 s lease)."""
    store = StateStore(os.environ["AIRFLOW_CDC_STATE_URL"], clock=lambda: now)
    store.plan_window(W1, HOLDER, 600, [PartitionPosition("a", W1.start)])
    return store


def test_status_names_the_dag_run_holding_the_open_window_and_when_its_lease_expires(store):
    expires = planned_at(datetime.now(timezone.utc)).get_window("orders", W1.start).lease_expires_at

    lines = window_lines(status())

    assert "PLANNED" in lines[0]
    assert lines[1].startswith(
        f"leased to DAG run cdc_orders / scheduled__2024-05-01T10:00:00+00:00 until "
        f"{format_ts(expires)} (in ")
    assert lines[1].endswith(
        f"if that run is dead: airflow-cdc release-lease orders {format_ts(W1.start)} "
        f"--owner '{HOLDER}'")


def test_status_says_an_expired_lease_of_an_open_window_is_taken_over_by_its_next_plan(store):
    an_hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    expired = planned_at(an_hour_ago).get_window("orders", W1.start).lease_expires_at

    lines = window_lines(status())

    assert lines[1].startswith(
        f"lease of DAG run cdc_orders / scheduled__2024-05-01T10:00:00+00:00 expired at "
        f"{format_ts(expired)} (")
    assert lines[1].endswith("ago): the window's next plan takes it over (clear its plan task)")


def test_status_shows_no_lease_for_an_applied_window(store):
    applied(store)

    lines = window_lines(status())

    assert len(lines) == 1 and "APPLIED" in lines[0]
