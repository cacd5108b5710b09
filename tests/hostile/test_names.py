"""Table and column names from the source, hostile or reserved, through the real apply engine.

Each name is either applied with correct quoting (the target has that column, the values
are right) or refused before any SQL is built from it: the rows of its table (or of its
declaration) go to the dead-letter table with a reason naming the identifier, its value and
the fix, and nothing else changes. One window carries every hostile case, so one apply run
(a module fixture) shows them all; a canary table beside the targets must come out untouched.
"""

from __future__ import annotations

from datetime import date

import pytest

from tests.apply.support import Changes, business, window

W = window(0)
T = T0_SNAPSHOT = W.start
LONG = "c" * 300
LONGEST = "c" * 128  # the longest identifier apply takes
HOSTILE_COLUMNS = {
    "a`b": "backtick", 'a"b': "double quote", "a b": "space", "a.b": "dot", "café": "unicode",
    "x` ; DROP TABLE {canary} --": "closes the quote", LONG: "300 characters",
    "_cdc_seq": "apply's own", "${env:HOME}": "Spark variable", "x'y": "single quote",
}
HOSTILE_TABLES = ["a`b", "a b", "shop.orders", "café", "x` ; DROP TABLE {canary} --", LONG, "t'${env:HOME}"]
NOT_IDENTIFIER = "is not an identifier: use letters, digits and _ (at most 128, not starting with a digit"
HOSTILE_VALUES = ["'); DROP TABLE {canary}; --", "x` ; DROP TABLE {canary} --", "${env:HOME}", "a\\'b",
                  "line\nbreak", '"quoted"', "\\u0024{env:HOME}"]


@pytest.fixture(scope="module")
def hostile(module_lake):
    """One window of tables with hostile names and values, applied once (dead letters kept).

    Table ``cols`` has one good change and one change per hostile column name, each declaring
    its own column types (a declaration is refused whole, at its first bad name).
    """
    lake = module_lake
    canary = f"lake.{lake.namespace}.canary"
    lake.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{lake.namespace}")
    lake.spark.sql(f"CREATE TABLE {canary} (id bigint) USING iceberg")
    lake.spark.sql(f"INSERT INTO {canary} VALUES (1)")
    cols = Changes("cols", {"id": "INT64", "ok": "STRING"})
    cols.add(W, "INSERT", 0, {"id": 0, "ok": "good"}, when=T)
    for index, column in enumerate(HOSTILE_COLUMNS, start=1):
        column = column.replace("{canary}", canary)
        cols.add(W, "INSERT", index, {"id": index, "ok": "refused", column: "v"}, when=T,
                 column_types={"id": "INT64", "ok": "STRING", column: "STRING"})
    cased = len(HOSTILE_COLUMNS) + 1
    cols.add(W, "INSERT", cased, {"id": cased, "Name": "a", "name": "b"}, when=T,
             column_types={"id": "INT64", "Name": "STRING", "name": "STRING"})
    tables = []
    for name in [*HOSTILE_TABLES, "Orders", "orders"]:
        changes = Changes(name.replace("{canary}", canary), {"id": "INT64", "v": "STRING"})
        changes.add(W, "INSERT", 1, {"id": 1, "v": "x"}, when=T)
        tables.append(changes)
    values = Changes("plain", {"id": "INT64", "v": "STRING"})
    for index, value in enumerate(HOSTILE_VALUES):
        values.add(W, "INSERT", index, {"id": index, "v": value.replace("{canary}", canary)}, when=T)
    mapped = Changes("shop.items", {"id": "INT64", "v": "STRING"})
    mapped.add(W, "INSERT", 1, {"id": 1, "v": "mapped"}, when=T)
    # Its name reaches generated SQL text as a literal (in a reason), where Spark substitutes
    # ${...} with configuration values or environment variables unless it is escaped.
    leaky = Changes("t${env:HOME}", {"id": "INT64"})
    leaky.add(W, "INSERT", 1, {"id": 1, "undeclared": "x"}, when=T)
    lake.write(cols, *tables, values, mapped, leaky, reserved())
    result = lake.apply(W, policies={"on_dead_letter": "continue"},
                        targets={"mapping": {"shop.items": "shop_items", "t${env:HOME}": "leaky"}})
    reasons = {}
    for row in lake.spark.table(f"lake.{lake.namespace}.orders_dead_letters").collect():
        reasons.setdefault((row.source_table, row.keys["id"]), set()).add(row.reason)
    return lake, canary, result, reasons


