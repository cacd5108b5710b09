"""The deferred gate's trigger: polls the state store, fires once the window is proven complete."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from airflow_cdc.model import WindowState, format_ts
from airflow_cdc.triggers.gate import CdcWindowCompleteTrigger

from cdc_airflow_support import T0, W1, applied


def trigger(**overrides) -> CdcWindowCompleteTrigger:
    kwargs = dict(
        stream_id="orders",
        window_start=format_ts(W1.start),
        window_end=format_ts(W1.end),
        poll_interval=0.05,
    )
    return CdcWindowCompleteTrigger(**{**kwargs, **overrides})


def first_event(t: CdcWindowCompleteTrigger, timeout: float = 30) -> dict:
    async def run():
        async for event in t.run():
            return event.payload

    return asyncio.run(asyncio.wait_for(run(), timeout))


def soon() -> str:
    return format_ts(datetime.now(timezone.utc) + timedelta(seconds=0.3))


def test_trigger_fires_open_when_the_window_is_complete(store):
    applied(store)
    event = first_event(trigger())
    assert (event["status"], event["reason"]) == (
        "open", "every partition live in the window reached its end"
    )


def test_trigger_keeps_polling_while_closed_and_fires_once_apply_commits(store):
    applied(store, apply=False)

    async def run():
        events = trigger().run()
        first = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(0.3)
        assert not first.done()
        await asyncio.to_thread(store.mark_applied, W1, "run", {"lake.current.orders": 7})
        return (await asyncio.wait_for(first, 30)).payload

    event = asyncio.run(run())
    assert event["status"] == "open" and event["polls"] > 1


def test_trigger_at_its_deadline_names_the_lagging_partition_and_since_when(store):
    stalled_at = T0 + timedelta(minutes=20)
    applied(store, b_watermark=stalled_at)
    event = first_event(trigger(deadline=soon()))
    assert event["status"] == "timeout"
    assert [(p["partition"], p["watermark"]) for p in event["lagging"]] == [
        ("b", "2024-05-01T09:20:00.000000Z")
    ]
    assert event["lagging"][0]["since"] and event["lagging"][0]["stalled_seconds"] >= 0
    assert "lowest b at 2024-05-01T09:20:00.000000Z" in event["reason"]


def test_trigger_survives_serialization_to_its_import_path(store):
    from airflow.sdk.module_loading import import_string

    original = trigger(deadline="2024-05-01T12:00:00.000000Z")
    classpath, kwargs = original.serialize()
    rebuilt = import_string(classpath)(**kwargs)
    assert classpath == "airflow_cdc.triggers.gate.CdcWindowCompleteTrigger"
    assert rebuilt.serialize() == original.serialize()


def test_running_the_trigger_twice_fires_twice_and_leaves_the_window_as_it_was(store):
    applied(store)
    before = store.get_window("orders", W1.start)
    events = [first_event(trigger()), first_event(trigger())]
    assert [e["status"] for e in events] == ["open", "open"]
    after = store.get_window("orders", W1.start)
    assert (after.state, after.updated_at) == (WindowState.APPLIED, before.updated_at)


def test_an_unreadable_state_store_ends_the_trigger_with_an_error_naming_it(store, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_CDC_BROKEN",
        '{"conn_type": "cdc_state", "extra": {"url": "mysql://cdc@127.0.0.1/cdc"}}',
    )
    event = first_event(trigger(cdc_state_conn_id="cdc_broken"))
    assert event["status"] == "error"
    assert "cdc_broken" in event["message"] and "uses mysql" in event["message"]
