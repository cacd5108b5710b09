"""The airflow-cdc command: status, inspect-window, reset-stream and lag-chart on a state store."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from airflow_cdc.cli import main
from airflow_cdc.model import Window

from cdc_airflow_support import W1, applied

W2 = Window("orders", W1.end, W1.end + timedelta(hours=1))
STALLED_AT = "2024-05-01T10:20:00.000000Z"


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def two_windows(store) -> None:
    """W1 complete; W2 applied with partition b stalled 20 minutes into it."""
    applied(store, window=W1)
    store.mark_complete(W1)
    applied(store, window=W2, b_watermark=W2.start + timedelta(minutes=20))


def test_the_console_script_is_installed_and_answers_help():
    script = Path(sys.executable).parent / "airflow-cdc"
    proc = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    for command in ("status", "inspect-window", "reset-stream", "lag-chart"):
        assert command in proc.stdout


def test_status_lists_the_stalled_partition_first_with_its_watermark(store):
    two_windows(store)
    code, out = run("status", "--stall-seconds", "0")
    partitions = out.split("partitions:")[1].strip().splitlines()
    assert code == 0
    assert "stream orders (test): 2 window(s), complete up to 2024-05-01T10:00:00.000000Z" in out
    assert partitions[0].split()[1] == "b" and f"watermark {STALLED_AT}" in partitions[0]
    assert partitions[1].split()[1] == "a"


def test_status_shows_the_open_window_before_complete_ones_with_its_lag(store):
    two_windows(store)
    code, out = run("status")
    windows = [
        " ".join(line.split())
        for line in out.split("windows:")[1].split("partitions:")[0].strip().splitlines()
    ]
    assert code == 0
    assert "APPLIED low watermark 2024-05-01T10:20:00.000000Z lag 40m00s" in windows[0]
    assert "COMPLETE low watermark 2024-05-01T10:00:00.000000Z lag 0s" in windows[1]


def test_inspect_window_shows_counts_gate_reason_and_partitions(store):
    two_windows(store)
    code, out = run("inspect-window", "orders", "2024-05-01T10:00:00Z")
    flat = " ".join(out.split())
    assert code == 0
    assert "state APPLIED (attempt 1)" in flat
    assert "'changes': 5" in flat
    assert "lowest b at 2024-05-01T10:20:00.000000Z" in flat
    assert f"b planned from 2024-05-01T10:00:00.000000Z to {STALLED_AT}, 0 records" in flat


def test_inspect_window_of_an_unknown_start_names_the_latest_starts(store, capsys):
    two_windows(store)
    code, _ = run("inspect-window", "orders", "2024-05-01T12:00:00Z")
    assert code == 2
    assert "latest window starts: ['2024-05-01T09:00:00.000000Z'" in capsys.readouterr().err


def test_reset_stream_without_confirmation_changes_nothing(store, monkeypatch):
    two_windows(store)
    monkeypatch.setattr("builtins.input", lambda prompt: "no")
    code, out = run("reset-stream", "orders")
    assert code == 1 and "nothing was changed" in out
    assert len(store.list_windows("orders")) == 2


def test_reset_stream_confirmed_with_the_stream_id_forgets_the_stream(store, monkeypatch):
    two_windows(store)
    monkeypatch.setattr("builtins.input", lambda prompt: "orders")
    code, out = run("reset-stream", "orders")
    assert code == 0 and "stream 'orders' reset" in out
    assert [s.stream_id for s in store.streams()] == []


def test_lag_chart_writes_an_svg_with_titles_axes_and_a_bar_per_window(store, tmp_path):
    two_windows(store)
    code, out = run("lag-chart", "orders", "-o", str(tmp_path / "lag.svg"))
    svg = (tmp_path / "lag.svg").read_text()
    assert code == 0 and "2 window(s) of orders" in out
    assert "<svg" in svg and "orders: 2 window(s) from 2024-05-01T09:00" in svg
    for label in ("Freshness and lag per window", "Changes per window",
                  "Step durations per window", "window start (UTC)", "change rows",
                  "lag (minutes)", "delay (days)"):
        assert f">{label}<" in svg, label
    assert 'id="lag-2024-05-01T09:00:00.000000Z"' in svg
    assert 'id="lag-2024-05-01T10:00:00.000000Z"' in svg
    assert svg.count('id="changes-') == 2


def test_lag_chart_writes_a_png_with_the_title_and_the_state_colours(store, tmp_path):
    from PIL import Image

    two_windows(store)
    code, _ = run("lag-chart", "orders", "-o", str(tmp_path / "lag.png"))
    image = Image.open(tmp_path / "lag.png")
    colours = {rgb for _, rgb in image.convert("RGB").getcolors(maxcolors=1 << 20)}
    assert code == 0 and image.format == "PNG" and image.size == (1100, 820)
    assert image.info["Title"].startswith("orders: 2 window(s) from 2024-05-01T09:00")
    assert (21, 101, 192) in colours  # the APPLIED window's lag bar (#1565c0)
    assert (25, 118, 210) in colours  # the change bars (#1976d2)


def test_lag_chart_refuses_an_output_that_is_neither_svg_nor_png(store, tmp_path, capsys):
    two_windows(store)
    code, _ = run("lag-chart", "orders", "-o", str(tmp_path / "lag.jpg"))
    assert code == 2
    assert "must end in .svg or .png" in capsys.readouterr().err


def test_status_reads_the_store_named_by_url_without_printing_a_password(store):
    two_windows(store)
    code, out = run("status", "--url", os.environ["AIRFLOW_CDC_STATE_URL"])
    assert code == 0 and "stream orders" in out


def test_release_lease_confirmed_with_the_holder_lets_another_run_take_the_window(store, monkeypatch):
    applied(store, window=W1, apply=False)
    monkeypatch.setattr("builtins.input", lambda prompt: "run")
    code, out = run("release-lease", "orders", "2024-05-01T09:00:00Z")
    assert code == 0 and "released the lease of 'run'" in out
    taken = store.plan_window(W1, "dag/another-run", 600)
    assert (taken.window.lease_owner, taken.window.attempt) == ("dag/another-run", 2)


def test_release_lease_of_a_run_that_no_longer_holds_the_window_changes_nothing(store, capsys):
    applied(store, window=W1, apply=False)
    code, _ = run("release-lease", "orders", "2024-05-01T09:00:00Z", "--owner", "dag/old", "--yes")
    assert code == 2
    assert "is held by 'run', not 'dag/old'" in capsys.readouterr().err
    assert store.get_window("orders", W1.start).lease_owner == "run"


def test_release_lease_without_a_terminal_or_yes_refuses_naming_yes_and_keeps_the_lease(store):
    applied(store, window=W1, apply=False)
    script = Path(sys.executable).parent / "airflow-cdc"
    done = subprocess.run(
        [str(script), "release-lease", "orders", "2024-05-01T09:00:00Z"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env={**os.environ},
    )

    assert done.returncode == 2, done.stderr
    assert "add --yes" in done.stderr and "EOFError" not in done.stderr
    assert store.get_window("orders", W1.start).lease_owner == "run"
