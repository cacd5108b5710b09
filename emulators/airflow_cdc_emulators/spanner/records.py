"""Change records on the wire, for both dialects.

GoogleSQL: one column ``ChangeRecord`` of type (the service's own definition)::

    ARRAY<STRUCT<
      data_change_record ARRAY<STRUCT<commit_timestamp TIMESTAMP, record_sequence STRING,
        server_transaction_id STRING, is_last_record_in_transaction_in_partition BOOL,
        table_name STRING,
        column_types ARRAY<STRUCT<name STRING, type JSON, is_primary_key BOOL,
          ordinal_position INT64>>,
        mods ARRAY<STRUCT<keys JSON, new_values JSON, old_values JSON>>,
        mod_type STRING, value_capture_type STRING, number_of_records_in_transaction INT64,
        number_of_partitions_in_transaction INT64, transaction_tag STRING,
        is_system_transaction BOOL>>,
      heartbeat_record ARRAY<STRUCT<timestamp TIMESTAMP>>,
      child_partitions_record ARRAY<STRUCT<start_timestamp TIMESTAMP, record_sequence STRING,
        child_partitions ARRAY<STRUCT<token STRING, parent_partition_tokens ARRAY<STRING>>>>>>>

Each row's array holds one struct in which exactly one of the three arrays has one element
and the other two are empty. On the wire STRUCT and ARRAY are both ``ListValue``; TIMESTAMP,
INT64 and JSON values travel as strings.

PostgreSQL: one ``JSONB`` column named after the read function (``read_json_<stream>``) whose
value is ``{"data_change_record": {...}}``, ``{"heartbeat_record": {...}}`` or
``{"child_partitions_record": {...}}`` with the same field names, timestamps as strings and
numbers as JSON numbers; ``column_types[].type`` carries ``type_annotation`` PG_NUMERIC or
PG_JSONB for numeric and jsonb columns, as a PostgreSQL-dialect database describes them.
"""

from __future__ import annotations

import json
from typing import Any

from google.cloud.spanner_v1.types import result_set, type as spanner_type
from google.protobuf import struct_pb2

from .history import DataChangeRecord
from .query import ChangeRecord, ChildPartitionsRecord, HeartbeatRecord
from .schema import GOOGLESQL, POSTGRESQL
from .timeline import format_micros

_TypeCode = spanner_type.TypeCode


def _scalar(code: int) -> spanner_type.Type:
    return spanner_type.Type(code=code)


def _array(element: spanner_type.Type) -> spanner_type.Type:
    return spanner_type.Type(code=_TypeCode.ARRAY, array_element_type=element)


def _struct(*fields: tuple[str, spanner_type.Type]) -> spanner_type.Type:
    return spanner_type.Type(
        code=_TypeCode.STRUCT,
        struct_type=spanner_type.StructType(
            fields=[spanner_type.StructType.Field(name=name, type_=t) for name, t in fields]
        ),
    )


_STRING, _BOOL, _INT64 = (
    _scalar(_TypeCode.STRING),
    _scalar(_TypeCode.BOOL),
    _scalar(_TypeCode.INT64),
)
_TIMESTAMP, _JSON = _scalar(_TypeCode.TIMESTAMP), _scalar(_TypeCode.JSON)

DATA_CHANGE_RECORD_TYPE = _struct(
    ("commit_timestamp", _TIMESTAMP),
    ("record_sequence", _STRING),
    ("server_transaction_id", _STRING),
    ("is_last_record_in_transaction_in_partition", _BOOL),
    ("table_name", _STRING),
    (
        "column_types",
        _array(
            _struct(
                ("name", _STRING),
                ("type", _JSON),
                ("is_primary_key", _BOOL),
                ("ordinal_position", _INT64),
            )
        ),
    ),
    ("mods", _array(_struct(("keys", _JSON), ("new_values", _JSON), ("old_values", _JSON)))),
    ("mod_type", _STRING),
    ("value_capture_type", _STRING),
    ("number_of_records_in_transaction", _INT64),
    ("number_of_partitions_in_transaction", _INT64),
    ("transaction_tag", _STRING),
    ("is_system_transaction", _BOOL),
)
HEARTBEAT_RECORD_TYPE = _struct(("timestamp", _TIMESTAMP))
CHILD_PARTITIONS_RECORD_TYPE = _struct(
    ("start_timestamp", _TIMESTAMP),
    ("record_sequence", _STRING),
    (
        "child_partitions",
        _array(_struct(("token", _STRING), ("parent_partition_tokens", _array(_STRING)))),
    ),
)
CHANGE_RECORD_TYPE = _array(
    _struct(
        ("data_change_record", _array(DATA_CHANGE_RECORD_TYPE)),
        ("heartbeat_record", _array(HEARTBEAT_RECORD_TYPE)),
        ("child_partitions_record", _array(CHILD_PARTITIONS_RECORD_TYPE)),
    )
)


