"""Steps 0 and 1 of the window protocol: may the window be planned, and planning it.

The Airflow side asks Airflow what only Airflow knows (the state of a lease holder's run, this
task in the DAG's previous run) and hands the answers in; the rules live here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_cdc.model import Readiness, Window, format_ts
from airflow_cdc.pipeline.protocol import StreamConfig, plan_window
from airflow_cdc.sources.base import Discovery
from airflow_cdc.state.errors import WindowLeaseHeldError, WindowOrderError

# Task instance states of a task that may still succeed without anyone clearing it.
UNFINISHED_TASK_STATES = frozenset({
    None, "scheduled", "queued", "running", "deferred", "up_for_retry", "up_for_reschedule",
    "restarting",
})


def plan_or_take_over(store, window: Window, plan: Callable[[], Any],
                      holder_gone: Callable[[str | None], tuple[bool, str]], log=None) -> Any:
    """Run ``plan`` (a call that plans the window); take the window over from a dead run.

    When another run holds the window's lease and ``holder_gone(holder)`` says that run can
    act no more (it finished, or Airflow no longer has it), its lease is released and the
    window planned again, which takes it over (attempt + 1). A run that may still act keeps
    the window: WindowLeaseHeldError names it and what ``holder_gone`` said of it.
    """
    try:
        return plan()
    except WindowLeaseHeldError as held:
        gone, said = holder_gone(held.holder)
        if not gone:
            raise WindowLeaseHeldError(f"{held} ({said})", holder=held.holder) from held
        if log is not None:
            log.warning("window %s is leased to %s, whose DAG run is %s: taking it over",
                        window.window_id, held.holder, said)
        store.release_lease(window, held.holder)
        return plan()


def previous_interval_wait(window: Window, task_id: str, previous) -> str | None:
    """A stream's first window may not leave the interval before it without a record.

    The state store checks that every later window starts where the stream's latest one
    ends, but it knows a stream only from its first plan: an interval whose plan failed
    before that (its wait for evidence timed out, its source refused) left no row. So the
    first window looks at ``previous``, this plan task in the DAG's previous run (``run_id``,
    ``start``, ``end``, ``state``; None when there is none): when that run covers the
    interval that ends where this window starts and its plan did not succeed, planning here
    would start the stream after that interval and it would never get a window, gate or
    Asset event. A previous plan that succeeded (the stream was reset since) or a run without
    this task (a stream added since) is no gap.

    Returns None when this window may be planned, the reason to wait while that plan is still
    unfinished (with catchup, runs of past intervals become ready together); raises
    WindowOrderError naming the interval and the fix when that plan ended without success.
    """
    if previous is None or previous.end != window.start or previous.state == "success":
        return None
    interval = f"[{format_ts(previous.start)}, {format_ts(previous.end)})"
    if previous.state in UNFINISHED_TASK_STATES:
        return (
            f"the stream's first window waits for the interval before it, {interval}: its plan "
            f"task {task_id!r} in DAG run {previous.run_id!r} is {previous.state or 'not run yet'}"
        )
    raise WindowOrderError(
        f"window {window.window_id} of {window.stream_id!r} would be the stream's first "
        f"window, but the interval before it, {interval}, has no window: its plan task "
        f"{task_id!r} in DAG run {previous.run_id!r} is {previous.state}, and planning this "
        f"window first would leave {interval} without a record, gate or Asset event. Clear "
        f"{task_id!r} of {previous.run_id!r} so it plans {interval} first; this window follows "
        f"once that one commits (clear this plan task then, or let its retries run it). To "
        f"start the stream at {format_ts(window.start)} on purpose and never read {interval}, "
        f"mark that plan task success instead"
    )


def first_window_order(store, window: Window, task_id: str, previous_run: Callable[[], Any],
                       status: Readiness | None) -> Readiness | None:
    """``status`` (the source's answer), or a not-ready answer while a stream's first window
    must wait for the plan of the interval before it (:func:`previous_interval_wait`; the
    previous run is asked only for a stream the state store has no window of). With
    ``status`` None, None when nothing is to wait for."""
    if status is not None and not status.ready:
        return status
    if store.get_window(window.stream_id, window.start) or store.newest_windows(window.stream_id, 1):
        return status
    reason = previous_interval_wait(window, task_id, previous_run())
    return status if reason is None else Readiness(False, reason)


def next_ask_in(status: Readiness, now: datetime, deadline: datetime, poke_interval: float) -> float:
    """Seconds to wait before asking the source again: its ``retry_at`` when it named one,
    else ``poke_interval``; never past ``deadline`` and never under half a second."""
    pause = poke_interval
    if status.retry_at is not None:
        pause = max(0.5, (status.retry_at - now).total_seconds())
    return min(pause, max(0.5, (deadline - now).total_seconds()))


def wait_deadline(started: datetime, timeout: float) -> datetime:
    return started + timedelta(seconds=timeout)


def wait_timed_out_message(window: Window, timeout: float, reason: str | None) -> str:
    """Why the plan gave up waiting: the window stays unplanned and nothing is skipped."""
    return (
        f"window {window.window_id} of {window.stream_id!r} could not be planned within "
        f"{timeout:.0f}s: {reason}. The window stays unplanned (nothing is "
        f"skipped); clear the plan task to wait again, or fix the source"
    )


def plan_step(store, config: StreamConfig, window: Window, owner: str, lease_seconds: float, *,
              source, hook, catalog_name: str, decided: dict | None,
              guard: Callable[[Callable[[], Any]], Any]) -> tuple[Any, dict]:
    """Plan the window (step 1); its plan and the plan's summary.

    ``decided`` are plan options the readiness answer gave (kept only on a first plan);
    ``guard`` runs the planning call (:func:`plan_or_take_over` with the run's own answers).
    A window planned before reads its recorded partitions: nothing new is looked for. A
    stream's first window was held to the interval before it by the wait that led here
    (:func:`first_window_order`), just before this plan.
    """
    now = datetime.now(timezone.utc)
    planned = store.get_window(window.stream_id, window.start) is not None
    found = Discovery() if planned else source.discover(window, now, hook)
    plan = guard(lambda: plan_window(
        store,
        config,
        window,
        owner,
        lease_seconds,
        source.initial_positions(window),
        catalog_name,
        new_partitions=found.partitions,
        plan_options=lambda kept, positions: {
            **(dict(decided or {}) if kept is None else {}),
            **source.plan_options(kept, now, hook, positions, window=window),
        },
    ))
    return plan, found


def plan_summary(window: Window, plan, found, source) -> dict:
    """The plan task's XCom summary: attempt, partitions, what discovery saw, the source's own."""
    return {
        "window_id": window.window_id,
        "attempt": plan.attempt,
        "partitions": len(plan.positions),
        "pending_children": len(plan.pending_children),
        **found.seen,
        **source.plan_summary(plan),
    }
