"""Rows a commit-timestamp window reads end as change rows or dead letters, whatever they hold.

:func:`row_results` is what each Spark task runs on every row the Spanner client hands over
(values typed by the client: ``int``, ``Decimal``, ``DatetimeWithNanoseconds``,
``JsonObject``, base64 text for BYTES ...). Hostile rows carry values of other types, NaN,
numbers beyond 64 bits, naive or missing commit timestamps, too few or too many values.
"""

from __future__ import annotations

import math
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

from google.cloud.spanner_v1.data_types import JsonObject
from hypothesis import given
from hypothesis import strategies as st

from airflow_cdc.sources.spanner_commit_ts.records import row_results
from airflow_cdc.sources.spanner_commit_ts.schema import CHANGELOG, PLAIN, TablePlan

from .strategies import utf8_hostile_values
from .support import HALF, as_record, check_dead_letter, fits

T0 = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
END = T0 + timedelta(minutes=20)
STREAM, WINDOW_ID = "shop", f"{T0:%Y-%m-%dT%H:%M:%S.%fZ}/{END:%Y-%m-%dT%H:%M:%S.%fZ}"
ORDERS = TablePlan("Orders", "LastUpdateTime", PLAIN,
                   (("OrderId", "INT64"), ("Details", "JSON"), ("Total", "NUMERIC"), ("Ratio", "FLOAT64"),
                    ("Photo", "BYTES"), ("Day", "DATE"), ("Tags", "ARRAY<STRING>"), ("Deleted", "BOOL"),
                    ("LastUpdateTime", "TIMESTAMP")),
                   ("OrderId",), "Deleted", "BOOL")
HISTORY = TablePlan("DocumentHistory", "Ts", CHANGELOG,
                    (("DocumentId", "INT64"), ("Ts", "TIMESTAMP"), ("Delta", "STRING")), ("DocumentId", "Ts"))
TYPED = {
    "INT64": st.integers(-(2**63), 2**63 - 1),
    "JSON": st.builds(JsonObject, st.dictionaries(st.text(max_size=4), st.integers() | st.text(max_size=4), max_size=3)),
    "NUMERIC": st.decimals(allow_nan=False, allow_infinity=False, places=9, min_value=-10**28, max_value=10**28),
    "FLOAT64": st.floats(),
    "BYTES": st.binary(max_size=12).map(lambda b: __import__("base64").b64encode(b).decode()),
    "DATE": st.dates(),
    "ARRAY<STRING>": st.lists(st.none() | st.text(max_size=5), max_size=3),
    "BOOL": st.booleans(),
    "TIMESTAMP": st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                              timezones=st.just(timezone.utc)),
    "STRING": st.text(max_size=10),
}
ODD = st.one_of(
    utf8_hostile_values,  # the client's strings are UTF-8
    st.sampled_from([Decimal("NaN"), Decimal("Infinity"), Decimal("1e400"), math.nan, 10**30, set(),
                     datetime(2025, 1, 6, 8, 1), date(1, 1, 1), b"\xff", object()]),
    st.datetimes(),  # naive
)


ANY = {kind: st.none() | typed | ODD for kind, typed in TYPED.items()}


@st.composite
def rows(draw, plan: TablePlan):
    values = [draw(ANY[kind]) if draw(st.booleans()) else draw(TYPED[kind]) for _, kind in plan.columns]
    arity = draw(st.sampled_from(["same", "same", "same", "short", "long"]))
    if arity == "short":
        values = values[: draw(st.integers(0, len(values) - 1))]
    elif arity == "long":
        values += [draw(ODD)]
    return values


def results_of(plan: TablePlan, values) -> list[dict]:
    results = row_results(plan, values, table=plan.table, stream=STREAM, window_id=WINDOW_ID, read_at=END)
    kinds = [kind for kind, _, _ in results]
    assert kinds in (["row"], ["soft", "row"], ["dead"]), kinds
    kind, _, values = results[-1]
    return [as_record(fits("row", values)) if kind == "row" else check_dead_letter(values)]


@given(st.sampled_from([ORDERS, HISTORY]).flatmap(lambda plan: st.tuples(st.just(plan), rows(plan))))
def test_any_row_becomes_a_change_row_or_a_dead_letter_with_a_reason(pair):
    plan, values = pair

    [record] = results_of(plan, values)

    assert record["source_table"] == plan.table


@HALF
@given(st.lists(rows(ORDERS), min_size=1, max_size=5), st.randoms())
def test_every_good_row_among_hostile_rows_becomes_a_change_row(hostile, random):
    good = [[100 + i, None, Decimal("1.5"), 2.5, None, None, ["a"], False, T0 + timedelta(seconds=i)]
            for i in range(3)]
    batch = good + hostile
    random.shuffle(batch)

    landed = {r["event_id"] for values in batch for r in results_of(ORDERS, values) if "reason" not in r}

    assert {f'Orders/{T0 + timedelta(seconds=i):%Y-%m-%dT%H:%M:%S.%fZ}/{{"OrderId":"{100 + i}"}}'
            for i in range(3)} <= landed


def test_a_row_with_a_value_of_no_json_type_is_a_dead_letter_naming_the_table():
    values = [7, None, None, None, None, None, [object()], False, T0]

    [record] = results_of(ORDERS, values)

    assert record["reason"].startswith(
        "extract: row of Orders cannot become a change row (TypeError: value <object object at")


def test_a_row_with_too_few_values_is_a_dead_letter_naming_its_columns():
    [record] = results_of(HISTORY, [3, T0])

    assert record["reason"] == ("extract: row of DocumentHistory has 2 values for its 3 columns "
                                "['DocumentId', 'Ts', 'Delta']")
