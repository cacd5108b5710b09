"""Streams: registered once, refused when their configuration changes, reset on request."""

from __future__ import annotations

import pytest

from airflow_cdc.model import InvalidIdentifierError
from airflow_cdc.state import StreamConfigChangedError, StreamNotRegisteredError

from .helpers import LEASE, at, continuing, position, run_window, window


def test_registering_a_stream_again_with_the_same_config_changes_nothing(store):
    first = store.register_stream("orders", "spanner", "fp-1")
    again = store.register_stream("orders", "spanner", "fp-1")
    assert again == first
    assert store.streams() == [first]


def test_registering_a_stream_with_another_fingerprint_says_to_reset_or_rename(store):
    store.register_stream("orders", "spanner", "fp-1")
    with pytest.raises(StreamConfigChangedError) as raised:
        store.register_stream("orders", "spanner", "fp-2")
    message = str(raised.value)
    assert "stream 'orders'" in message
    assert "'fp-1'" in message and "'fp-2'" in message
    assert "reset the stream" in message and "new stream id" in message
    assert [s.config_fingerprint for s in store.streams()] == ["fp-1"]


def test_stream_ids_must_be_identifiers(store):
    with pytest.raises(InvalidIdentifierError, match="stream id 'a;b' is not an identifier"):
        store.register_stream("a;b", "spanner", "fp")


def test_planning_an_unregistered_stream_says_to_register_it(store):
    with pytest.raises(
        StreamNotRegisteredError, match="stream 'orders' is not registered.*register_stream"
    ):
        store.plan_window(window(0), "run-1", LEASE, [position("p1")])


def test_reset_stream_deletes_its_rows_and_leaves_other_streams_alone(store):
    store.register_stream("orders", "spanner", "fp-1")
    store.register_stream("users", "spanner", "fp-1")
    for stream in ("orders", "users"):
        run_window(store, window(0, stream), [continuing("p1", at(60))], initial=[position("p1")])

    store.reset_stream("orders")

    assert [s.stream_id for s in store.streams()] == ["users"]
    assert store.list_windows("orders") == []
    assert store.list_partitions("orders") == []
    assert store.window_partitions(window(0)) == []
    assert len(store.list_windows("users")) == 1
    store.register_stream("orders", "spanner", "fp-2")  # a fresh start with the new config
    assert store.plan_window(window(5), "run-2", LEASE, [position("q1")]).window.attempt == 1
