"""Change stream query text for both dialects, with bound parameters only.

GoogleSQL calls ``READ_<stream>`` with named arguments; the PostgreSQL dialect calls
``"spanner"."read_json_<stream>"`` with positional ``$1..$4``. The stream name is the only
thing spliced into the text, and it is validated as an identifier first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from airflow_cdc.model import ensure_utc, validate_identifier

GOOGLE_SQL = "GOOGLE_STANDARD_SQL"
POSTGRESQL = "POSTGRESQL"
DIALECTS = (GOOGLE_SQL, POSTGRESQL)
# The partition id under which the state store keeps the stream's first query: the one run
# with partition_token NULL, which answers with the root partitions as child records.
INITIAL_PARTITION = "__initial__"
MIN_HEARTBEAT_MS, MAX_HEARTBEAT_MS = 1_000, 300_000


@dataclass(frozen=True)
class ChangeStreamQuery:
    sql: str
    params: dict
    param_types: dict


def validate_query_settings(dialect: str, stream_name: str, heartbeat_milliseconds: int) -> None:
    """Raise ValueError when a change stream's queries could not be built from these settings.

    Needs no client library: a source checks its settings with it when it is made (on the
    driver too, which never reads), where :func:`build_query`'s import of the client's
    parameter types would delay the extract job's driver before its read workers start.
    """
    validate_identifier("change stream name", stream_name)
    if dialect not in DIALECTS:
        raise ValueError(f"Spanner dialect {dialect!r} is unknown: use one of {DIALECTS}")
    if not MIN_HEARTBEAT_MS <= int(heartbeat_milliseconds) <= MAX_HEARTBEAT_MS:
        raise ValueError(
            f"heartbeat_milliseconds {heartbeat_milliseconds} is out of range: Spanner "
            f"accepts {MIN_HEARTBEAT_MS:,} to {MAX_HEARTBEAT_MS:,}"
        )


def build_query(
    dialect: str,
    stream_name: str,
    start: datetime,
    end: datetime | None,
    partition_token: str | None,
    heartbeat_milliseconds: int,
) -> ChangeStreamQuery:
    """The query reading one partition (or the initial query when the token is None)."""
    from google.cloud.spanner_v1 import param_types

    validate_query_settings(dialect, stream_name, heartbeat_milliseconds)
    if partition_token == INITIAL_PARTITION:
        partition_token = None
    values = [
        ensure_utc("start_timestamp", start),
        None if end is None else ensure_utc("end_timestamp", end),
        partition_token,
        int(heartbeat_milliseconds),
    ]
    types = [param_types.TIMESTAMP, param_types.TIMESTAMP, param_types.STRING, param_types.INT64]
    if dialect == GOOGLE_SQL:
        names = ["start_timestamp", "end_timestamp", "partition_token", "heartbeat_milliseconds"]
        sql = (
            f"SELECT ChangeRecord FROM READ_{stream_name} ("
            + ", ".join(f"{name} => @{name}" for name in names)
            + ")"
        )
    else:
        names = ["p1", "p2", "p3", "p4"]
        sql = f'SELECT * FROM "spanner"."read_json_{stream_name}" ($1, $2, $3, $4, null)'
    return ChangeStreamQuery(
        sql=sql, params=dict(zip(names, values)), param_types=dict(zip(names, types))
    )
