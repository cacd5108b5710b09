"""A nullable commit-timestamp column: refused before a window is planned, or read knowingly.

A row whose commit timestamp is NULL matches no window query, so reading such a column without
saying so would leave those rows out of the targets without a word.
"""

from __future__ import annotations

import pytest

from airflow_cdc.sources.spanner_commit_ts.errors import CommitTimestampSchemaError
from airflow_cdc.sources.spanner_commit_ts.schema import TableConfig, plan_tables, schema_from_rows
from airflow_cdc.sources.spanner_commit_ts.source import SpannerCommitTimestampSource

GSQL, PG = "GOOGLE_STANDARD_SQL", "POSTGRESQL"
COLUMNS = [
    ("Tickets", "TicketId", "INT64", 1, "NO"),
    ("Tickets", "Title", "STRING(MAX)", 2, "YES"),
    ("Tickets", "ChangedAt", "TIMESTAMP", 3, "YES"),
    ("Tickets", "OpenedAt", "TIMESTAMP", 4, "YES"),
]
OPTIONS = [("Tickets", "ChangedAt", "allow_commit_timestamp", "TRUE")]
INDEXES = [("Tickets", "PRIMARY_KEY", "PRIMARY_KEY", "TicketId", 1)]
TABLES = [("Tickets", "")]


def plans(value, *, dialect=GSQL, trust=False):
    columns = COLUMNS
    if dialect == PG:
        columns = [(t, c, "spanner.commit_timestamp" if c == "ChangedAt" else ty, p, n)
                   for t, c, ty, p, n in COLUMNS]
    schema = schema_from_rows(columns, OPTIONS, INDEXES, TABLES, dialect)
    return plan_tables(schema, {"Tickets": TableConfig.parse("Tickets", value)}, database="desk",
                       dialect=dialect, trust_application_timestamps=trust)


def test_a_nullable_commit_timestamp_column_is_refused_naming_table_column_and_choices():
    with pytest.raises(CommitTimestampSchemaError) as error:
        plans("ChangedAt")

    message = str(error.value)
    assert "commit-timestamp column Tickets.ChangedAt is nullable" in message
    assert ("UPDATE Tickets SET ChangedAt = PENDING_COMMIT_TIMESTAMP() WHERE ChangedAt IS NULL, "
            "then ALTER TABLE Tickets ALTER COLUMN ChangedAt TIMESTAMP NOT NULL OPTIONS "
            "(allow_commit_timestamp=true)") in message
    assert "tables={'Tickets': {'column': 'ChangedAt', 'skip_null_rows': True}}" in message


def test_a_nullable_postgresql_commit_timestamp_column_is_refused_with_its_dialects_fix():
    with pytest.raises(CommitTimestampSchemaError) as error:
        plans("ChangedAt", dialect=PG)

    assert ("UPDATE Tickets SET ChangedAt = SPANNER.PENDING_COMMIT_TIMESTAMP() WHERE ChangedAt "
            "IS NULL, then ALTER TABLE Tickets ALTER COLUMN ChangedAt SET NOT NULL"
            ) in str(error.value)


def test_skip_null_rows_reads_a_nullable_column_and_warns_that_null_rows_are_not_captured():
    found, warnings = plans({"column": "ChangedAt", "skip_null_rows": True})

    assert found["Tickets"].column == "ChangedAt"
    assert any("Tickets.ChangedAt is nullable and read because skip_null_rows=True" in w
               and "not captured" in w for w in warnings)


def test_trusted_application_timestamps_in_a_nullable_column_warn_that_null_rows_are_missed():
    found, warnings = plans("OpenedAt", trust=True)

    assert found["Tickets"].column == "OpenedAt"
    assert any("Tickets.OpenedAt is nullable and read because trust_application_timestamps=True"
               in w for w in warnings)


def test_skip_null_rows_must_be_a_boolean():
    with pytest.raises(ValueError, match=r"tables\['Tickets'\] skip_null_rows 'yes' must be True "
                                         r"or False"):
        TableConfig.parse("Tickets", {"column": "ChangedAt", "skip_null_rows": "yes"})


def test_skip_null_rows_is_recorded_in_the_stream_spec_only_when_set():
    spec = {"connection": {"instance": "i", "database": "desk"},
            "tables": {"Tickets": {"column": "ChangedAt", "skip_null_rows": True},
                       "Users": "UpdatedAt"}}

    recorded = SpannerCommitTimestampSource.validate_spec("desk", spec)

    assert recorded["tables"]["Tickets"]["skip_null_rows"] is True
    assert "skip_null_rows" not in recorded["tables"]["Users"]


def test_a_stream_on_a_nullable_commit_timestamp_column_is_refused_before_any_window(tmp_path):
    from airflow_cdc_emulators.spanner import SpannerEmulator
    from airflow_cdc_emulators.spanner.tables import DatabaseSchema, VersionedDatabase

    from .test_windows import T0, Stream, windows

    (window,) = windows(1)
    tables = VersionedDatabase(DatabaseSchema(()), created_at=T0, now=window[1])
    tables.apply_ddl(["CREATE TABLE Tickets (TicketId INT64 NOT NULL, Title STRING(MAX), "
                      "ChangedAt TIMESTAMP OPTIONS (allow_commit_timestamp=true)) "
                      "PRIMARY KEY (TicketId)"])
    with SpannerEmulator(tables=tables) as emulator:
        stream = Stream(None, emulator, tmp_path, tables={"Tickets": "ChangedAt"})

        with pytest.raises(CommitTimestampSchemaError, match="Tickets.ChangedAt is nullable"):
            stream.plan(window)

    assert stream.store.get_window(stream.stream_id, window[0]) is None
