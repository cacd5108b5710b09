"""A stream's windows as charts, drawn by matplotlib: what ``airflow-cdc lag-chart`` writes and
the CDC view in the Airflow UI shows.

One figure, three panels over the same time axis (window start, UTC), one bar per window:

1. **freshness and lag**: each window's lag (how far its low watermark trails its end, bars
   coloured by the window's state) and its delay (how long after its end it became COMPLETE,
   a line);
2. **changes**: change rows per window, dead letters stacked on top in red;
3. **step durations**: the seconds each protocol step took, stacked (plan, extract, commit,
   apply, gate), as the tasks recorded them.

Durations are shown in the unit that suits the largest value (seconds, minutes, hours or
days) and the axis says which. Definitions: :mod:`airflow_cdc.pipeline.stream_health`.
The figure is rendered with matplotlib's object API (no pyplot state), so concurrent requests
of the api-server never share a figure.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from airflow_cdc.model import CdcError, WindowState, format_ts

FORMATS = ("png", "svg")
# The state colours the view uses too (airflow_cdc/plugins/static/view.css).
STATE_COLOURS = {
    WindowState.COMPLETE: "#2e7d32",
    WindowState.APPLIED: "#1565c0",
    WindowState.COMMITTED: "#5e35b1",
    WindowState.EXTRACTED: "#f9a825",
    WindowState.PLANNED: "#9e9e9e",
    WindowState.FAILED: "#c62828",
}
STEP_COLOURS = {
    "plan": "#90a4ae",
    "extract": "#42a5f5",
    "commit": "#7e57c2",
    "apply": "#26a69a",
    "gate": "#ffb300",
}
DEAD_LETTER_COLOUR = "#c62828"
DELAY_COLOUR = "#37474f"
_UNITS = ((2 * 86400, 86400.0, "days"), (7200, 3600.0, "hours"), (120, 60.0, "minutes"))


def time_unit(largest_seconds: float) -> tuple[float, str]:
    """(seconds per unit, unit name) for an axis whose largest value is ``largest_seconds``."""
    for threshold, size, name in _UNITS:
        if largest_seconds >= threshold:
            return size, name
    return 1.0, "seconds"


def window_figure(stream_id: str, windows: Sequence, now: datetime | None = None):
    """The three panels for ``windows`` (WindowHealth, any order), as a matplotlib Figure."""
    from matplotlib import dates as mdates
    from matplotlib.figure import Figure

    if not windows:
        raise CdcError(f"stream {stream_id!r} has no windows yet: nothing to chart")
    windows = sorted(windows, key=lambda w: w.record.start)
    width = min((w.record.end - w.record.start) for w in windows) * 0.8
    bars = _Bars(x=[mdates.date2num(w.record.start) for w in windows], width=width / timedelta(days=1))

    # Fixed margins: matplotlib's constrained layout would double the drawing time.
    figure = Figure(figsize=(11, 8.2), dpi=100)
    lag_axes, change_axes, step_axes = figure.subplots(
        3, 1, sharex=True,
        gridspec_kw={"left": 0.07, "right": 0.93, "top": 0.91, "bottom": 0.08, "hspace": 0.32},
    )
    first, last = windows[0].record, windows[-1].record
    figure.suptitle(
        f"{stream_id}: {len(windows)} window(s) from {format_ts(first.start)[:16]} to "
        f"{format_ts(last.end)[:16]} UTC",
        fontsize=13, fontweight="bold",
    )
    _lag_panel(lag_axes, windows, bars)
    _change_panel(change_axes, windows, bars)
    _step_panel(step_axes, windows, bars)
    _time_axis(step_axes, bars)
    for axes in (lag_axes, change_axes, step_axes):
        axes.grid(axis="y", color="#e0e0e0", linewidth=0.8)
        axes.set_axisbelow(True)
        for side in ("top", "right"):
            axes.spines[side].set_visible(False)
    if now is not None:
        figure.text(0.005, 0.005, f"drawn {format_ts(now)[:19]}Z by airflow-cdc", ha="left",
                    va="bottom", fontsize=7, color="#757575")
    return figure


@dataclass(frozen=True)
class _Bars:
    """Where each window's bar stands: its left edge (matplotlib date numbers) and the width
    of every bar (days)."""

    x: list[float]
    width: float


def _lag_panel(lag_axes, windows: Sequence, bars: _Bars) -> None:
    """Panel 1, freshness and lag: lag bars on the left axis, the delay line on its own right
    axis (a replayed history completes long after its windows ended: one scale would hide
    the lag)."""
    from matplotlib.patches import Patch

    x, width_days = bars.x, bars.width
    largest = max([w.lag_seconds for w in windows] + [1.0])
    size, unit = time_unit(largest)
    lag_bars = lag_axes.bar(
        x, [w.lag_seconds / size for w in windows], width=width_days, align="edge",
        color=[STATE_COLOURS[w.record.state] for w in windows],
    )
    for bar, w in zip(lag_bars, windows):
        bar.set_gid(f"lag-{format_ts(w.record.start)}")
    lag_axes.set_title("Freshness and lag per window", loc="left", fontsize=11)
    lag_axes.set_ylabel(f"lag ({unit})")
    lag_axes.set_ylim(0, max(1.0, largest / size) * 1.35)
    states = sorted({w.record.state for w in windows}, key=lambda s: list(STATE_COLOURS).index(s))
    handles = [Patch(color=STATE_COLOURS[s], label=f"lag, {s.value}") for s in states]
    delays = [(xi + width_days / 2, w.delay_seconds)
              for xi, w in zip(x, windows) if w.delay_seconds is not None]
    if delays:
        handles.append(_delay_line(lag_axes, delays))
    lag_axes.legend(handles=handles, loc="upper left", fontsize=8, ncols=4, frameon=False)
    if not any(w.lag_seconds for w in windows):
        lag_axes.text(0.5, 0.4, "lag 0: every window's low watermark reached its end",
                      transform=lag_axes.transAxes, ha="center", va="center", color="#2e7d32")


def _delay_line(lag_axes, delays: list[tuple[float, float]]):
    """Each window's delay (x, seconds) as a line on the lag panel's own right axis."""
    delay_size, delay_unit = time_unit(max(d for _, d in delays) or 1.0)
    delay_axes = lag_axes.twinx()
    (line,) = delay_axes.plot(
        [d[0] for d in delays], [d[1] / delay_size for d in delays], color=DELAY_COLOUR,
        marker="o", markersize=4, linewidth=1.5,
        label="delay: window end → COMPLETE (freshness when the gate opened)",
    )
    delay_axes.set_ylabel(f"delay ({delay_unit})", color=DELAY_COLOUR)
    delay_axes.set_ylim(0, max(d for _, d in delays) / delay_size * 1.35 or 1.0)
    delay_axes.spines["top"].set_visible(False)
    return line


def _change_panel(change_axes, windows: Sequence, bars: _Bars) -> None:
    """Panel 2: change rows per window, dead letters stacked on top."""
    x, width_days = bars.x, bars.width
    changes = [w.changes or 0 for w in windows]
    dead = [w.dead_letters for w in windows]
    change_bars = change_axes.bar(x, changes, width=width_days, align="edge", color="#1976d2",
                                  label="changes")
    for bar, w in zip(change_bars, windows):
        bar.set_gid(f"changes-{format_ts(w.record.start)}")
    if any(dead):
        change_axes.bar(x, dead, bottom=changes, width=width_days, align="edge",
                        color=DEAD_LETTER_COLOUR, label="dead letters")
    change_axes.set_title("Changes per window", loc="left", fontsize=11)
    change_axes.set_ylabel("change rows")
    change_axes.set_ylim(0, max([c + d for c, d in zip(changes, dead)] + [1]) * 1.3)
    change_axes.legend(loc="upper left", fontsize=8, ncols=2, frameon=False)


def _step_panel(step_axes, windows: Sequence, bars: _Bars) -> None:
    """Panel 3: the seconds each protocol step took, stacked."""
    x, width_days = bars.x, bars.width
    recorded = [w for w in windows if w.step_seconds]
    largest_step = max([sum(w.step_seconds.values()) for w in recorded] + [1.0])
    size, unit = time_unit(largest_step)
    bottom = [0.0] * len(windows)
    for step, colour in STEP_COLOURS.items():
        heights = [w.step_seconds.get(step, 0.0) / size for w in windows]
        if not any(heights):
            continue
        step_axes.bar(x, heights, bottom=bottom, width=width_days, align="edge", color=colour,
                      label=step)
        bottom = [b + h for b, h in zip(bottom, heights)]
    step_axes.set_title("Step durations per window", loc="left", fontsize=11)
    step_axes.set_ylabel(f"{unit}")
    step_axes.set_ylim(0, max(bottom + [largest_step / size]) * 1.3)
    if recorded:
        step_axes.legend(loc="upper left", fontsize=8, ncols=5, frameon=False)
    else:
        step_axes.text(0.5, 0.5, "no step timings recorded for these windows",
                       transform=step_axes.transAxes, ha="center", va="center", color="#616161")


def _time_axis(step_axes, bars: _Bars) -> None:
    """The shared time axis, labelled under the bottom panel, a little room on its right."""
    from matplotlib import dates as mdates

    step_axes.set_xlabel("window start (UTC)")
    locator = mdates.AutoDateLocator(minticks=3, maxticks=10)
    step_axes.xaxis.set_major_locator(locator)
    step_axes.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    step_axes.set_xlim(bars.x[0] - bars.width * 0.5, bars.x[-1] + bars.width * 1.75)


def render(figure, fmt: str) -> bytes:
    """The figure as PNG or SVG bytes (SVG keeps its text as text, so it can be searched)."""
    from matplotlib import rc_context

    if fmt not in FORMATS:
        raise CdcError(f"chart format {fmt!r} is not one of {', '.join(FORMATS)}: "
                       f"name the file .png or .svg")
    title = figure.get_suptitle()
    buffer = io.BytesIO()
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "airflow-cdc"}):
        figure.savefig(buffer, format=fmt, metadata={"Title": title})
    return buffer.getvalue()


def window_chart(stream_id: str, windows: Sequence, fmt: str, now: datetime | None = None) -> bytes:
    """The charts of ``windows`` rendered as ``fmt`` (png or svg)."""
    return render(window_figure(stream_id, windows, now), fmt)
