"""The bounded reads behind `airflow-cdc status` and the CDC view, and the recorded step timings."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_cdc.model import WindowState
from airflow_cdc.state import StateStore
from airflow_cdc.state.migrations import HEAD_VERSION

from .helpers import LEASE, T0, at, continuing, finished, position, run_window, window


def four_windows(store) -> None:
    """Windows 0 and 1 COMPLETE, window 2 COMMITTED, window 3 PLANNED.

    Partition a keeps up with every window, b stops 20 minutes into window 2, c finished in 0.
    """
    run_window(store, window(0), [continuing("a", window(0).end), continuing("b", window(0).end),
                                  finished("c", at(10))],
               initial=[position("a"), position("b"), position("c")])
    store.mark_applied(window(0), "run-1", {})
    store.mark_complete(window(0))
    run_window(store, window(1), [continuing("a", window(1).end), continuing("b", window(1).end)])
    store.mark_applied(window(1), "run-1", {})
    store.mark_complete(window(1))
    run_window(store, window(2), [continuing("a", window(2).end),
                                  continuing("b", window(2).start + timedelta(minutes=20))])
    store.plan_window(window(3), "run-1", LEASE)


def test_newest_windows_come_newest_first_up_to_the_limit(orders):
    four_windows(orders)
    newest = orders.newest_windows("orders", 2)
    assert [w.start for w in newest] == [window(3).start, window(2).start]


def test_newest_windows_of_some_states_skip_the_others(orders):
    four_windows(orders)
    complete = orders.newest_windows("orders", 5, states=[WindowState.COMPLETE])
    assert [w.start for w in complete] == [window(1).start, window(0).start]


def test_newest_windows_of_several_states_merge_newest_first(orders):
    four_windows(orders)
    wanted = [WindowState.COMPLETE, WindowState.PLANNED, WindowState.COMMITTED]
    newest = orders.newest_windows("orders", 3, states=wanted)
    assert [(w.start, w.state) for w in newest] == [
        (window(3).start, WindowState.PLANNED), (window(2).start, WindowState.COMMITTED),
        (window(1).start, WindowState.COMPLETE),
    ]


def test_newest_windows_before_a_start_give_the_next_page(orders):
    four_windows(orders)
    page = orders.newest_windows("orders", 2, before=window(2).start)
    assert [w.start for w in page] == [window(1).start, window(0).start]


def test_a_limit_below_one_is_refused_naming_the_value(orders):
    with pytest.raises(ValueError, match="limit 0 is not a positive whole number"):
        orders.newest_windows("orders", 0)


def test_window_state_counts_count_each_state(orders):
    four_windows(orders)
    assert orders.window_state_counts("orders") == {
        WindowState.COMPLETE: 2, WindowState.COMMITTED: 1, WindowState.PLANNED: 1,
    }


def test_lowest_live_partitions_come_lowest_watermark_first_without_finished_ones(orders):
    four_windows(orders)
    lowest = orders.lowest_live_partitions("orders", 5)
    assert [(p.partition_id, p.watermark) for p in lowest] == [
        ("b", window(2).start + timedelta(minutes=20)), ("a", window(2).end),
    ]
    assert [p.partition_id for p in orders.lowest_live_partitions("orders", 1)] == ["b"]


def test_partitions_by_id_read_only_the_ids_asked_for(orders):
    four_windows(orders)
    found = orders.partitions_by_id("orders", ["c", "a", "nosuch"])
    assert [(p.partition_id, p.state.value) for p in found] == [("a", "RUNNING"), ("c", "FINISHED")]


def test_live_partitions_are_counted_with_those_behind_an_instant(orders):
    four_windows(orders)
    assert orders.count_live_partitions("orders") == (2, 0)
    assert orders.count_live_partitions("orders", behind=window(2).end) == (2, 1)


def test_a_recorded_step_is_read_back_by_window_and_step(orders):
    four_windows(orders)
    orders.record_step(window(1), "extract", at(70), at(70.5), {"files": 3})
    steps = orders.window_steps("orders", [window(1).start, window(2).start])
    extract = steps[window(1).start]["extract"]
    assert list(steps) == [window(1).start]
    assert (extract.seconds, extract.details) == (30.0, {"files": 3})


def test_recording_a_step_again_replaces_the_earlier_run(orders):
    four_windows(orders)
    orders.record_step(window(1), "apply", at(70), at(71), {"dead_letter_rows": 2})
    orders.record_step(window(1), "apply", at(80), at(80.25), {"dead_letter_rows": 0})
    apply = orders.window_steps("orders", [window(1).start])[window(1).start]["apply"]
    assert (apply.started_at, apply.seconds, apply.details) == (at(80), 15.0, {"dead_letter_rows": 0})


def test_a_step_outside_the_protocol_is_refused_naming_the_steps(orders):
    four_windows(orders)
    with pytest.raises(ValueError, match="step 'load' is not a step of the window protocol: "
                                         "use one of plan, extract, commit, apply, gate"):
        orders.record_step(window(1), "load", at(70), at(71))


def test_resetting_a_stream_forgets_its_step_timings(orders):
    four_windows(orders)
    orders.record_step(window(1), "gate", at(121), at(122))
    orders.reset_stream("orders")
    orders.register_stream("orders", "spanner", "fingerprint-1")
    assert orders.window_steps("orders", [window(1).start]) == {}


def test_a_version_2_store_upgrades_to_record_step_timings(state_url):
    with StateStore(state_url) as store:
        store.migrate(2)
    with StateStore(state_url) as store:
        assert store.migrate() == HEAD_VERSION
        store.register_stream("orders", "spanner", "fingerprint-1")
        run_window(store, window(0), [continuing("a", window(0).end)], initial=[position("a")])
        store.record_step(window(0), "commit", T0, at(1))
        assert store.newest_windows("orders", 1)[0].state is WindowState.COMMITTED