def metadata(dialect: str, function_name: str) -> result_set.ResultSetMetadata:
    """The result's one column: ``ChangeRecord`` (GoogleSQL) or ``read_json_<stream>`` JSONB."""
    if dialect == POSTGRESQL:
        column_type = spanner_type.Type(
            code=_TypeCode.JSON, type_annotation=spanner_type.TypeAnnotationCode.PG_JSONB
        )
        name = function_name
    else:
        column_type, name = CHANGE_RECORD_TYPE, "ChangeRecord"
    return result_set.ResultSetMetadata(
        row_type=spanner_type.StructType(
            fields=[spanner_type.StructType.Field(name=name, type_=column_type)]
        )
    )


def record_json(record: ChangeRecord, dialect: str = POSTGRESQL) -> dict:
    """A record as its PostgreSQL-dialect JSON object (``{"<kind>_record": {...}}``)."""
    if isinstance(record, HeartbeatRecord):
        return {"heartbeat_record": {"timestamp": format_micros(record.timestamp_us)}}
    if isinstance(record, ChildPartitionsRecord):
        return {
            "child_partitions_record": {
                "start_timestamp": format_micros(record.start_us),
                "record_sequence": record.record_sequence,
                "child_partitions": [
                    {"token": c.token, "parent_partition_tokens": list(c.parent_partition_tokens)}
                    for c in record.child_partitions
                ],
            }
        }
    return {"data_change_record": _data_change_fields(record, dialect)}


def _data_change_fields(record: DataChangeRecord, dialect: str) -> dict:
    table = record.table
    columns = {c.name: c for c in table.columns}
    return {
        "commit_timestamp": format_micros(record.commit_us),
        "record_sequence": record.record_sequence,
        "server_transaction_id": record.server_transaction_id,
        "is_last_record_in_transaction_in_partition": (
            record.is_last_record_in_transaction_in_partition
        ),
        "table_name": table.name,
        "column_types": [
            {
                "name": name,
                "type": columns[name].type.type_json(dialect),
                "is_primary_key": columns[name].primary_key,
                "ordinal_position": table.ordinal(name),
            }
            for name in record.column_names
        ],
        "mods": record.mods(),
        "mod_type": record.mod_type,
        "value_capture_type": record.value_capture_type,
        "number_of_records_in_transaction": record.number_of_records_in_transaction,
        "number_of_partitions_in_transaction": record.number_of_partitions_in_transaction,
        "transaction_tag": record.transaction_tag,
        "is_system_transaction": record.is_system_transaction,
    }


def row_value(record: ChangeRecord, dialect: str) -> struct_pb2.Value:
    """The row's single column value in the given dialect."""
    value = struct_pb2.Value()
    if dialect == POSTGRESQL:
        value.string_value = _dumps(record_json(record, POSTGRESQL))
        return value
    # Nested Python lists first, then one pass filling the protobuf in place (no message copies).
    data: list = []
    heartbeat: list = []
    children: list = []
    if isinstance(record, HeartbeatRecord):
        heartbeat.append([format_micros(record.timestamp_us)])
    elif isinstance(record, ChildPartitionsRecord):
        children.append(
            [
                format_micros(record.start_us),
                record.record_sequence,
                [[c.token, list(c.parent_partition_tokens)] for c in record.child_partitions],
            ]
        )
    else:
        data.append(
            [
                format_micros(record.commit_us),
                record.record_sequence,
                record.server_transaction_id,
                record.is_last_record_in_transaction_in_partition,
                record.table.name,
                _googlesql_column_types(record),
                [
                    [_dumps(m["keys"]), _dumps(m["new_values"]), _dumps(m["old_values"])]
                    for m in record.mods()
                ],
                record.mod_type,
                record.value_capture_type,
                str(record.number_of_records_in_transaction),
                str(record.number_of_partitions_in_transaction),
                record.transaction_tag,
                record.is_system_transaction,
            ]
        )
    _fill(value, [[data, heartbeat, children]])
    return value


# (id(table), column names) -> (table, wire column_types): the table is kept to rule out id reuse.
_COLUMN_TYPES: dict[tuple, tuple] = {}


def _googlesql_column_types(record: DataChangeRecord) -> list:
    cache_key = (id(record.table), record.column_names)
    cached = _COLUMN_TYPES.get(cache_key)
    if cached is None or cached[0] is not record.table:
        table = record.table
        columns = {c.name: c for c in table.columns}
        described = [
            [
                name,
                _dumps(columns[name].type.type_json(GOOGLESQL)),
                columns[name].primary_key,
                str(table.ordinal(name)),
            ]
            for name in record.column_names
        ]
        cached = _COLUMN_TYPES[cache_key] = (table, described)
    return cached[1]


def _fill(target: struct_pb2.Value, item: Any) -> None:
    """Write a nested list of str/bool leaves into ``target`` (STRUCT and ARRAY are ListValue)."""
    if isinstance(item, list):
        values = target.list_value.values
        target.list_value.SetInParent()
        for element in item:
            _fill(values.add(), element)
    elif isinstance(item, bool):
        target.bool_value = item
    else:
        target.string_value = item


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))
