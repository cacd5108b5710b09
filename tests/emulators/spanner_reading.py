"""How the Spanner emulator tests read a change stream: the real client, decoded to plain dicts.

Every query goes through the real google-cloud-spanner client (``SPANNER_EMULATOR_HOST``,
``AnonymousCredentials``, ``snapshot().execute_sql`` with params and param_types), so the
tests see exactly what a reader sees on the wire. The reader turns the client's positional
STRUCT lists (GoogleSQL) and JSONB objects (PostgreSQL) into the same plain dicts:
``{"kind": "data_change_record" | "heartbeat_record" | "child_partitions_record", ...fields}``
with timestamps as aware datetimes and JSON values as plain Python values.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import spanner
from google.cloud.spanner_v1 import TypeCode, param_types

from airflow_cdc_emulators.spanner import HistoryConfig
from airflow_cdc.model import parse_ts

# Small enough to read whole through the client in a few seconds, yet with every feature:
# 3 splits, a 3-way and a 2-way merge, quiet periods, system transactions, 4 capture types.
SMALL_HISTORY = HistoryConfig(
    seed=11,
    duration=timedelta(minutes=40),
    changes_per_second=2.0,
    splits=3,
    merges=2,
    three_way_merges=1,
    quiet_periods=2,
    quiet_period=timedelta(minutes=3),
    system_transaction_interval=timedelta(minutes=4),
)
PG_DATABASE = "pgdb"
_TIMESTAMP_FIELDS = ("commit_timestamp", "timestamp", "start_timestamp")


def spanner_database(emulator_host: str, database_id: str = "db"):
    """A Database of the real client, connected to the emulator like any Spanner emulator."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPANNER_EMULATOR_HOST", emulator_host)
        client = spanner.Client(
            project="emulated-project",
            credentials=AnonymousCredentials(),
            disable_builtin_metrics=True,
        )
    return client.instance("emulated-instance").database(database_id)


class ChangeStreamReader:
    """Reads a change stream through the client; the queries a source adapter would send."""

    def __init__(self, database, stream_name: str) -> None:
        self.database = database
        self.stream_name = stream_name

    def execute(
        self, sql: str, params: dict | None = None, types: dict | None = None
    ) -> tuple[list, list]:
        with self.database.snapshot() as snapshot:
            results = snapshot.execute_sql(sql, params=params, param_types=types)
            rows = list(results)
            return rows, list(results.fields)

    def query(
        self,
        start: datetime,
        *,
        end: datetime | None = None,
        token: str | None = None,
        heartbeat_ms: int = 10_000,
        dialect: str = "googlesql",
        style: str = "named",
    ) -> list[dict]:
        """One change stream query; the answer as decoded records, in stream order."""
        if dialect == "postgresql":
            sql = f'SELECT * FROM "spanner"."read_json_{self.stream_name}"($1, $2, $3, $4, null)'
            params = {"p1": start, "p2": end, "p3": token, "p4": heartbeat_ms}
            names = ("p1", "p2", "p3", "p4")
        elif style == "positional":
            sql = (
                f"SELECT ChangeRecord FROM READ_{self.stream_name}"
                f"(@start, @end, @token, @heartbeat)"
            )
            params = {"start": start, "end": end, "token": token, "heartbeat": heartbeat_ms}
            names = ("start", "end", "token", "heartbeat")
        else:
            sql = (
                f"SELECT ChangeRecord FROM READ_{self.stream_name} ("
                f" start_timestamp => @start, end_timestamp => @end,"
                f" partition_token => @token, heartbeat_milliseconds => @heartbeat)"
            )
            params = {"start": start, "end": end, "token": token, "heartbeat": heartbeat_ms}
            names = ("start", "end", "token", "heartbeat")
        kinds = (
            param_types.TIMESTAMP,
            param_types.TIMESTAMP,
            param_types.STRING,
            param_types.INT64,
        )
        rows, fields = self.execute(sql, params, dict(zip(names, kinds)))
        return [decode_row(row, fields) for row in rows]

    def read_all(
        self, start: datetime, end: datetime | None = None, heartbeat_ms: int = 10_000
    ) -> dict[str, list]:
        """Every partition read from ``start``, a child only after all its parents: token -> records."""
        records: dict[str, list[dict]] = {}
        queue = [
            (child["token"], record["start_timestamp"])
            for record in self.query(start, end=end, heartbeat_ms=heartbeat_ms)
            for child in record["child_partitions"]
        ]
        scheduled = {token for token, _ in queue}
        while queue:
            token, child_start = queue.pop(0)
            records[token] = self.query(
                child_start, end=end, token=token, heartbeat_ms=heartbeat_ms
            )
            for record in records[token]:
                for child in record.get("child_partitions", ()):
                    parents_done = all(
                        parent in records for parent in child["parent_partition_tokens"]
                    )
                    if parents_done and child["token"] not in scheduled:
                        scheduled.add(child["token"])
                        queue.append((child["token"], record["start_timestamp"]))
        return records


def decode_row(row: list, fields: list) -> dict:
    """One result row (either dialect) as ``{"kind": ..., **fields}``."""
    (value,) = row
    field = fields[0]
    if field.type_.code == TypeCode.JSON:  # PostgreSQL: {"<kind>": {...}}
        ((kind, content),) = json.loads(value.serialize()).items()
        return {"kind": kind, **_timestamps(content)}
    (change_record,) = _plain(value, field.type_)
    filled = [(kind, items) for kind, items in change_record.items() if items]
    assert len(filled) == 1, f"a ChangeRecord must hold exactly one record, got {change_record}"
    kind, (content,) = filled[0]
    return {"kind": kind, **content}


def _plain(value, type_):
    """The client's positional STRUCT lists as dicts, JsonObjects as plain values."""
    if value is None:
        return None
    if type_.code == TypeCode.ARRAY:
        return [_plain(item, type_.array_element_type) for item in value]
    if type_.code == TypeCode.STRUCT:
        return {f.name: _plain(item, f.type_) for item, f in zip(value, type_.struct_type.fields)}
    if type_.code == TypeCode.JSON:
        return json.loads(value.serialize())
    return value


def _timestamps(content: dict) -> dict:
    return {k: parse_ts(v) if k in _TIMESTAMP_FIELDS else v for k, v in content.items()}
