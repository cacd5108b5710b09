"""``UpdateDatabaseDdl`` changes the emulator's tables, or refuses with the statement named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from google.api_core.exceptions import FailedPrecondition, MethodNotImplemented, NotFound
from google.cloud import spanner
from spanner_reading import spanner_database

from airflow_cdc_emulators.spanner import SpannerEmulator
from airflow_cdc_emulators.spanner.schema import GOOGLESQL, POSTGRESQL
from airflow_cdc_emulators.spanner.tables import (
    COMMIT_TIMESTAMP_SCHEMA,
    DatabaseSchema,
    SpannerStatusError,
    VersionedDatabase,
)

ROOT = Path(__file__).resolve().parents[2]
SINGERS = """CREATE TABLE Singers (
  SingerId INT64 NOT NULL,
  Name STRING(1024),
  Tags ARRAY<STRING(MAX)>,
  UpdatedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp=true),
) PRIMARY KEY (SingerId)"""


@pytest.fixture
def database():
    """The real client's Database on an emulator serving an empty schema."""
    tables = VersionedDatabase(DatabaseSchema(()), clock="wall")
    with SpannerEmulator(tables=tables) as emulator:
        yield spanner_database(emulator.emulator_host)


def _insert_singer(database, singer_id: int) -> None:
    with database.batch() as batch:
        batch.insert("Singers", ("SingerId", "Name", "UpdatedAt"),
                     [(singer_id, f"singer {singer_id}", spanner.COMMIT_TIMESTAMP)])


def test_a_table_created_by_update_ddl_takes_inserts(database):
    database.update_ddl([SINGERS, "CREATE INDEX SingersByName ON Singers(Name) STORING (Tags)"]
                        ).result(timeout=30)

    _insert_singer(database, 1)

    with database.snapshot(multi_use=True) as snapshot:
        rows = list(snapshot.execute_sql("SELECT SingerId, Name FROM Singers"))
        options = list(snapshot.execute_sql(
            "SELECT TABLE_NAME, COLUMN_NAME, OPTION_VALUE FROM INFORMATION_SCHEMA.COLUMN_OPTIONS "
            "WHERE TABLE_SCHEMA = ''"))
        indexes = list(snapshot.execute_sql(
            "SELECT INDEX_NAME FROM INFORMATION_SCHEMA.INDEXES WHERE TABLE_NAME = 'Singers'"))
    assert rows == [[1, "singer 1"]]
    assert options == [["Singers", "UpdatedAt", "TRUE"]]
    assert ["SingersByName"] in indexes


def test_a_table_dropped_by_update_ddl_is_gone(database):
    database.update_ddl([SINGERS]).result(timeout=30)
    _insert_singer(database, 1)

    database.update_ddl(["DROP TABLE Singers"]).result(timeout=30)

    with pytest.raises(NotFound, match="Table not found: Singers"):
        _insert_singer(database, 2)
    database.reload()
    assert not any("Singers" in statement for statement in database.ddl_statements)


def test_dropping_a_table_with_an_index_is_refused_and_keeps_the_table(database):
    database.update_ddl([SINGERS, "CREATE INDEX SingersByName ON Singers(Name)"]).result(
        timeout=30)

    with pytest.raises(FailedPrecondition, match="Cannot drop table Singers with indices: "
                                                 "SingersByName"):
        database.update_ddl(["DROP TABLE Singers"]).result(timeout=30)
    _insert_singer(database, 1)


def test_a_change_stream_statement_is_unimplemented_and_nothing_of_its_request_applies(
        database):
    with pytest.raises(MethodNotImplemented, match="CREATE CHANGE STREAM"):
        database.update_ddl([SINGERS, "CREATE CHANGE STREAM Everything FOR ALL"]).result(
            timeout=30)

    with pytest.raises(NotFound, match="Table not found: Singers"):
        _insert_singer(database, 1)


@pytest.mark.parametrize("statement", [
    "ALTER TABLE Singers ADD COLUMN Age INT64",
    "CREATE VIEW V SQL SECURITY INVOKER AS SELECT 1",
    "CREATE TABLE T (Id INT64 NOT NULL, Total INT64 AS (Id * 2) STORED) PRIMARY KEY (Id)",
])
def test_statements_the_emulator_cannot_apply_are_unimplemented(statement):
    tables = VersionedDatabase(DatabaseSchema(()))

    with pytest.raises(SpannerStatusError) as refused:
        tables.apply_ddl([statement])

    assert refused.value.code == "UNIMPLEMENTED"
    assert "not supported by the Spanner emulator" in refused.value.message


@pytest.mark.parametrize("dialect", [GOOGLESQL, POSTGRESQL])
def test_the_ddl_get_database_ddl_returns_builds_the_same_schema_again(dialect):
    statements = COMMIT_TIMESTAMP_SCHEMA.ddl(dialect, "db", "3h")
    tables = VersionedDatabase(DatabaseSchema(()))

    tables.apply_ddl(statements, dialect)

    assert tables.schema.ddl(dialect, "db", tables.version_retention_period) == statements
    assert tables.version_retention_period == "3h"


def test_the_command_line_serves_the_tables_of_a_ddl_file(tmp_path):
    schema = tmp_path / "schema.sql"
    schema.write_text(f"-- the user's own schema\n{SINGERS};\n"
                      f"CREATE INDEX SingersByName ON Singers(Name);\n")
    server = subprocess.Popen(
        [sys.executable, "-m", "airflow_cdc_emulators.spanner", "--port", "0", "--ddl",
         str(schema)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        host_line = server.stdout.readline().strip()
        assert host_line.startswith("SPANNER_EMULATOR_HOST=127.0.0.1:"), server.stderr.read()
        database = spanner_database(host_line.split("=", 1)[1])

        _insert_singer(database, 7)

        with database.snapshot() as snapshot:
            assert list(snapshot.execute_sql("SELECT SingerId FROM Singers")) == [[7]]
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stdout.close()
        server.stderr.close()


def test_the_command_line_refuses_a_ddl_file_it_cannot_apply(tmp_path):
    schema = tmp_path / "schema.sql"
    schema.write_text(f"{SINGERS};\nCREATE CHANGE STREAM Everything FOR ALL;\n")

    finished = subprocess.run(
        [sys.executable, "-m", "airflow_cdc_emulators.spanner", "--port", "0", "--ddl",
         str(schema)],
        cwd=ROOT, capture_output=True, text=True, timeout=60)

    assert finished.returncode == 2
    assert f"--ddl {schema}: UNIMPLEMENTED" in finished.stderr
    assert "CREATE CHANGE STREAM Everything FOR ALL" in finished.stderr
