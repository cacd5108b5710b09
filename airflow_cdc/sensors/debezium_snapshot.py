"""Wait in a DAG until a Debezium incremental snapshot of a table is in the stream's targets.

    snapshot = DebeziumIncrementalSnapshotOperator(
        task_id="snapshot_orders", conn_id="shop_pg", signal_table="public.debezium_signal",
        data_collections=["public.orders"])
    DebeziumSnapshotCompleteSensor(
        task_id="orders_snapshotted", stream_id="shop", table="public.orders",
        signal_id="{{ ti.xcom_pull(task_ids='snapshot_orders')['signal_id'] }}",
        deferrable=True)

The sensor reads the state store only: it succeeds once the stream's COMPLETE windows (their
gate opened, so their changes are applied) show the table's snapshot completed (Debezium's
TABLE_SCAN_COMPLETED for the table, or the signal's COMPLETED), and fails at once, naming
why, when it was aborted, or when the signal completed without the table. With
``signal_id`` only that snapshot counts (the operator's XCom gives it); without it, the
table's latest snapshot. The stream needs ``notification_topic`` (and the connector
``notification.enabled.channels=sink``): the notifications are how a window knows
(:mod:`airflow_cdc.sources.debezium.progress`).

Poke mode polls in the worker slot every ``poke_interval``; ``deferrable=True`` checks once and,
when the snapshot has not ended yet, defers to :class:`~airflow_cdc.triggers.debezium_snapshot.
DebeziumSnapshotCompleteTrigger`, which polls in the triggerer. ``timeout`` and ``soft_fail``
behave as in Airflow's own sensors. The return value (XCom) is the table's progress entry.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    BaseSensorOperator,
    PokeReturnValue,
)

from airflow_cdc.hooks.state import DEFAULT_CONN_ID, CdcStateHook
from airflow_cdc.operators.task_context import default_deferrable
from airflow_cdc.triggers.debezium_snapshot import snapshot_completion

# Behind the trigger's own deadline: Airflow's deferral timeout only catches a lost triggerer.
_DEFERRAL_BACKSTOP = timedelta(minutes=5)


class DebeziumSnapshotCompleteSensor(BaseSensorOperator):
    """Succeeds when the incremental snapshot of ``table`` (``schema.table`` or
    ``database.table``, as the signal named it) in stream ``stream_id`` completed.

    :param stream_id: the Debezium stream. Templated.
    :param table: the table as the snapshot signal named it (``schema.table`` or
        ``database.table``). Templated.
    :param signal_id: the snapshot signal's id (None or empty once rendered: the table's
        latest snapshot). Templated.
    :param cdc_state_conn_id: the state store's connection.
    :param deferrable: wait in the triggerer (:class:`~airflow_cdc.triggers.debezium_snapshot.
        DebeziumSnapshotCompleteTrigger`); default ``[operators] default_deferrable``.

    ``poke_interval`` (default 60 s), ``timeout`` (default a day) and the other arguments
    are ``BaseSensorOperator``'s.
    """

    template_fields = ("stream_id", "table", "signal_id")
    ui_color = "#fdf1e8"

    def __init__(
        self,
        *,
        stream_id: str,
        table: str,
        signal_id: str | None = None,
        cdc_state_conn_id: str = DEFAULT_CONN_ID,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", 60)
        kwargs.setdefault("timeout", 24 * 3600)
        super().__init__(**kwargs)
        if not isinstance(table, str) or not table.strip():
            raise ValueError(f"table {table!r} is empty: name the table as the snapshot signal "
                             f"did, e.g. 'public.orders'")
        self.stream_id = stream_id
        self.table = table
        self.signal_id = signal_id or None
        self.cdc_state_conn_id = cdc_state_conn_id
        self.deferrable = default_deferrable() if deferrable is None else bool(deferrable)
        self._last_reason: str | None = None

    def _completion(self):
        store = CdcStateHook(cdc_state_conn_id=self.cdc_state_conn_id).get_store()
        # A templated signal id that rendered empty means "the table's latest snapshot".
        return snapshot_completion(store, self.stream_id, self.table, self.signal_id or None)

    def _finish(self, completion) -> dict:
        """The progress entry of a completed snapshot; a failure for any other ending."""
        if completion.state != "completed":
            raise AirflowFailException(f"stream {self.stream_id!r}: {completion.reason}")
        self.log.info("%s", completion.reason)
        return completion.progress.to_json()

    # --- poke mode ----------------------------------------------------------------------------
    def execute(self, context) -> Any:
        if not self.deferrable:
            try:
                return super().execute(context)
            except AirflowSensorTimeout as error:
                raise AirflowSensorTimeout(
                    f"{error}\nstream {self.stream_id!r}: {self._last_reason}") from error
        completion = self._completion()
        if completion.done:  # checked once: an ended snapshot never takes the deferral path
            return self._finish(completion)
        self.log.info("%s", completion.reason)
        self._defer()

    def poke(self, context) -> bool | PokeReturnValue:
        completion = self._completion()
        if not completion.done:
            if completion.reason != self._last_reason:
                self.log.info("waiting: %s", completion.reason)
                self._last_reason = completion.reason
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._finish(completion))

    # --- deferred mode ------------------------------------------------------------------------
    def _defer(self) -> None:
        from airflow_cdc.model import format_ts
        from airflow_cdc.triggers.debezium_snapshot import DebeziumSnapshotCompleteTrigger

        deadline = datetime.now(timezone.utc) + timedelta(seconds=self.timeout)
        self.defer(
            trigger=DebeziumSnapshotCompleteTrigger(
                stream_id=self.stream_id, table=self.table, signal_id=self.signal_id or None,
                cdc_state_conn_id=self.cdc_state_conn_id, poll_interval=self.poke_interval,
                deadline=format_ts(deadline)),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) + _DEFERRAL_BACKSTOP,
        )

    def execute_complete(self, context, event: dict | None = None) -> dict:
        """Resume after the trigger fired: completed, ended otherwise, timed out, or an error."""
        event = event or {}
        status = event.get("status")
        if status == "completed":
            self.log.info("%s", event.get("reason"))
            return event.get("progress") or {}
        if status in ("aborted", "missing"):
            raise AirflowFailException(f"stream {self.stream_id!r}: {event.get('message')}")
        if status == "timeout":
            raise AirflowSensorTimeout(
                f"stream {self.stream_id!r}: the snapshot of {self.table!r} did not end within "
                f"the sensor's timeout of {self.timeout}s: {event.get('reason')}")
        raise AirflowException(event.get("message") or f"snapshot sensor resumed with an unknown "
                                                        f"event {event!r}")
