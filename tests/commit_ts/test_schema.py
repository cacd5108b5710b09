"""The schema check before a window is planned (seed 003's rules), from INFORMATION_SCHEMA rows."""

from __future__ import annotations

import pytest

from airflow_cdc.sources.spanner_commit_ts.errors import CommitTimestampSchemaError
from airflow_cdc.sources.spanner_commit_ts.schema import (
    CHANGELOG,
    PLAIN,
    TableConfig,
    plan_tables,
    schema_from_rows,
)

GSQL, PG = "GOOGLE_STANDARD_SQL", "POSTGRESQL"
COLUMNS = [
    ("Orders", "OrderId", "INT64", 1, "NO"),
    ("Orders", "Amount", "NUMERIC", 2, "YES"),
    ("Orders", "PlacedAt", "TIMESTAMP", 3, "YES"),
    ("Orders", "LastUpdateTime", "TIMESTAMP", 4, "NO"),
    ("Users", "LastAccess", "TIMESTAMP", 1, "NO"),
    ("Users", "UserId", "INT64", 2, "NO"),
    ("Users", "Deleted", "BOOL", 3, "YES"),
    ("Users", "Name", "STRING(MAX)", 4, "YES"),
]
OPTIONS = [("Orders", "LastUpdateTime", "allow_commit_timestamp", "TRUE"),
           ("Users", "LastAccess", "allow_commit_timestamp", "TRUE")]
INDEXES = [
    ("Orders", "PRIMARY_KEY", "PRIMARY_KEY", "OrderId", 1),
    ("Users", "PRIMARY_KEY", "PRIMARY_KEY", "LastAccess", 1),
    ("Users", "PRIMARY_KEY", "PRIMARY_KEY", "UserId", 2),
    ("Orders", "OrdersByUpdate", "INDEX", "LastUpdateTime", 1),
    ("Orders", "OrdersByUpdate", "INDEX", "Amount", None),  # STORING
]
TABLES = [("Orders", ""), ("Users", "")]


def plans(tables, trust=False, dialect=GSQL, columns=COLUMNS, options=OPTIONS):
    schema = schema_from_rows(columns, options, INDEXES, TABLES, dialect)
    configs = {name: TableConfig.parse(name, value) for name, value in tables.items()}
    return plan_tables(schema, configs, database="shop", dialect=dialect,
                       trust_application_timestamps=trust)


def test_commit_timestamp_column_gives_a_plain_table_plan_with_canonical_types():
    found, warnings = plans({"Orders": "LastUpdateTime"})
    plan = found["Orders"]
    assert plan.kind == PLAIN and plan.keys == ("OrderId",)
    assert plan.columns == (("OrderId", "INT64"), ("Amount", "NUMERIC"), ("PlacedAt", "TIMESTAMP"),
                            ("LastUpdateTime", "TIMESTAMP"))


def test_column_without_allow_commit_timestamp_is_refused_with_the_fix():
    with pytest.raises(CommitTimestampSchemaError) as error:
        plans({"Orders": "PlacedAt"})
    message = str(error.value)
    assert "Orders.PlacedAt" in message and "allow_commit_timestamp=true" in message
    assert "ALTER TABLE Orders ALTER COLUMN PlacedAt SET OPTIONS (allow_commit_timestamp=true)" in message
    assert "trust_application_timestamps=True" in message


def test_trusting_application_timestamps_reads_the_column_with_a_warning():
    found, warnings = plans({"Orders": "PlacedAt"}, trust=True)
    assert found["Orders"].column == "PlacedAt"
    assert any("unsafe" in w and "Orders.PlacedAt" in w for w in warnings)


def test_missing_column_and_table_and_non_timestamp_column_are_all_named():
    with pytest.raises(CommitTimestampSchemaError) as error:
        plans({"Orders": "Updated", "Shipments": "Ts", "Users": "Name"})
    message = str(error.value)
    assert "table 'Orders' has no column 'Updated'" in message
    assert "table 'Shipments' is not in database 'shop'" in message
    assert "Users.Name is STRING(MAX), not a TIMESTAMP" in message


def test_commit_timestamp_leading_the_key_or_an_index_warns_of_a_hotspot():
    found, warnings = plans({"Orders": "LastUpdateTime", "Users": "LastAccess"})
    assert any("primary key starts with its commit-timestamp column LastAccess" in w
               for w in warnings)
    assert any("index OrdersByUpdate on Orders starts with the commit-timestamp column" in w
               for w in warnings)
    assert found["Users"].kind == CHANGELOG  # the commit timestamp is part of the key


def test_soft_delete_column_must_be_bool_or_timestamp():
    found, _ = plans({"Users": {"column": "LastAccess", "soft_delete": "Deleted"}})
    assert (found["Users"].soft_delete, found["Users"].soft_delete_type) == ("Deleted", "BOOL")
    with pytest.raises(CommitTimestampSchemaError, match="soft-delete column 'Name'"):
        plans({"Users": {"column": "LastAccess", "soft_delete": "Name"}})


def test_postgresql_commit_timestamp_type_is_recognised_and_plain_timestamptz_refused():
    columns = [("orders", "id", "bigint", 1, "NO"),
               ("orders", "updated", "spanner.commit_timestamp", 2, "NO"),
               ("orders", "placed", "timestamp with time zone", 3, "YES")]
    schema = schema_from_rows(columns, [], [("orders", "PRIMARY_KEY", "PRIMARY_KEY", "id", 1)],
                              [("orders", None)], PG)
    found, _ = plan_tables(schema, {"orders": TableConfig("updated")}, database="shop",
                           dialect=PG)
    assert found["orders"].columns == (("id", "INT64"), ("updated", "TIMESTAMP"),
                                       ("placed", "TIMESTAMP"))
    with pytest.raises(CommitTimestampSchemaError, match="SPANNER.COMMIT_TIMESTAMP"):
        plan_tables(schema, {"orders": TableConfig("placed")}, database="shop", dialect=PG)
