"""airflow_cdc.model.loads_json: orjson's speed, json.loads's values and errors."""

from __future__ import annotations

import json

import pytest

from airflow_cdc import model
from airflow_cdc.model import loads_json

TEXTS = [
    '{"id":"42","name":"Ada","tags":["a","b"],"score":1.5,"ok":true,"none":null}',
    '{"a":1,"a":2}',
    "-0",
    "[1.0000000000000002, 1e-400, 1.5E3]",
    "18446744073709551616",  # beyond 64 bits: orjson would give a float
    "-9223372036854775809",
    "9223372036854775807",
    '{"big": 123456789012345678901234567890}',
    '[1.5, [{"big": 18446744073709551616}]]',  # a float beside it, the long integer deep down
    '{"id": "12345678901234567890123", "score": 2.5}',  # the long run in a text, not a number
    "1e400",  # json.loads: inf; orjson refuses it
    "[NaN, Infinity, -Infinity]",
    '"\\ud800"',  # a lone surrogate, escaped: json.loads keeps it
    '"\\ud83d\\ude00 \u00e9"',
    ' {"x": {"y": [[], {}]}} ',
]


@pytest.mark.parametrize("text", TEXTS)
def test_loads_json_gives_the_value_json_loads_gives(text):
    assert repr(loads_json(text)) == repr(json.loads(text))


@pytest.mark.parametrize("text", ['{"a":', "[1,]", "{'a': 1}", "", '"\x01"'])
def test_loads_json_raises_the_error_json_loads_raises(text):
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as raised:
        loads_json(text)
    assert str(raised.value) == str(expected.value)


def test_loads_json_parses_with_the_json_module_when_orjson_is_missing(monkeypatch):
    monkeypatch.setattr(model, "_orjson_loads", None)
    assert repr(loads_json("[NaN, 18446744073709551616]")) == "[nan, 18446744073709551616]"
    assert loads_json('{"a": [1, "b"]}') == {"a": [1, "b"]}
