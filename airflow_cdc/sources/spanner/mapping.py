"""Data change records -> source-agnostic change rows (one per mod).

Ordering key per key: (commit_timestamp, server_transaction_id, record_sequence, mod index).
Two transactions touching one key never share a commit timestamp in Spanner, so the later
parts only order records of one transaction, which record_sequence does.
"""

from __future__ import annotations

import dataclasses
import json

from airflow_cdc.model import ChangeRow, Image, Op, encode_ordering_key
from airflow_cdc.sources.base import DeadLetter
from airflow_cdc.sources.spanner.records import ColumnTypes, DataChangeRecord, MalformedRecord
from airflow_cdc.sources.spanner.types import change_row_type

# Value capture types whose UPDATE images carry only the changed columns.
PARTIAL_CAPTURE_TYPES = frozenset({"OLD_AND_NEW_VALUES", "NEW_VALUES"})
ORDERING_KEY_PARTS = ("commit_timestamp", "server_transaction_id", "record_sequence", "mod_index")


def change_rows(
    record: DataChangeRecord, stream: str, window_id: str, partition_id: str
) -> list[ChangeRow]:
    """The change rows of one data change record, values normalized across dialects.

    Their ``column_types`` are canonical names (:func:`.types.change_row_type`): Spanner's
    type objects, PostgreSQL annotations folded, as apply reads them.
    """
    columns = record.column_types
    if isinstance(columns, ColumnTypes):
        types, integers = columns.row_types, columns.integer_columns
    else:
        types, integers = {column.name: change_row_type(column.type) for column in columns}, None
    op = Op(record.mod_type)
    image = (
        Image.PARTIAL
        if op is Op.UPDATE and record.value_capture_type in PARTIAL_CAPTURE_TYPES
        else Image.FULL
    )
    # The parts an ordering key encodes one by one (model.encode_ordering_key), so the
    # record's part is encoded once and each mod appends its index.
    record_order = encode_ordering_key(
        record.commit_timestamp, record.server_transaction_id, _sequence_part(record.record_sequence)
    )
    # One dict for the record's rows (never changed): the changelog writes its JSON once.
    metadata = {
        "record_sequence": record.record_sequence,
        "mod_type": record.mod_type,
        "value_capture_type": record.value_capture_type,
        "transaction_tag": record.transaction_tag,
        "is_system_transaction": record.is_system_transaction,
        "number_of_records_in_transaction": record.number_of_records_in_transaction,
        "number_of_partitions_in_transaction": record.number_of_partitions_in_transaction,
    }
    rows = []
    for index, mod in enumerate(record.mods):
        rows.append(
            ChangeRow(
                stream=stream,
                window_id=window_id,
                source_table=record.table_name,
                op=op,
                image=image,
                keys=normalize_values(mod.keys, types, integers),
                new_values=None if op is Op.DELETE else normalize_values(mod.new_values, types, integers),
                old_values=normalize_values(mod.old_values, types, integers) or None,
                column_types=types,
                commit_ts=record.commit_timestamp,
                ordering_key=record_order + encode_ordering_key(index),
                transaction_id=record.server_transaction_id,
                event_id=f"{record.server_transaction_id}/{record.record_sequence}/{index}",
                partition_id=partition_id,
                source_metadata=metadata,
            )
        )
    return rows


def rows_or_dead_letter(
    record: DataChangeRecord | MalformedRecord, stream: str, window_id: str, partition_id: str
) -> tuple[list[ChangeRow], DeadLetter | None]:
    """The change rows of one data change record, or none and its dead letter: for a record
    without the documented shape, or one whose values cannot become change rows (an INT64
    that is no integer, a record sequence beyond 64 bits), naming the record and the fault."""
    if isinstance(record, MalformedRecord):
        event_id = (f"{record.server_transaction_id}/{record.record_sequence}"
                    if record.server_transaction_id and record.record_sequence else None)
        return [], DeadLetter(partition_id, record.raw, record.reason,
                              source_table=record.table_name, event_id=event_id)
    try:
        return change_rows(record, stream, window_id, partition_id), None
    except Exception as exc:  # noqa: BLE001 - the record is kept whole with the reason
        return [], DeadLetter(
            partition_id,
            json.dumps(dataclasses.asdict(record), default=str, sort_keys=True),
            f"data_change_record (table_name {record.table_name!r}, server_transaction_id "
            f"{record.server_transaction_id!r}, record_sequence {record.record_sequence!r}) "
            f"cannot become change rows ({type(exc).__name__}: {exc})",
            source_table=record.table_name,
            event_id=f"{record.server_transaction_id}/{record.record_sequence}",
        )


def _sequence_part(record_sequence: str) -> int | str:
    # Documented as a string that increases monotonically; numeric text compares as a number
    # so that "9" < "10" even without zero padding.
    return int(record_sequence) if record_sequence.isdigit() else record_sequence


def normalize_values(values: dict, types: dict[str, str], integers: frozenset[str] | None = None) -> dict:
    """INT64 values arrive as JSON strings (to keep 64-bit precision): make them ints, so both
    dialects, and every source, give the same change rows.

    ``integers``, when the caller knows them: the INT64 and ARRAY<INT64> columns of ``types``.
    A map without any is then the answer itself, not walked and copied (a performance
    strategy: most of a record's maps hold no integer, or only its keys do).
    """
    if integers is not None and values and integers.isdisjoint(values):
        return values
    return {name: _normalize(value, types.get(name, "")) for name, value in (values or {}).items()}


def _normalize(value, type_name: str):
    if value is None:
        return None
    if type_name == "INT64" and isinstance(value, str):
        return int(value)
    if type_name.startswith("ARRAY<") and isinstance(value, list):
        inner = type_name[len("ARRAY<") : -1]
        return [_normalize(v, inner) for v in value]
    return value
