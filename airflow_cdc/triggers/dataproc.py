"""The deferred wait for a Dataproc job or batch of a protocol step (extract, apply).

The operator submits the job, then defers here: the worker slot is free while Dataproc runs
it. Every ``poll_interval`` the trigger reads the job's (or batch's) state through
:class:`~airflow_cdc.hooks.dataproc.CdcDataprocHook` and renews the window's lease in the
state store (the task is not running to keep it, and another run must not take the window
over meanwhile). It fires ``done`` with the final state, or ``error`` when it cannot read
the state. It only reads (and renews a lease it holds), so the triggerer may run it twice or
restart it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class CdcDataprocRunTrigger(BaseTrigger):
    """Fires when the Dataproc run ``run`` reaches a final state.

    :param run: the run (a :class:`~airflow_cdc.spark.dataproc.DataprocRun` as a dict).
    :param gcp_conn_id: the Google Cloud connection.
    :param impersonation_chain: a service account to impersonate, or a chain of them.
    :param poll_interval: seconds between two looks at the run.
    :param lease: the window's lease to renew while waiting: ``{"cdc_state_conn_id",
        "stream_id", "window_start", "window_end", "owner", "lease_seconds"}`` (None: none).
    """

    def __init__(self, *, run: dict, gcp_conn_id: str = "google_cloud_default",
                 impersonation_chain: Any = None, poll_interval: float = 10.0,
                 lease: dict | None = None) -> None:
        super().__init__()
        self.run_info = dict(run)
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.poll_interval = float(poll_interval)
        self.lease = dict(lease) if lease else None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"run": self.run_info, "gcp_conn_id": self.gcp_conn_id,
             "impersonation_chain": self.impersonation_chain,
             "poll_interval": self.poll_interval, "lease": self.lease},
        )

    def _poll(self, hook, run):
        from airflow_cdc.spark.dataproc import poll_run

        state = poll_run(hook, run)
        if self.lease:
            self._renew_lease()
        return state

    def _renew_lease(self) -> None:
        from airflow_cdc.hooks.state import CdcStateHook
        from airflow_cdc.model import Window, parse_ts

        lease = self.lease
        store = CdcStateHook(cdc_state_conn_id=lease["cdc_state_conn_id"]).get_store()
        window = Window(lease["stream_id"], parse_ts(lease["window_start"]),
                        parse_ts(lease["window_end"]))
        store.renew_lease(window, lease["owner"], float(lease["lease_seconds"]))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_cdc.hooks.dataproc import CdcDataprocHook
        from airflow_cdc.spark.dataproc import DataprocRun

        run = DataprocRun.from_dict(self.run_info)
        try:
            hook = CdcDataprocHook(gcp_conn_id=self.gcp_conn_id,
                                   impersonation_chain=self.impersonation_chain)
            while True:
                state = await asyncio.to_thread(self._poll, hook, run)
                if state.final:
                    yield TriggerEvent({"status": "done", "run": self.run_info,
                                        "state": state.state, "succeeded": state.succeeded,
                                        "details": state.details,
                                        "driver_output_uri": state.driver_output_uri})
                    return
                await asyncio.sleep(self.poll_interval)
        except Exception as error:  # noqa: BLE001 - the operator turns it into a failure
            yield TriggerEvent({"status": "error", "run": self.run_info,
                                "message": f"Dataproc {run.kind} {run.resource_id}: "
                                           f"{type(error).__name__}: {error}"})
