"""airflow_cdc.model.encode_ordering_key: bytes that sort like the tuples they encode."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow_cdc.model import encode_ordering_key

T = datetime(2025, 1, 6, 8, tzinfo=timezone.utc)


def test_a_tuples_ordering_key_is_its_parts_keys_one_after_the_other():
    parts = (T, "txn-\x00a", 17, None, b"\x00\xff", -3)
    assert encode_ordering_key(*parts) == b"".join(encode_ordering_key(p) for p in parts)


def test_ordering_keys_sort_like_their_tuples():
    tuples = [
        (T, "b", 2, 0), (T, "b", 10, 0), (T, "a", 9, 1), (T + timedelta(microseconds=1), "", 0, 0),
        (T, "b", 2, 1), (T, "ab", 0, 0), (T - timedelta(days=400), "z", 99, 5),
    ]
    assert sorted(tuples, key=lambda t: encode_ordering_key(*t)) == sorted(tuples)
