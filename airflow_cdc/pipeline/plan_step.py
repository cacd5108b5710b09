"""Steps 0 and 1 of the window protocol: may the window be planned, and planning it.

The Airflow side asks Airflow what only Airflow knows (the state of a lease holder's run, this
task in the DAG's previous run) and hands the answers in; the rules live here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_cdc.model import Readiness, Window, format_ts
from airflow_cdc.pipeline.catchup import catchup_window
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


def previous_interval_wait(window: Window, task_id: str, previous, first: bool = True) -> str | None:
    """A window may not leave the interval before it without a record.

    The state store checks that every later window starts where the stream's latest one
    ends, but it can only refuse: it knows a stream from its first plan, and it cannot tell
    an interval whose run will still plan it (with catchup or ``max_active_runs`` above 1,
    runs of past intervals start together) from one whose plan failed (its wait for
    evidence timed out, its source refused). So a window that would start after the
    stream's last one (``first``: the stream has none yet) looks at ``previous``, this plan
    task in the DAG's previous run (``run_id``, ``start``, ``end``, ``state``; None when
    there is none): when that run's interval ends where this window starts and its plan did
    not succeed, planning here would leave that interval without a window, gate or Asset
    event. A previous plan that succeeded (the stream was reset since) or a run without
    this task (a stream added since) is no gap the previous run can fill.

    Returns None when this window may be planned, the reason to wait while that plan is still
    unfinished; raises WindowOrderError naming the interval and the fix when that plan ended
    without success.
    """
    if previous is None or previous.end != window.start or previous.state == "success":
        return None
    interval = f"[{format_ts(previous.start)}, {format_ts(previous.end)})"
    which = "the stream's first window" if first else "this window"
    if previous.state in UNFINISHED_TASK_STATES:
        return (
            f"{which} waits for the interval before it, {interval}: its plan task {task_id!r} "
            f"in DAG run {previous.run_id!r} is {previous.state or 'not run yet'}"
        )
    raise WindowOrderError(
        f"window {window.window_id} of {window.stream_id!r} would be "
        f"{which if first else 'planned'}, but the interval before it, {interval}, has no "
        f"window: its plan task {task_id!r} in DAG run {previous.run_id!r} is "
        f"{previous.state}, and planning this window first would leave {interval} without a "
        f"record, gate or Asset event. Clear {task_id!r} of {previous.run_id!r} so it plans "
        f"{interval} first; this window follows once that one commits (clear this plan task "
        f"then, or let its retries run it). To start the stream at {format_ts(window.start)} "
        f"on purpose and never read {interval}, mark that plan task success instead"
        + ("" if first else " and reset the stream")
    )


def previous_interval_order(store, window: Window, task_id: str, previous_run: Callable[[], Any],
                            status: Readiness | None) -> Readiness | None:
    """``status`` (the source's answer), or a not-ready answer while the window must wait for
    the plan of the interval before it (:func:`previous_interval_wait`; the previous run is
    asked only when the stream has no window, or none reaching the window's start). With
    ``status`` None, None when nothing is to wait for."""
    if status is not None and not status.ready:
        return status
    stream, start = window.stream_id, window.start
    if store.get_window(stream, start) or store.covering_window(stream, start):
        return status
    newest = store.newest_windows(stream, 1)
    if newest and newest[0].end >= start:
        return status
    reason = previous_interval_wait(window, task_id, previous_run(), first=not newest)
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
              guard: Callable[[Callable[[], Any]], Any],
              following: Sequence[datetime] = ()) -> tuple[Any, dict]:
    """Plan the run's window (step 1) from its interval ``window``; the plan and what
    discovery found.

    ``decided`` are plan options the readiness answer gave (kept only on a first plan);
    ``guard`` runs the planning call (:func:`plan_or_take_over` with the run's own answers).
    A window planned before keeps its recorded end and partitions: nothing new is looked
    for. A first plan may extend the window over ``following`` (the ends of the intervals
    after it, :func:`~airflow_cdc.pipeline.catchup.following_intervals`) as far as the
    source says they are ready (:func:`~airflow_cdc.pipeline.catchup.catchup_window`). A
    window was held to the interval before it by the wait that led here
    (:func:`previous_interval_order`), just before this plan.
    """
    now = datetime.now(timezone.utc)
    recorded = store.get_window(window.stream_id, window.start)
    if recorded is not None:
        window = recorded.window
    elif following:
        window = catchup_window(window, following, extension_ready(store, source, now, hook))
    found = Discovery() if recorded is not None else source.discover(window, now, hook)
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


def extension_ready(store, source, now: datetime, hook) -> Callable[[Window], bool]:
    """Whether a catch-up window may reach to its end by the source's rule now: a plain yes
    (an answer that needs plan options, such as a window opened by a stall policy, reads
    only its own interval)."""
    known: list = []

    def ready(window: Window) -> bool:
        if not known:
            known.append(store.list_partitions(window.stream_id))
        status = source.readiness(window, now, known[0], hook)
        return status.ready and not status.options

    return ready


def plan_summary(window: Window, plan, found, source) -> dict:
    """The plan task's XCom summary: attempt, partitions, what discovery saw, the source's own.

    ``window`` is the window planned (a catch-up window's end lies past the run's interval).
    """
    return {
        "window_id": window.window_id,
        "window_end": format_ts(window.end),
        "attempt": plan.attempt,
        "partitions": len(plan.positions),
        "pending_children": len(plan.pending_children),
        **found.seen,
        **source.plan_summary(plan),
    }
