"""The deferred wait before planning: polls a source's readiness probe until a window can be read.

Step 0 of the window protocol (:class:`airflow_cdc.model.Readiness`). The plan
task defers here while its window's evidence cannot exist yet, freeing its worker slot; the
trigger asks the probe again every ``poll_interval`` (or sleeps until the probe's
``retry_at``) and fires ``ready``, ``timeout`` or ``error``. It only reads, so the triggerer
may run it twice or restart it; the deadline is absolute, so a restart keeps it.

A probe is named by its import path (``module:Class``) and built from JSON kwargs in the
triggerer; it has ``check(now) -> Readiness``. Probes are synchronous (state store over
SQLAlchemy, object listings through Airflow hooks), so each check runs in a thread.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

# The trigger's first question comes this long after the deferral (or one poll interval, if
# shorter); see CdcWindowReadyTrigger.run.
FIRST_ASK_AFTER_SECONDS = 5.0


class SourceWindowProbe:
    """Step 0 for any source: may the window be planned now?

    First the protocol's own answer (planned before: ready; the previous window still
    running: wait, :func:`~airflow_cdc.pipeline.protocol.planning_readiness`), then the
    source's (:meth:`~airflow_cdc.sources.base.ChangeSource.readiness`, given the stream's
    known partitions and the source's Airflow hook). Built from JSON kwargs, in the plan task
    or in the triggerer, and kept for the whole wait, so a source may cache what it read.

    :param source_spec: the stream's source spec (with its ``stream_id``).
    :param window_start: the window's start (an ISO timestamp).
    :param window_end: the window's end (an ISO timestamp).
    :param cdc_state_conn_id: the state store's connection (None: the default).
    :param source_conn: the arguments of the source's Airflow hook.
    """

    def __init__(
        self,
        *,
        source_spec: dict,
        window_start: str,
        window_end: str,
        cdc_state_conn_id: str | None = None,
        source_conn: dict | None = None,
    ) -> None:
        from airflow_cdc.hooks.source import source_hook
        from airflow_cdc.hooks.state import DEFAULT_CONN_ID
        from airflow_cdc.model import Window, parse_ts
        from airflow_cdc.sources.registry import build_source

        from airflow_cdc.sources.base import ChangeSource

        self.source = build_source(source_spec)
        self.window = Window(source_spec["stream_id"], parse_ts(window_start), parse_ts(window_end))
        self.cdc_state_conn_id = cdc_state_conn_id or DEFAULT_CONN_ID
        # The base rule reads no source: its hook (credentials, say) is not even built.
        own_rule = type(self.source).readiness is not ChangeSource.readiness
        self.hook = source_hook(self.source, source_conn) if own_rule else None
        self._store = None

    def check(self, now: datetime):
        from airflow_cdc.hooks.state import CdcStateHook
        from airflow_cdc.pipeline.protocol import planning_readiness

        if self._store is None:
            self._store = CdcStateHook(cdc_state_conn_id=self.cdc_state_conn_id).get_store()
        decided = planning_readiness(self._store, self.window)
        if decided is not None:
            return decided
        known = self._store.list_partitions(self.window.stream_id)
        return self.source.readiness(self.window, now, known, self.hook)


def load_probe(classpath: str, kwargs: dict):
    """The probe ``module:Class`` built with ``kwargs``."""
    module_name, _, name = classpath.partition(":")
    if not module_name or not name:
        raise ValueError(f"readiness probe {classpath!r} is not 'module:Class'")
    return getattr(importlib.import_module(module_name), name)(**kwargs)


class CdcWindowReadyTrigger(BaseTrigger):
    """Fires when the probe says the window ``window_id`` may be planned.

    Events (``payload["status"]``): ``ready`` (``reason``, ``polls``); ``timeout`` (the
    ``deadline`` passed; ``reason`` is the probe's last answer); ``error`` (``message``).

    :param probe: the probe's class as ``module:Class`` (:class:`SourceWindowProbe`).
    :param probe_kwargs: the probe's arguments (JSON).
    :param window_id: the window, for the log and the events.
    :param poll_interval: seconds between two questions, unless the probe names a time.
    :param deadline: when to give up (an ISO timestamp; None: never).
    """

    def __init__(
        self,
        *,
        probe: str,
        probe_kwargs: dict,
        window_id: str,
        poll_interval: float = 30.0,
        deadline: str | None = None,
    ) -> None:
        super().__init__()
        self.probe = probe
        self.probe_kwargs = dict(probe_kwargs)
        self.window_id = window_id
        self.poll_interval = float(poll_interval)
        self.deadline = deadline

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "probe": self.probe,
                "probe_kwargs": self.probe_kwargs,
                "window_id": self.window_id,
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_cdc.model import parse_ts

        deadline = parse_ts(self.deadline) if self.deadline else None
        polls = 0
        last_reason = None
        try:
            probe = load_probe(self.probe, self.probe_kwargs)
        except Exception as error:  # noqa: BLE001 - the operator turns it into a failure
            yield TriggerEvent({"status": "error", "message": f"{type(error).__name__}: {error}"})
            return
        # The task asked just before it deferred. An answer that turns ready within moments
        # (an earlier interval's plan finishing, a catch-up window being recorded) would fire
        # the trigger before Airflow handled the deferral, and the scheduler then fails the
        # resumed task on the deferral's stale event (apache/airflow#72716).
        await asyncio.sleep(min(self.poll_interval, FIRST_ASK_AFTER_SECONDS))
        while True:
            polls += 1
            now = datetime.now(timezone.utc)
            try:
                status = await asyncio.to_thread(probe.check, now)
            except Exception as error:  # noqa: BLE001
                yield TriggerEvent(
                    {
                        "status": "error",
                        "message": f"window {self.window_id}: the readiness probe failed: "
                        f"{type(error).__name__}: {error}",
                    }
                )
                return
            if status.ready:
                self.log.info("window %s can be planned: %s", self.window_id, status.reason)
                yield TriggerEvent({"status": "ready", "reason": status.reason, "polls": polls,
                                   "options": dict(status.options)})
                return
            if status.reason != last_reason:
                self.log.info("window %s waits: %s", self.window_id, status.reason)
                last_reason = status.reason
            now = datetime.now(timezone.utc)
            if deadline is not None and now >= deadline:
                yield TriggerEvent({"status": "timeout", "reason": status.reason, "polls": polls})
                return
            sleep = self.poll_interval
            if status.retry_at is not None:
                sleep = max(0.5, (status.retry_at - now).total_seconds())
            if deadline is not None:
                sleep = min(sleep, max(0.0, (deadline - now).total_seconds()))
            await asyncio.sleep(sleep)
