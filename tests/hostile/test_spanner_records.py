"""Spanner change stream records of any content end as change rows or dead letters.

A result row of the change stream query goes through the same functions the partition read
runs (:func:`parse_result_row`, then :func:`rows_or_dead_letter` for each data change
record), in both dialects: the PostgreSQL dialect's JSONB object, and the GoogleSQL
``ChangeRecord`` as the client hands it over (STRUCTs as positional lists, named by the
result metadata). Only a child partitions record that cannot be read stops a read (it names
where the partition continues); it fails naming itself.
"""

from __future__ import annotations

import copy
from datetime import datetime, timezone

import pytest
from google.cloud.spanner_v1 import TypeCode
from google.cloud.spanner_v1.data_types import JsonObject
from hypothesis import given
from hypothesis import strategies as st

from airflow_cdc_emulators.spanner.records import metadata
from airflow_cdc.model import PartitionOutcome
from airflow_cdc.sources.base import PartitionRead
from airflow_cdc.sources.spanner.mapping import rows_or_dead_letter
from airflow_cdc.sources.spanner.query import GOOGLE_SQL, POSTGRESQL
from airflow_cdc.sources.spanner.records import (
    ChangeRecordParseError,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
    MalformedRecord,
    parse_result_row,
)

from .strategies import mutated, utf8_hostile_values
from .support import HALF, check_partition_read

T0 = datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc)
STREAM, WINDOW_ID, PARTITION = "music", "2024-05-01T10:00:00.000000Z/2024-05-01T11:00:00.000000Z", "token-1"


