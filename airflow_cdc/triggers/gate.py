"""The deferred completeness gate: polls the state store in the triggerer until a window opens.

The trigger only reads. It never marks the window complete (the sensor does that when it
resumes), so the triggerer may run it twice, or restart it after a crash, without effect.
Its deadline is an absolute instant carried in its kwargs, so a restarted trigger keeps the
timeout the sensor started with.

Why a thread and not an async driver: the StateStore is synchronous SQLAlchemy Core over
SQLite (embedded default) or PostgreSQL, and the gate's rule (:func:`gate_status`) is one
Airflow-free function over that API. Running it through ``asyncio.to_thread`` keeps a single
implementation for poke and deferred mode, needs no second driver (aiosqlite, asyncpg) for
each database, and costs one short thread hop per poll every ``poll_interval`` seconds, which
never blocks the triggerer's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_cdc.hooks.state import DEFAULT_CONN_ID

# How many lagging partitions one log line or event names (the rest are counted).
LAGGING_SHOWN = 10


def lagging_report(status, now: datetime) -> list[dict]:
    """The partitions holding the window's low watermark back: where, since when, how late."""
    from airflow_cdc.model import format_ts

    rows = []
    for partition in sorted(status.lagging, key=lambda p: (p.watermark, p.partition_id)):
        rows.append(
            {
                "partition": partition.partition_id,
                "watermark": format_ts(partition.watermark),
                "since": format_ts(partition.since),
                "stalled_seconds": max(0.0, round((now - partition.since).total_seconds(), 3)),
            }
        )
    return rows


def describe_lagging(rows: list[dict]) -> str:
    """One readable line per lagging partition (at most LAGGING_SHOWN)."""
    lines = [
        f"  partition {row['partition']} at {row['watermark']} since {row['since']} "
        f"({row['stalled_seconds']:.0f}s without progress)"
        for row in rows[:LAGGING_SHOWN]
    ]
    if len(rows) > LAGGING_SHOWN:
        lines.append(f"  ... and {len(rows) - LAGGING_SHOWN} more")
    return "\n".join(lines)


class CdcWindowCompleteTrigger(BaseTrigger):
    """Fires when the window ``[window_start, window_end)`` of ``stream_id`` is proven complete.

    Events (``payload["status"]``):

    * ``open``: the gate opened; ``reason`` says why, ``polls`` how many polls it took;
    * ``timeout``: ``deadline`` passed with the gate closed; ``reason`` and ``lagging`` (the
      partitions that hold the low watermark back, with their watermark and since when);
    * ``error``: the state store could not be read; ``message`` names the error.

    :param stream_id: the stream.
    :param window_start: the window's start (an ISO timestamp).
    :param window_end: the window's end (an ISO timestamp).
    :param cdc_state_conn_id: the state store's connection.
    :param poll_interval: seconds between two reads of the state store.
    :param deadline: when to give up (an ISO timestamp; None: never).
    :param source: the stream's source kind or ``module:Class``, whose rule the gate applies
        (None: the base rule).
    """

    def __init__(
        self,
        *,
        stream_id: str,
        window_start: str,
        window_end: str,
        cdc_state_conn_id: str = DEFAULT_CONN_ID,
        poll_interval: float = 30.0,
        deadline: str | None = None,
        source: str | None = None,
    ) -> None:
        super().__init__()
        self.source = source
        self.stream_id = stream_id
        self.window_start = window_start
        self.window_end = window_end
        self.cdc_state_conn_id = cdc_state_conn_id
        self.poll_interval = float(poll_interval)
        self.deadline = deadline
        self._store = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "stream_id": self.stream_id,
                "window_start": self.window_start,
                "window_end": self.window_end,
                "cdc_state_conn_id": self.cdc_state_conn_id,
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                "source": self.source,
            },
        )

    def _window(self):
        from airflow_cdc.model import Window, parse_ts

        return Window(self.stream_id, parse_ts(self.window_start), parse_ts(self.window_end))

    def _poll(self):
        """One synchronous look at the state store (runs in a worker thread)."""
        from airflow_cdc.hooks.state import CdcStateHook
        from airflow_cdc.pipeline.protocol import gate_status
        from airflow_cdc.sources.registry import source_covers

        if self._store is None:
            self._store = CdcStateHook(cdc_state_conn_id=self.cdc_state_conn_id).get_store()
        return gate_status(self._store, self._window(), source_covers(self.source))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_cdc.model import parse_ts

        deadline = parse_ts(self.deadline) if self.deadline else None
        window_id = f"{self.stream_id}[{self.window_start}, {self.window_end})"
        last_reason = None
        polls = 0
        while True:
            polls += 1
            try:
                status = await asyncio.to_thread(self._poll)
            except Exception as error:  # the sensor turns this into a task failure
                yield TriggerEvent(
                    {
                        "status": "error",
                        "message": f"window {window_id}: the state store "
                        f"({self.cdc_state_conn_id}) could not be read: "
                        f"{type(error).__name__}: {error}",
                    }
                )
                return
            now = datetime.now(timezone.utc)
            if status.open:
                self.log.info("window %s is complete: %s", window_id, status.reason)
                yield TriggerEvent({"status": "open", "reason": status.reason, "polls": polls})
                return
            lagging = lagging_report(status, now)
            if status.reason != last_reason:
                self.log.info("window %s stays closed: %s", window_id, status.reason)
                if lagging:
                    self.log.info("partitions holding the low watermark back:\n%s",
                                  describe_lagging(lagging))
                last_reason = status.reason
            if deadline is not None and now >= deadline:
                yield TriggerEvent(
                    {
                        "status": "timeout",
                        "reason": status.reason,
                        "lagging": lagging[:LAGGING_SHOWN],
                        "lagging_count": len(lagging),
                        "polls": polls,
                    }
                )
                return
            sleep = self.poll_interval
            if deadline is not None:
                sleep = min(sleep, max(0.0, (deadline - now).total_seconds()))
            await asyncio.sleep(sleep)