def test_hostile_column_names_are_refused_naming_the_column_and_the_fix(hostile):
    lake, canary, _, reasons = hostile

    for index, column in enumerate(HOSTILE_COLUMNS, start=1):
        column = column.replace("{canary}", canary)
        if column == "_cdc_seq":
            expected = ("column name '_cdc_seq' is reserved for apply's own columns (_cdc_*, __*, "
                        "valid_from, valid_to): rename the source column")
        else:
            expected = f"column name {column!r} {NOT_IDENTIFIER}; map or rename the source column)"
        assert reasons[("cols", str(index))] == {expected}, column
    # The refused declarations changed nothing: the good change alone made the target.
    assert business(lake.rows("cols")) == [{"id": 0, "ok": "good"}]


def test_hostile_table_names_are_refused_naming_the_table_and_the_fix(hostile):
    _, canary, _, reasons = hostile

    for name in HOSTILE_TABLES:
        name = name.replace("{canary}", canary)
        assert reasons[(name, "1")] == {
            f"source table (no entry in targets.mapping, so its target would be named after it) "
            f"{name!r} {NOT_IDENTIFIER}); add the table to targets.mapping to name its target"}


def test_a_table_mapped_to_an_identifier_is_applied_whatever_its_own_name(hostile):
    lake, _, result, _ = hostile

    assert result.table("shop.items").target_table == f"lake.{lake.namespace}.shop_items"
    assert business(lake.rows("shop_items")) == [{"id": 1, "v": "mapped"}]


def test_columns_differing_only_by_case_are_refused_naming_both(hostile):
    _, _, _, reasons = hostile

    assert reasons[("cols", str(len(HOSTILE_COLUMNS) + 1))] == {
        "column 'name' differs from column 'Name' only by case: Spark resolves names without case, "
        "so both cannot be target columns"}


def test_tables_differing_only_by_case_are_both_refused(hostile):
    lake, _, _, reasons = hostile

    reason = (f"source tables ['Orders', 'orders'] have targets whose names differ only by case "
              f"(lake.{lake.namespace}.orders): a catalog that folds case would hold them in one "
              f"table; add the table to targets.mapping to name its target")
    assert reasons[("Orders", "1")] == reasons[("orders", "1")] == {reason}
    assert not lake.exists("orders") and not lake.exists("Orders")


def test_source_text_in_generated_sql_is_never_substituted(hostile):
    _, _, _, reasons = hostile

    assert reasons[("t${env:HOME}", "1")] == {
        "new_values has column(s) [undeclared] that no column_types of 't${env:HOME}' in this "
        "window declares"}


def test_hostile_values_are_stored_verbatim_never_read_as_sql(hostile):
    lake, canary, _, _ = hostile

    assert [r["v"] for r in lake.rows("plain")] == [v.replace("{canary}", canary) for v in HOSTILE_VALUES]


def test_no_generated_sql_escaped_its_quotes(hostile):
    lake, canary, _, _ = hostile

    assert [r.id for r in lake.spark.table(canary).collect()] == [1]
    tables = {r.tableName for r in lake.spark.sql(f"SHOW TABLES IN lake.{lake.namespace}").collect()}
    assert not [t for t in tables if not t.replace("_", "").isalnum()]  # every table an identifier


def reserved() -> Changes:
    """Table ``select``: reserved words and the longest identifier as names, all applied."""
    select = Changes("select", {"group": "INT64", "from": "STRING", "where": "INT64", "table": "BOOL",
                                "date": "DATE", "order": "FLOAT64", LONGEST: "STRING"}, key="group")
    select.add(W, "INSERT", 1, {"group": 1, "from": "a", "where": 2, "table": True, "date": "2024-05-01",
                                "order": 1.5, LONGEST: "long"}, when=T, keys={"group": 1})
    return select


def test_reserved_words_and_the_longest_identifier_are_applied_with_quoting(hostile):
    lake, _, result, reasons = hostile

    assert not [key for key in reasons if key[0] == "select"]
    assert result.table("select").target_table == f"lake.{lake.namespace}.select"
    assert business(lake.rows("select", order_by="`group`")) == [
        {"group": 1, "from": "a", "where": 2, "table": True, "date": date(2024, 5, 1), "order": 1.5,
         LONGEST: "long"}]


def test_a_snapshot_keeps_any_database_column_name_as_written(spark):
    from pyspark.sql import types as T

    from airflow_cdc.spark_jobs.snapshot_rows import read_rows

    names = ["id", "a'b", "${env:HOME}", "x` ; DROP TABLE t --", "back\\slash", "é"]
    schema = T.StructType([T.StructField(n, T.LongType() if n == "id" else T.StringType()) for n in names])
    frame = spark.createDataFrame([(1, *names[1:])], schema)

    [row] = read_rows(frame, stream="shop", source_table="t", key_columns=["id"], ordering_key=b"\x01",
                      commit_ts=T0_SNAPSHOT, event_id_prefix="t/", partition_id="t", metadata={}).collect()

    assert row.keys == {"id": "1"}
    assert row.new_values == {"id": "1", **{n: n for n in names[1:]}}
