"""A data change as change rows: one changelog row per mutation.

Each row names the cell it touches: ``keys`` hold the row key (base64), family and
qualifier (base64; absent for a family delete); ``new_values`` the mutation (``mutation``,
``cell_ts`` or ``ts_from``/``ts_to`` in microseconds, ``value`` base64), the record's
``type`` (USER or GARBAGE_COLLECTION), ``cluster``, ``tiebreaker`` and ``commit_micros``.
The ordering key is (commit timestamp, tiebreaker, position of the mutation in the record):
Bigtable's conflict rule per row, and the record's own order.
"""

from __future__ import annotations

import base64

from airflow_cdc.model import ChangeRow, Image, Op, encode_ordering_key
from airflow_cdc.sources.bigtable.records import (
    DELETE_FROM_COLUMN,
    DELETE_FROM_FAMILY,
    SET_CELL,
    DataChange,
)

ORDERING_KEY_PARTS = ("commit_timestamp", "tiebreaker", "mutation_index")
COLUMN_TYPES = {
    "row_key": "BYTES", "family": "STRING", "qualifier": "BYTES", "mutation": "STRING",
    "cell_ts": "INT64", "ts_from": "INT64", "ts_to": "INT64", "value": "BYTES",
    "type": "STRING", "cluster": "STRING", "tiebreaker": "INT64", "commit_micros": "INT64",
}


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def change_rows(
    record: DataChange, table_id: str, stream: str, window_id: str, partition_id: str
) -> list[ChangeRow]:
    micros = int(record.commit_timestamp.timestamp() * 1_000_000)
    rows = []
    for index, mutation in enumerate(record.mutations):
        keys = {"row_key": b64(record.row_key), "family": mutation.family}
        values: dict = {
            "mutation": mutation.kind, "type": record.type, "cluster": record.cluster or None,
            "tiebreaker": record.tiebreaker, "commit_micros": micros,
        }
        if mutation.kind == SET_CELL:
            keys["qualifier"] = b64(mutation.qualifier or b"")
            values.update(cell_ts=mutation.timestamp_micros, value=b64(mutation.value or b""))
        elif mutation.kind == DELETE_FROM_COLUMN:
            keys["qualifier"] = b64(mutation.qualifier or b"")
            values.update(ts_from=mutation.start_micros or 0, ts_to=mutation.end_micros or 0)
        elif mutation.kind != DELETE_FROM_FAMILY:
            raise ValueError(f"mutation kind {mutation.kind!r} is not a change stream mutation")
        rows.append(ChangeRow(
            stream=stream,
            window_id=window_id,
            source_table=table_id,
            op=Op.UPDATE if mutation.kind == SET_CELL else Op.DELETE,
            image=Image.PARTIAL,
            keys=keys,
            new_values=values,
            old_values=None,
            column_types={name: COLUMN_TYPES[name] for name in (*keys, *values)},
            commit_ts=record.commit_timestamp,
            ordering_key=encode_ordering_key(record.commit_timestamp, record.tiebreaker, index),
            event_id=f"{record.event_id}/{index}",
            partition_id=partition_id,
            source_metadata={"chunked": record.chunked} if record.chunked else {},
        ))
    return rows
