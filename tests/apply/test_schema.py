"""Routing and schema: one target per source table, typed from canonical types, evolving safely.

Change rows declare canonical type names (each source maps its own: tests/sources/test_spanner_types.py).

Three windows are applied (policy ``continue``); each test checks one behaviour of the result.
"""

from __future__ import annotations

import base64
from datetime import date, datetime, timezone
from decimal import Decimal

import pytest

from .support import Changes, at, normalized, values_of, window

W0, W1, W2 = window(0), window(1), window(2)
EVERYTHING = {
    "id": "INT64",
    "flag": "BOOL",
    "count": "INT64",
    "ratio": "FLOAT64",
    "small": "FLOAT32",
    "price": "NUMERIC",
    "label": "STRING",
    "doc": "JSON",
    "blob": "BYTES",
    "day": "DATE",
    "at": "TIMESTAMP",
    "nums": "ARRAY<INT64>",
    "names": "ARRAY<STRING>",
    "exact": "PG_NUMERIC",
}
EXPECTED_TYPES = {
    "id": "bigint",
    "flag": "boolean",
    "count": "bigint",
    "ratio": "double",
    "small": "float",
    "price": "decimal(38,9)",
    "label": "string",
    "doc": "string",
    "blob": "binary",
    "day": "date",
    "at": "timestamp",
    "nums": "array<bigint>",
    "names": "array<string>",
    "exact": "string",
}
BIG = "1234567890123456789012345678901234567890.5"


@pytest.fixture(scope="module")
def applied(module_lake):
    lake = module_lake
    everything = Changes("Everything", EVERYTHING)
    everything.add(
        W0,
        "INSERT",
        "1",  # Spanner gives INT64 keys and values as JSON strings
        {
            "flag": True,
            "count": "42",
            "ratio": 1.5,
            "small": 0.25,
            "price": "123.456789012",
            "label": "x",
            "doc": '{"a": [1, 2]}',
            "blob": base64.b64encode(b"\x00\x01\xff").decode(),
            "day": "2024-05-01",
            "at": "2024-05-01T10:00:00.123456789Z",
            "nums": ["1", "2", None],
            "names": ["a", None],
            "exact": BIG,
        },
        when=at(0, 1),
    )
    profiles = Changes("Profiles", {"id": "INT64", "name": "STRING"})
    profiles.add(W0, "INSERT", 1, {"name": "A"}, when=at(0, 1))
    profiles.add(W0, "INSERT", 2, {"name": "B"}, when=at(0, 2))
    with_email = {"id": "INT64", "name": "STRING", "email": "STRING"}
    profiles.add(W1, "UPDATE", 1, {"name": "A", "email": "a@x"}, when=at(1, 1), column_types=with_email)
    profiles.add(W1, "INSERT", 3, {"name": "C", "email": "c@x"}, when=at(1, 2), column_types=with_email)
    profiles.add(W1, "INSERT", 5, {"name": "E"}, when=at(1, 3), keys={"pid": 5})
    profiles.add(W2, "UPDATE", 1, {"name": "A2"}, when=at(2, 1), image="PARTIAL")
    scores = Changes("Scores", {"id": "INT64", "score": "INT64"})
    scores.add(W0, "INSERT", 1, {"score": "7"}, when=at(0, 1))
    scores.add(W0, "INSERT", 9, {"score": "abc"}, when=at(0, 2))
    scores.add(W1, "UPDATE", 1, {"score": "high"}, when=at(1, 1), column_types={"id": "INT64", "score": "STRING"})
    odd = Changes("Odd", {"id": "INT64", "bad-col": "STRING"})
    odd.add(W0, "INSERT", 1, {"bad-col": "v"}, when=at(0, 1))
    unnamed = Changes("bad-table", {"id": "INT64"})
    unnamed.add(W0, "INSERT", 1, {}, when=at(0, 1))
    # A new target: the row written first names other key columns than the first change.
    firsts = Changes("Firsts", {"id": "INT64", "name": "STRING"})
    firsts.add(W0, "INSERT", 7, {"name": "Z"}, when=at(0, 5), keys={"code": 7})
    firsts.add(W0, "INSERT", 1, {"name": "A"}, when=at(0, 1))
    firsts.add(W0, "INSERT", 2, {"name": "B"}, when=at(0, 2))
    # A table airflow-cdc did not create, named as a source table's target.
    lake.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{lake.namespace}")
    lake.spark.sql(f"CREATE TABLE {lake.table('Plain')} (id bigint, name string) USING iceberg")
    lake.spark.sql(f"INSERT INTO {lake.table('Plain')} VALUES (1, 'mine')")
    plain = Changes("Plain", {"id": "INT64", "name": "STRING"})
    plain.add(W0, "UPDATE", 1, {"name": "theirs"}, when=at(0, 1))
    plain.add(W0, "INSERT", 2, {"name": "new"}, when=at(0, 2))
    results = {}
    for win in (W0, W1, W2):
        lake.write(everything, profiles, scores, odd, unnamed, firsts, plain, win=win)
        results[win.window_id] = lake.apply(
            win, targets={"mapping": {"Profiles": "people"}}, policies={"on_dead_letter": "continue"}
        )
    return lake, results


