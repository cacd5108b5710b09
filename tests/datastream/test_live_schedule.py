"""``make live-datastream`` in small: the Datastream DAG on a real clock under Airflow's own
services (scheduler, triggerer, dag-processor, api-server) while a writer process lands files.

Two 1-minute windows. The tests assert what the protocol decides, not how fast this machine
is (``make live-datastream`` prints the gate delays and checks them against window +
lateness + settle + 60 s): every window completes on evidence it read, no plan read before
its evidence could exist, and the targets equal the source tables' true final state.
"""

from __future__ import annotations

import pytest

from demo.live_datastream import LiveSettings, run_live

pytestmark = pytest.mark.live  # make test-live (CI runs it); make test keeps Bigtable's live test

SETTINGS = LiveSettings(windows=2, window_seconds=60, lateness_seconds=10, settle_seconds=2,
                        file_seconds=3, wait_poke_seconds=2, seed=3)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    return run_live(SETTINGS, tmp_path_factory.mktemp("live") / "run", log=print)  # shown when a test fails


def test_every_scheduled_window_completes_without_a_failed_run(live):
    assert live.failed_runs == []
    assert len(live.windows) >= SETTINGS.windows


def test_no_window_is_planned_before_its_evidence_can_exist(live):
    earliest = SETTINGS.lateness_seconds + SETTINGS.settle_seconds
    assert all(w["planned_after_end_s"] >= earliest for w in live.windows), live.windows


def test_every_gate_opens_on_read_progress_past_the_window_end_not_on_idleness(live):
    assert all(w["low_watermark"] >= w["end"] and not w["idle_declared"] for w in live.windows)


def test_targets_equal_the_true_state_of_the_source_tables(live):
    assert live.comparison["mismatches"] == 0, live.comparison
    assert all(t["target"] > 0 for t in live.comparison["tables"].values())
