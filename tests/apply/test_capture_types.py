"""Every Spanner value capture type gives the same current state.

One source history is written four times, as Spanner change streams report it under each
value capture type (OLD_AND_NEW_VALUES and NEW_VALUES: only the changed columns; NEW_ROW and
NEW_ROW_AND_OLD_VALUES: every tracked column), into four source tables of one stream, over two
windows.
"""

from __future__ import annotations

import pytest

from .support import Changes, at, values_of, window

W0, W1 = window(0), window(1)
TYPES = {"id": "INT64", "a": "INT64", "b": "STRING", "c": "BOOL"}
CAPTURE_TYPES = ("OLD_AND_NEW_VALUES", "NEW_VALUES", "NEW_ROW", "NEW_ROW_AND_OLD_VALUES")
# (window, op, key, changed columns)
HISTORY = [
    (W0, "INSERT", 1, {"a": 1, "b": "x", "c": True}),
    (W0, "INSERT", 2, {"a": 2, "b": "y", "c": False}),
    (W0, "UPDATE", 1, {"b": "x2"}),
    (W1, "UPDATE", 1, {"a": 10}),
    (W1, "UPDATE", 2, {"b": None}),
    (W1, "INSERT", 3, {"a": 3, "b": "z", "c": True}),
    (W1, "DELETE", 3, {}),
]
EXPECTED = {1: (10, "x2", True), 2: (2, None, False)}


def capture(capture_type: str) -> Changes:
    """The change rows Spanner reports for HISTORY under ``capture_type``."""
    changes = Changes(capture_type.title().replace("_", ""), TYPES)
    rows: dict[int, dict] = {}
    for second, (win, op, key, changed) in enumerate(HISTORY, start=1):
        before = dict(rows.get(key, {}))
        if op == "DELETE":
            rows.pop(key)
            old = before if capture_type in ("OLD_AND_NEW_VALUES", "NEW_ROW_AND_OLD_VALUES") else {}
            changes.add(win, op, key, when=at(0 if win is W0 else 1, second), old=old)
            continue
        rows[key] = {**before, **changed}
        full = capture_type.startswith("NEW_ROW") or op == "INSERT"
        new_values = rows[key] if full else changed
        old = {c: before.get(c) for c in changed} if op == "UPDATE" and "OLD" in capture_type else {}
        changes.add(
            win,
            op,
            key,
            new_values,
            when=at(0 if win is W0 else 1, second),
            image="FULL" if full else "PARTIAL",
            old=old,
        )
    return changes


@pytest.fixture(scope="module")
def applied(module_lake):
    lake = module_lake
    tables = [capture(capture_type) for capture_type in CAPTURE_TYPES]
    for win in (W0, W1):
        lake.write(*tables, win=win)
        lake.apply(win)
    return lake, {capture_type: table.table for capture_type, table in zip(CAPTURE_TYPES, tables)}


@pytest.mark.parametrize("capture_type", CAPTURE_TYPES)
def test_every_value_capture_type_gives_the_current_state(applied, capture_type):
    lake, tables = applied
    assert values_of(lake.rows(tables[capture_type]), "a", "b", "c") == EXPECTED
    assert values_of(lake.pyiceberg_rows(tables[capture_type]), "a", "b", "c") == EXPECTED
