"""The completeness gate: a window opens only when progress evidence covers all of it (I4).

It waits until apply committed and every partition live in the window reported progress at
or beyond the window end (heartbeats, records, or a bounded read that returned normally).
While closed, it logs why: which partitions hold the low watermark back, and since when.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.common.compat.sdk import BaseSensorOperator

from airflow_cdc.hooks.state import DEFAULT_CONN_ID, CdcStateHook
from airflow_cdc.operators.window import window_from_context, window_summary
from airflow_cdc.pipeline.protocol import gate_status


class CdcWindowCompleteSensor(BaseSensorOperator):
    """Succeeds when the DAG run's window of ``stream_id`` is proven complete."""

    ui_color = "#d4f7dc"

    def __init__(
        self,
        *,
        stream_id: str,
        cdc_state_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", 30)
        kwargs.setdefault("timeout", 6 * 3600)
        super().__init__(**kwargs)
        self.stream_id = stream_id
        self.cdc_state_conn_id = cdc_state_conn_id
        self._last_reason: str | None = None

    def poke(self, context) -> bool:
        store = CdcStateHook(cdc_state_conn_id=self.cdc_state_conn_id).get_store()
        window = window_from_context(self.stream_id, context)
        status = gate_status(store, window)
        if not status.open:
            if status.reason != self._last_reason:
                self.log.info("window %s stays closed: %s", window.window_id, status.reason)
                self._last_reason = status.reason
            return False
        record = store.mark_complete(window, completeness_note=status.reason)
        context["ti"].xcom_push(key="window_summary", value=window_summary(record))
        self.log.info("window %s is complete: %s", window.window_id, status.reason)
        return True
