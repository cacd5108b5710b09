"""The deferred wait for a Debezium incremental snapshot: polls the state store in the triggerer
until the stream's complete windows show a table's snapshot ended.

What "ended" means is :func:`airflow_cdc.sources.debezium.progress.table_completion` over the
counts of the stream's COMPLETE windows, oldest first (:func:`snapshot_completion`), the same
rule the sensor's poke mode uses. Like the gate's trigger it only reads, runs each poll in a
thread (the state store is synchronous SQLAlchemy), and carries an absolute deadline, so the
triggerer may run it twice or restart it without effect.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_cdc.hooks.state import DEFAULT_CONN_ID


def snapshot_completion(store, stream_id: str, table: str, signal_id: str | None = None):
    """The :class:`~airflow_cdc.sources.debezium.progress.Completion` of ``table``'s incremental
    snapshot (the one ``signal_id`` started, if given) as the stream's COMPLETE windows show it."""
    from airflow_cdc.model import WindowState
    from airflow_cdc.sources.debezium.progress import table_completion

    windows = store.list_windows(stream_id, states=[WindowState.COMPLETE])
    return table_completion([w.counts or {} for w in windows], table, signal_id)


class DebeziumSnapshotCompleteTrigger(BaseTrigger):
    """Fires when the incremental snapshot of ``table`` in stream ``stream_id`` ended.

    Events (``payload["status"]``): ``completed`` (``reason``, ``progress``: the table's entry),
    ``aborted`` or ``missing`` (``message``: the snapshot stopped, or its signal completed
    without the table), ``timeout`` (``deadline`` passed; ``reason``: how far it got) and
    ``error`` (the state store could not be read; ``message``).

    :param stream_id: the Debezium stream.
    :param table: the table as the snapshot signal named it.
    :param signal_id: the snapshot signal's id (None: the table's latest snapshot).
    :param cdc_state_conn_id: the state store's connection.
    :param poll_interval: seconds between two reads of the state store.
    :param deadline: when to give up (an ISO timestamp; None: never).
    """

    def __init__(
        self,
        *,
        stream_id: str,
        table: str,
        signal_id: str | None = None,
        cdc_state_conn_id: str = DEFAULT_CONN_ID,
        poll_interval: float = 60.0,
        deadline: str | None = None,
    ) -> None:
        super().__init__()
        self.stream_id = stream_id
        self.table = table
        self.signal_id = signal_id
        self.cdc_state_conn_id = cdc_state_conn_id
        self.poll_interval = float(poll_interval)
        self.deadline = deadline
        self._store = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "stream_id": self.stream_id,
                "table": self.table,
                "signal_id": self.signal_id,
                "cdc_state_conn_id": self.cdc_state_conn_id,
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
            },
        )

    def _poll(self):
        """One synchronous look at the state store (runs in a worker thread)."""
        from airflow_cdc.hooks.state import CdcStateHook

        if self._store is None:
            self._store = CdcStateHook(cdc_state_conn_id=self.cdc_state_conn_id).get_store()
        return snapshot_completion(self._store, self.stream_id, self.table, self.signal_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_cdc.model import parse_ts

        deadline = parse_ts(self.deadline) if self.deadline else None
        last_reason = None
        polls = 0
        while True:
            polls += 1
            try:
                completion = await asyncio.to_thread(self._poll)
            except Exception as error:  # the sensor turns this into a task failure
                yield TriggerEvent({
                    "status": "error",
                    "message": f"snapshot of {self.table!r} in stream {self.stream_id!r}: the "
                               f"state store ({self.cdc_state_conn_id}) could not be read: "
                               f"{type(error).__name__}: {error}",
                })
                return
            if completion.state == "completed":
                self.log.info("%s", completion.reason)
                yield TriggerEvent({"status": "completed", "reason": completion.reason,
                                    "progress": completion.progress.to_json(), "polls": polls})
                return
            if completion.done:
                yield TriggerEvent({"status": completion.state, "message": completion.reason,
                                    "polls": polls})
                return
            if completion.reason != last_reason:
                self.log.info("waiting: %s", completion.reason)
                last_reason = completion.reason
            now = datetime.now(timezone.utc)
            if deadline is not None and now >= deadline:
                yield TriggerEvent({"status": "timeout", "reason": completion.reason, "polls": polls})
                return
            sleep = self.poll_interval
            if deadline is not None:
                sleep = min(sleep, max(0.0, (deadline - now).total_seconds()))
            await asyncio.sleep(sleep)