def dead_letters(lake) -> list[dict]:
    return lake.rows("orders_dead_letters", order_by="source_table,to_json(keys)")


def test_each_source_table_gets_its_own_target_named_by_the_mapping(applied):
    lake, results = applied
    assert lake.exists("people") and not lake.exists("Profiles")
    assert lake.exists("Everything") and lake.exists("Scores")
    tables = {t.source_table: t.target_table for t in results[W0.window_id].tables}
    assert tables["Profiles"] == lake.table("people")
    assert tables["bad-table"] is None


def test_spanner_types_become_typed_iceberg_columns(applied):
    lake, _ = applied
    schema = {f.name: f.dataType.simpleString() for f in lake.spark.table(lake.table("Everything")).schema}
    assert {k: schema[k] for k in EXPECTED_TYPES} == EXPECTED_TYPES
    expected = {
        "id": 1,
        "flag": True,
        "count": 42,
        "ratio": 1.5,
        "small": 0.25,
        "price": Decimal("123.456789012"),
        "label": "x",
        "doc": '{"a": [1, 2]}',
        "blob": b"\x00\x01\xff",
        "day": date(2024, 5, 1),
        "at": datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=timezone.utc),
        "nums": [1, 2, None],
        "names": ["a", None],
        "exact": BIG,
    }
    for reader in (lake.rows, lake.pyiceberg_rows):
        (row,) = normalized(reader("Everything"))
        assert {k: row[k] for k in expected} == expected


def test_a_column_first_seen_in_a_later_window_is_added(applied):
    lake, results = applied
    assert results[W1.window_id].table("Profiles").added_columns == ["email"]
    rows = values_of(lake.pyiceberg_rows("people"), "name", "email")
    assert rows[2] == ("B", None)  # rows of earlier windows get NULL
    assert rows[3] == ("C", "c@x")


def test_a_column_missing_from_later_changes_is_kept(applied):
    lake, _ = applied
    columns = [f.name for f in lake.spark.table(lake.table("people")).schema]
    assert "email" in columns
    assert values_of(lake.rows("people"), "name", "email")[1] == ("A2", "a@x")


def test_incompatible_type_change_is_dead_lettered_with_the_reason(applied):
    lake, _ = applied
    rows = [r for r in dead_letters(lake) if r["source_table"] == "Scores" and r["window_id"] == W1.window_id]
    assert len(rows) == 1
    assert "'score' is bigint" in rows[0]["reason"] and "incompatible" in rows[0]["reason"]
    assert values_of(lake.rows("Scores"), "score")[1] == (7,)


def test_a_value_that_does_not_convert_is_dead_lettered(applied):
    lake, _ = applied
    (row,) = [r for r in dead_letters(lake) if r["keys"] == {"id": "9"}]
    assert "column 'score' value 'abc' is not a bigint" in row["reason"]
    assert 9 not in values_of(lake.rows("Scores"), "score")


def test_a_bad_column_name_is_dead_lettered_instead_of_failing(applied):
    lake, _ = applied
    (row,) = [r for r in dead_letters(lake) if r["source_table"] == "Odd"]
    assert "'bad-col' is not an identifier" in row["reason"]
    assert lake.rows("Odd") == []


def test_a_source_table_without_a_usable_target_name_is_dead_lettered(applied):
    lake, _ = applied
    (row,) = [r for r in dead_letters(lake) if r["source_table"] == "bad-table"]
    assert "targets.mapping" in row["reason"] and row["target_table"] is None


def test_rows_with_other_key_columns_are_dead_lettered(applied):
    lake, _ = applied
    (row,) = [r for r in dead_letters(lake) if r["keys"] == {"pid": "5"}]
    assert "key columns [pid] differ from the key columns ['id']" in row["reason"]
    assert 5 not in values_of(lake.rows("people"), "name")


def test_a_new_targets_key_columns_are_those_of_its_first_change(applied):
    lake, _ = applied
    assert values_of(lake.rows("Firsts"), "name") == {1: ("A",), 2: ("B",)}
    (row,) = [r for r in dead_letters(lake) if r["source_table"] == "Firsts"]
    assert row["keys"] == {"code": "7"}
    assert "key columns [code] differ from the key columns ['id']" in row["reason"]


def test_a_target_table_airflow_cdc_did_not_create_is_refused_and_left_unchanged(applied):
    lake, _ = applied
    rows = [r for r in dead_letters(lake) if r["source_table"] == "Plain"]
    assert len(rows) == 2
    assert all("exists but was not created by airflow-cdc" in r["reason"]
               and "targets.mapping" in r["reason"] for r in rows)
    assert lake.rows("Plain") == [{"id": 1, "name": "mine"}]