def data_change(transaction: str = "txn-1", sequence: str = "00000001", key: str = "1") -> dict:
    return {"data_change_record": {
        "commit_timestamp": "2024-05-01T10:00:01.123456789Z", "record_sequence": sequence,
        "server_transaction_id": transaction, "is_last_record_in_transaction_in_partition": True,
        "table_name": "Singers",
        "column_types": [
            {"name": "SingerId", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
            {"name": "Name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
            {"name": "Score", "type": {"code": "NUMERIC", "type_annotation": "PG_NUMERIC"},
             "is_primary_key": False, "ordinal_position": 3},
            {"name": "Tags", "type": {"code": "ARRAY", "array_element_type": {"code": "INT64"}},
             "is_primary_key": False, "ordinal_position": 4},
            {"name": "Doc", "type": {"code": "JSON"}, "is_primary_key": False, "ordinal_position": 5},
        ],
        "mods": [{"keys": {"SingerId": key}, "new_values": {"Name": "é", "Score": "1.5", "Tags": ["1", "2"],
                                                           "Doc": {"a": [1, {"b": None}]}},
                  "old_values": {}}],
        "mod_type": "UPDATE", "value_capture_type": "NEW_VALUES",
        "number_of_records_in_transaction": 1, "number_of_partitions_in_transaction": 1,
        "transaction_tag": "", "is_system_transaction": False,
    }}


HEARTBEAT = {"heartbeat_record": {"timestamp": "2024-05-01T10:00:02Z"}}
CHILDREN = {"child_partitions_record": {
    "start_timestamp": "2024-05-01T10:00:03Z", "record_sequence": "00000002",
    "child_partitions": [{"token": "child-1", "parent_partition_tokens": ["token-1"]}]}}
VALID = [data_change(), HEARTBEAT, CHILDREN]
GOOGLE_FIELDS = metadata(GOOGLE_SQL, "READ_music").row_type.fields
# Spanner's strings reach the reader as UTF-8 (protobuf strings, the server's JSON text).
UTF8 = utf8_hostile_values


def positional(value, spanner_type):
    """A PostgreSQL-dialect value as the Python client hands the GoogleSQL one over."""
    if value is None:
        return None
    code = spanner_type.code
    if code == TypeCode.ARRAY:
        return [positional(v, spanner_type.array_element_type) for v in value]
    if code == TypeCode.STRUCT:
        return [positional(value.get(f.name), f.type_) for f in spanner_type.struct_type.fields]
    if code == TypeCode.TIMESTAMP:
        return datetime.fromisoformat(value[:26].rstrip("Z") + "+00:00") if "." in value else (
            datetime.fromisoformat(value.replace("Z", "+00:00")))
    if code == TypeCode.JSON:
        return JsonObject(value)
    if code == TypeCode.INT64:
        return int(value)
    return value


KINDS = ("data_change_record", "heartbeat_record", "child_partitions_record")
_STRUCT = GOOGLE_FIELDS[0].type_.array_element_type.struct_type.fields


def google_record(record: dict):
    """The positional value of a record's one struct (a data change, heartbeat or children)."""
    kind = next(iter(record))
    return positional(record[kind], _STRUCT[KINDS.index(kind)].type_.array_element_type)


def google_row(kind: str, value) -> list:
    """The GoogleSQL row holding ``value`` (positional) as its ``kind`` record: one
    ChangeRecord, an ARRAY of one STRUCT of three ARRAYs."""
    return [[[[value] if k == kind else [] for k in KINDS]]]


def read_row(row: list, fields, dialect: str, children_allowed: bool):
    """The row's records through the partition read's functions; the tuples Spark would get."""
    try:
        records = parse_result_row(row, fields, dialect)
    except ChangeRecordParseError as error:
        assert children_allowed, error
        assert "child_partitions_record is malformed" in str(error) or "is not a struct/object" in str(error)
        return [], [], []
    rows, dead = [], []
    for record in records:
        assert isinstance(record, (DataChangeRecord, MalformedRecord, HeartbeatRecord, ChildPartitionsRecord))
        if isinstance(record, (DataChangeRecord, MalformedRecord)):
            mapped, dead_letter = rows_or_dead_letter(record, STREAM, WINDOW_ID, PARTITION)
            rows += mapped
            dead += [dead_letter] if dead_letter else []
    read = PartitionRead(rows=tuple(rows), outcome=PartitionOutcome(PARTITION, False, T0),
                         dead_letters=tuple(dead))
    return (*check_partition_read(STREAM, WINDOW_ID, read), records)


@given(st.sampled_from(VALID).flatmap(lambda valid: st.tuples(st.just(valid), mutated(valid, values=UTF8))))
def test_any_postgresql_change_record_becomes_change_rows_a_record_or_a_dead_letter(pair):
    valid, record = pair

    rows, dead, records = read_row([record], None, POSTGRESQL, children_allowed=valid is CHILDREN)

    assert all(d["reason"].startswith(("extract: data_change_record", "extract: heartbeat_record")) for d in dead)
    assert all(r["source_table"] and r["event_id"] for r in rows)


@given(st.sampled_from(VALID).flatmap(lambda valid: st.tuples(st.just(valid), mutated(google_record(valid), 4, UTF8))))
def test_any_googlesql_change_record_becomes_change_rows_a_record_or_a_dead_letter(pair):
    valid, value = pair

    read_row(google_row(next(iter(valid)), value), GOOGLE_FIELDS, GOOGLE_SQL,
             children_allowed=valid is CHILDREN)


@given(st.sampled_from(VALID).flatmap(
    lambda valid: mutated(google_row(next(iter(valid)), google_record(valid))[0], 3, UTF8)))
def test_a_googlesql_row_of_any_shape_is_read_or_stops_the_read_naming_the_change_record(value):
    # A ChangeRecord that is no struct, or whose child partitions slot cannot be read, may
    # have carried where the partition continues: the read stops, naming it (I5).
    read_row([value], GOOGLE_FIELDS, GOOGLE_SQL, children_allowed=True)


@HALF
@given(st.lists(st.sampled_from([data_change(), HEARTBEAT]).flatmap(lambda v: mutated(v, values=UTF8)),
                min_size=1, max_size=5),
       st.randoms())
def test_every_good_record_among_hostile_records_becomes_change_rows(hostile, random):
    good = [data_change(transaction=f"good-{i}", key=str(100 + i)) for i in range(3)]
    records = good + hostile
    random.shuffle(records)

    landed = set()
    for record in records:
        rows, _, _ = read_row([record], None, POSTGRESQL, children_allowed=False)
        landed |= {r["event_id"] for r in rows}

    assert {f"good-{i}/00000001/0" for i in range(3)} <= landed


def test_a_data_change_record_without_its_commit_timestamp_is_a_dead_letter_naming_it():
    record = data_change()
    del record["data_change_record"]["commit_timestamp"]

    rows, [dead], _ = read_row([record], None, POSTGRESQL, children_allowed=False)

    assert rows == [] and dead["reason"] == (
        "extract: data_change_record (table_name 'Singers', server_transaction_id 'txn-1', "
        "record_sequence '00000001') is malformed (field 'commit_timestamp' is missing)")
    assert dead["event_id"] == "txn-1/00000001" and dead["source_table"] == "Singers"


def test_a_malformed_record_still_counts_for_its_transaction():
    record = data_change()
    record["data_change_record"]["mods"][0]["keys"] = ["not", "an", "object"]

    [malformed] = parse_result_row([record], None, POSTGRESQL)

    assert isinstance(malformed, MalformedRecord)
    assert (malformed.server_transaction_id, malformed.record_sequence,
            malformed.number_of_records_in_transaction) == ("txn-1", "00000001", 1)
    assert "keys is a JSON list, not an object" in malformed.reason


def test_an_int64_value_that_is_no_integer_is_a_dead_letter_naming_the_record():
    record = data_change()
    record["data_change_record"]["mods"][0]["keys"] = {"SingerId": "1e999"}

    rows, [dead], _ = read_row([record], None, POSTGRESQL, children_allowed=False)

    assert rows == [] and dead["reason"].startswith(
        "extract: data_change_record (table_name 'Singers', server_transaction_id 'txn-1', "
        "record_sequence '00000001') cannot become change rows (ValueError: invalid literal for int()")


def test_a_malformed_child_partitions_record_stops_the_read_naming_itself():
    record = copy.deepcopy(CHILDREN)
    record["child_partitions_record"]["child_partitions"] = [{"parent_partition_tokens": []}]

    with pytest.raises(ChangeRecordParseError, match=r"child_partitions_record is malformed \(field 'token' is missing\)"):
        parse_result_row([record], None, POSTGRESQL)

