"""Change stream records as typed values, parsed from what the Spanner client returns.

GoogleSQL rows carry one ``ChangeRecord`` column of type ARRAY<STRUCT<...>>; the Python client
returns STRUCTs as positional lists, so names come from the result metadata. PostgreSQL rows
carry one JSON object. Both are first turned into plain dicts, then into the record classes
below, which use the specification's own field names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from airflow_cdc.model import CdcError, UTC, parse_ts
from airflow_cdc.sources.spanner.types import change_row_type


class ChangeRecordParseError(CdcError):
    """A change stream row does not have the documented shape."""


@dataclass(frozen=True)
class ColumnType:
    name: str
    type: dict  # Spanner's type structure, e.g. {"code": "ARRAY", "array_element_type": {...}}
    is_primary_key: bool
    ordinal_position: int

    @property
    def type_name(self) -> str:
        """The canonical type name change rows declare: INT64, ARRAY<STRING>, NUMERIC, JSON ...
        (PG annotations folded; see :func:`airflow_cdc.sources.spanner.types.change_row_type`)."""
        return change_row_type(self.type)


@dataclass(frozen=True)
class Mod:
    keys: dict
    new_values: dict
    old_values: dict


@dataclass(frozen=True)
class DataChangeRecord:
    commit_timestamp: datetime
    record_sequence: str
    server_transaction_id: str
    is_last_record_in_transaction_in_partition: bool
    table_name: str
    column_types: tuple[ColumnType, ...]
    mods: tuple[Mod, ...]
    mod_type: str
    value_capture_type: str
    number_of_records_in_transaction: int
    number_of_partitions_in_transaction: int
    transaction_tag: str
    is_system_transaction: bool


@dataclass(frozen=True)
class HeartbeatRecord:
    timestamp: datetime


@dataclass(frozen=True)
class ChildPartition:
    token: str
    parent_partition_tokens: tuple[str, ...]


@dataclass(frozen=True)
class ChildPartitionsRecord:
    start_timestamp: datetime
    record_sequence: str
    child_partitions: tuple[ChildPartition, ...]


Record = DataChangeRecord | HeartbeatRecord | ChildPartitionsRecord

def parse_result_row(row: list, fields: list | None, dialect: str) -> list[Record]:
    """The records in one result row of a change stream query.

    ``fields`` is the result metadata (``StreamedResultSet.fields``), needed for GoogleSQL.
    """
    from airflow_cdc.sources.spanner.query import GOOGLE_SQL

    if dialect == GOOGLE_SQL:
        if not fields:
            raise ChangeRecordParseError("GoogleSQL change stream row arrived without metadata")
        change_records = _named(row[0], fields[0].type_)
    else:
        change_records = [_plain_json(row[0])]
    records: list[Record] = []
    for change_record in change_records or []:
        records.extend(parse_change_record(change_record))
    return records


def parse_change_record(change_record: dict) -> list[Record]:
    """Records of one ChangeRecord value: exactly one of its three fields holds entries."""
    if not isinstance(change_record, dict):
        raise ChangeRecordParseError(f"ChangeRecord {change_record!r} is not a struct/object")
    records: list[Record] = []
    for raw in _entries(change_record.get("data_change_record")):
        records.append(_data_change(raw))
    for raw in _entries(change_record.get("heartbeat_record")):
        records.append(HeartbeatRecord(timestamp=_ts(raw["timestamp"])))
    for raw in _entries(change_record.get("child_partitions_record")):
        records.append(
            ChildPartitionsRecord(
                start_timestamp=_ts(raw["start_timestamp"]),
                record_sequence=str(raw["record_sequence"]),
                child_partitions=tuple(
                    ChildPartition(
                        token=str(child["token"]),
                        parent_partition_tokens=tuple(
                            str(p) for p in (child.get("parent_partition_tokens") or []) if p
                        ),
                    )
                    for child in raw.get("child_partitions") or []
                ),
            )
        )
    return records


def _entries(value) -> list[dict]:
    # GoogleSQL: ARRAY<STRUCT> with zero or one element; PostgreSQL: an object or absent.
    if value is None:
        return []
    if isinstance(value, dict):
        return [value] if value else []
    return [v for v in value if v]


def _data_change(raw: dict) -> DataChangeRecord:
    try:
        return DataChangeRecord(
            commit_timestamp=_ts(raw["commit_timestamp"]),
            record_sequence=str(raw["record_sequence"]),
            server_transaction_id=str(raw["server_transaction_id"]),
            is_last_record_in_transaction_in_partition=bool(
                raw.get("is_last_record_in_transaction_in_partition")
            ),
            table_name=str(raw["table_name"]),
            column_types=tuple(
                ColumnType(
                    name=str(c["name"]),
                    type=_json_value(c["type"]),
                    is_primary_key=bool(c["is_primary_key"]),
                    ordinal_position=int(c["ordinal_position"]),
                )
                for c in raw.get("column_types") or []
            ),
            mods=tuple(
                Mod(
                    keys=_json_value(m.get("keys")) or {},
                    new_values=_json_value(m.get("new_values")) or {},
                    old_values=_json_value(m.get("old_values")) or {},
                )
                for m in raw.get("mods") or []
            ),
            mod_type=str(raw["mod_type"]),
            value_capture_type=str(raw["value_capture_type"]),
            number_of_records_in_transaction=int(raw["number_of_records_in_transaction"]),
            number_of_partitions_in_transaction=int(raw["number_of_partitions_in_transaction"]),
            transaction_tag=str(raw.get("transaction_tag") or ""),
            is_system_transaction=bool(raw.get("is_system_transaction")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ChangeRecordParseError(
            f"data_change_record is malformed ({exc!r}): {str(raw)[:500]}"
        ) from exc


def _ts(value) -> datetime:
    if isinstance(value, datetime):
        # The client returns DatetimeWithNanoseconds; keep a plain datetime (Spark checks the
        # exact type). Commit timestamps are microsecond-granular, so nothing is lost.
        value = value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
        return datetime(
            value.year, value.month, value.day, value.hour, value.minute, value.second,
            value.microsecond, tzinfo=UTC,
        )
    return parse_ts(_nanos_to_micros(str(value)))


def _nanos_to_micros(text: str) -> str:
    # Spanner prints up to 9 fractional digits; Python datetimes hold 6. Commit timestamps
    # are microsecond-granular, so nothing is lost; longer fractions are truncated.
    if "." not in text:
        return text
    head, tail = text.split(".", 1)
    digits = "".join(ch for ch in tail if ch.isdigit())
    zone = tail[len(digits) :]
    return f"{head}.{digits[:6].ljust(6, '0')}{zone}"


def _json_value(value):
    """JSON columns arrive as JsonObject (GoogleSQL) or already parsed (PostgreSQL)."""
    if value is None:
        return None
    if isinstance(value, str):
        return json.loads(value)
    return _plain_json(value)


def _plain_json(value):
    serialize = getattr(value, "serialize", None)
    if callable(serialize):  # google.cloud.spanner_v1.data_types.JsonObject
        text = serialize()
        return None if text is None else json.loads(text)
    if isinstance(value, dict):
        return {k: _plain_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_json(v) for v in value]
    return value


def _named(value, spanner_type):
    """Positional STRUCT lists -> dicts by field name, recursively, using result metadata."""
    from google.cloud.spanner_v1 import TypeCode

    if value is None:
        return None
    code = spanner_type.code
    if code == TypeCode.ARRAY:
        return [_named(v, spanner_type.array_element_type) for v in value]
    if code == TypeCode.STRUCT:
        fields = spanner_type.struct_type.fields
        if isinstance(value, dict):
            return {f.name: _named(value.get(f.name), f.type_) for f in fields}
        return {f.name: _named(v, f.type_) for f, v in zip(fields, value)}
    if code == TypeCode.JSON:
        return _plain_json(value)
    return value
