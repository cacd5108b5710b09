"""Fault points: a job config's ``fault_points`` make chosen steps fail (the crash tests)."""

from __future__ import annotations

from airflow_cdc.model import CdcError
from airflow_cdc.spark_jobs.apply.config import ApplyConfig


class InjectedFault(CdcError):
    """Raised at a configured ``fault_point`` (crash tests)."""


def fault(config: ApplyConfig, point: str) -> None:
    if point in config.fault_points:
        raise InjectedFault(f"injected fault {point!r} in window {config.window_id!r} (fault_point)")
