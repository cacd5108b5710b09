"""airflow_cdc.model's JSON texts (``_dumps``: value texts of arrays and objects, column types,
source metadata): compact, sorted, and exact for decimals. The texts feed apply's redelivery
hash, so a byte of difference between two runs of the same change would make it a clash."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_cdc import model


def json_text(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=model._json_default)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(),
    lambda children: (st.lists(children, max_size=4)
                      | st.dictionaries(st.text(max_size=6), children, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(JSON_VALUES)
def test_a_values_json_text_is_the_json_modules_byte_for_byte(value):
    assert model._dumps(value) == json_text(value)


@pytest.mark.parametrize("value", [
    ["a", "t3"],
    {"b": 1, "a": [True, None, -7]},
    ["\x7f", {"\x7f": "del"}],  # DEL: json escapes it, orjson does not
    ["\x00\x1f\b\t\n\f\r\"\\/"],
    {"\u00e9": "caf\u00e9", "k": "\ud83d\ude00"},
    ["\udc80"],  # a lone surrogate: orjson refuses it
    [18446744073709551616, -9223372036854775809, 9223372036854775807],
    [1e16, 1e-07, 0.1, 100.0, float("nan"), float("-inf")],
    {"nested": [[[[{"deep": []}]]]]},
    ("a", "tuple"),
    {1: "an integer key", 2: "b"},
    [datetime(2024, 5, 1, 10, 0, 0, 1, tzinfo=timezone.utc), b"\x00\xff"],
], ids=repr)
def test_the_json_text_of_awkward_values_is_the_json_modules(value):
    assert model._dumps(value) == json_text(value)


def test_decimals_keep_their_exact_digits():
    assert model._dumps({"amount": Decimal("20.00"), "n": 1}) == '{"amount":20.00,"n":1}'


def test_a_shared_object_is_written_once_with_the_text_of_its_own():
    types = {"id": "INT64"}
    first = model._shared_dumps(types, "column_types")

    assert model._shared_dumps(types, "column_types") is first
    assert model._shared_dumps({"id": "STRING"}, "column_types") == '{"id":"STRING"}'
