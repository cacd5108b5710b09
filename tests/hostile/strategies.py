"""Hostile input for the parsers: valid records mutated, and text that is not a record at all.

A mutation walks a valid record (JSON-like dicts and lists) and, at a drawn place, removes a
field, replaces a value with a hostile one (wrong type, huge or negative number, NaN,
infinity, odd unicode, a long string, a nested structure) or adds an unexpected field. Text
lines are also truncated at a drawn character, or replaced by arbitrary text or bytes.
"""

from __future__ import annotations

import copy
import json
import math

from hypothesis import strategies as st

ODD_TEXT = [
    "", " ", "\x00", "\ud800", "\ufeff", "é", "😀", "\u202e", "NaN", "Infinity", "-Infinity",
    "-1", "0", "1e999", "9" * 400, "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z",
    "10000-01-01T00:00:00Z", "2024-02-30T00:00:00Z", "x` ; DROP TABLE t --", "'", '"', "\\",
    "${env:HOME}", "null", "true", "{}", "[]", "\n",
]
HUGE_INTS = [2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**30, -(10**30), 10**400]



def _values(texts: list[str]):
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.sampled_from(HUGE_INTS),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308, 5e-324]),
        st.text(max_size=20),
        st.sampled_from(texts),
    )
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=6,
    )


#: Any JSON-like value, a lone surrogate among its texts (JSON text can escape one).
hostile_values = _values(ODD_TEXT)
#: The same without lone surrogates: values a protobuf or the Spanner client hands over,
#: whose strings are UTF-8 by construction.
utf8_hostile_values = _values([t for t in ODD_TEXT if t != "\ud800"])


def _places(value, path=()):
    """Every (path, value) inside ``value``, the root included."""
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _places(item, (*path, index))


def _parent(root, path):
    for part in path[:-1]:
        root = root[part]
    return root


@st.composite
def mutated(draw, valid, max_mutations: int = 3, values=hostile_values):
    """``valid`` (a JSON-like record) with 1 to ``max_mutations`` hostile mutations, new
    values drawn from ``values``."""
    record = copy.deepcopy(valid)
    for _ in range(draw(st.integers(1, max_mutations))):
        places = [p for p, _ in _places(record) if p]
        if not places:
            break
        path = draw(st.sampled_from(places))
        parent = _parent(record, path)
        action = draw(st.sampled_from(["remove", "replace", "replace", "replace", "add"]))
        if action == "remove":
            if isinstance(parent, dict):
                del parent[path[-1]]
            else:
                parent.pop(path[-1])
        elif action == "replace":
            parent[path[-1]] = draw(values)
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(values)
        else:
            parent.append(draw(values))
    return record


def json_text(value) -> str:
    """``value`` as one JSON line (NaN and infinities as Python's json writes them)."""
    return json.dumps(value, default=str)


@st.composite
def hostile_lines(draw, valid):
    """One text line from a valid record: mutated, truncated, or not JSON at all."""
    kind = draw(st.sampled_from(["mutated", "mutated", "mutated", "truncated", "text", "bytes", "nested"]))
    if kind == "mutated":
        return json_text(draw(mutated(valid)))
    if kind == "truncated":
        line = json_text(valid)
        return line[: draw(st.integers(0, len(line) - 1))]
    if kind == "text":
        return draw(st.text(max_size=60))
    if kind == "bytes":
        return draw(st.binary(max_size=60)).decode("latin-1")
    depth = draw(st.integers(50, 3000))
    return "[" * depth + "]" * depth if draw(st.booleans()) else '{"a":' * depth + "1" + "}" * depth
