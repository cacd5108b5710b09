"""Rows read at a window's end -> change rows.

* A plain table's row is its latest version at the read timestamp: one ``UPDATE`` with the
  FULL image (apply upserts it; whether the key is new is not known from a read).
* A change-log table's row (the seed's ``DocumentHistory``: one row per change, keyed by the
  commit timestamp) is an ``INSERT``: appended, in order.
* A row whose soft-delete column says deleted (a BOOL true, a TIMESTAMP not NULL) is a
  ``DELETE`` carrying the row as its old values.
* A key the reconciliation no longer finds is a ``DELETE`` at the instant it was read.

Order per key (I2): the commit timestamp, then a phase (0: a row read, 1: a reconciliation
delete at the read instant, after every row committed before it), then the key. Rows of one
transaction share a commit timestamp, and so do transactions on disjoint rows (seed 003);
one key has at most one version per commit timestamp, so the ordering key of a change to one
key is unique. Event ids name the table, the instant and the key, so a re-read gives the
same ids (I1).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any

from airflow_cdc.model import ChangeRow, Image, Op, encode_ordering_key, format_ts, value_texts
from airflow_cdc.sources.base import DeadLetter, changelog_tuple, dead_letter_tuple
from airflow_cdc.sources.spanner_commit_ts.schema import CHANGELOG, TablePlan

ROW_PHASE, RECONCILE_PHASE = 0, 1
ORDERING_KEY_PARTS = ("commit_timestamp", "phase", "primary_key")


class UnreadableRowError(ValueError):
    """A row that cannot become a change (its commit-timestamp column is NULL)."""


def normalize(value: Any, type_name: str = "") -> Any:
    """A value as google-cloud-spanner returns it -> the value change rows carry: JSON columns
    as their JSON text and DATE as ISO text (as Spanner's change streams give them), BYTES
    decoded (the client hands them over still base64-encoded), TIMESTAMP as a plain datetime
    (the client's ``DatetimeWithNanoseconds`` subclass is refused by Spark's TimestampType;
    commit timestamps have microsecond precision, as does every timestamp of the changelog),
    lists element by element."""
    if value is None:
        return None
    if isinstance(value, list):
        inner = type_name[len("ARRAY<"):-1] if type_name.startswith("ARRAY<") else ""
        return [normalize(v, inner) for v in value]
    if type_name == "BYTES" and isinstance(value, (bytes, str)):
        return base64.b64decode(value)
    if isinstance(value, datetime):
        return datetime(value.year, value.month, value.day, value.hour, value.minute,
                        value.second, value.microsecond, tzinfo=value.tzinfo)
    if isinstance(value, (str, bool, int, float, bytes)):
        return value
    if isinstance(value, date):
        return value.isoformat()  # DATE as change streams carry it
    serialize = getattr(value, "serialize", None)  # JsonObject (a dict or list subclass)
    if callable(serialize):
        return serialize()
    return value


def key_text(keys: Mapping[str, Any]) -> str:
    """The primary key as canonical text (event ids, the ordering key's last part)."""
    return json.dumps(value_texts(dict(keys)), sort_keys=True, separators=(",", ":"))


def is_soft_deleted(plan: TablePlan, record: Mapping[str, Any]) -> bool:
    if not plan.soft_delete:
        return False
    flag = record.get(plan.soft_delete)
    return bool(flag) if plan.soft_delete_type == "BOOL" else flag is not None


def row_change(plan: TablePlan, values: Sequence[Any], *, stream: str, window_id: str,
               read_at: datetime) -> ChangeRow:
    """One result row (in ``plan.columns`` order) -> its change row."""
    record = {name: normalize(value, type_name)
              for (name, type_name), value in zip(plan.columns, values)}
    committed = record.get(plan.column)
    if not isinstance(committed, datetime):
        raise UnreadableRowError(
            f"row of {plan.table} has {plan.column} = {committed!r}: a row without its commit "
            f"timestamp cannot be ordered; write the column with the commit timestamp"
        )
    keys = {name: record[name] for name in plan.keys}
    deleted = is_soft_deleted(plan, record)
    op = Op.DELETE if deleted else (Op.INSERT if plan.kind == CHANGELOG else Op.UPDATE)
    text = key_text(keys)
    return ChangeRow(
        stream=stream,
        window_id=window_id,
        source_table=plan.table,
        op=op,
        image=Image.FULL,
        keys=keys,
        new_values=None if deleted else record,
        old_values=record if deleted else None,
        column_types=plan.types,
        commit_ts=committed,
        ordering_key=encode_ordering_key(committed, ROW_PHASE, text),
        transaction_id=format_ts(committed),
        event_id=f"{plan.table}/{format_ts(committed)}/{text}",
        partition_id=plan.table,
        source_metadata={"read_timestamp": format_ts(read_at), "table_kind": plan.kind,
                         "soft_deleted": deleted},
    )


def reconcile_delete(plan: TablePlan, keys: Mapping[str, Any], *, stream: str, window_id: str,
                     read_at: datetime) -> ChangeRow:
    """The DELETE of a key the target holds and a read at ``read_at`` no longer finds."""
    text = key_text(keys)
    return ChangeRow(
        stream=stream,
        window_id=window_id,
        source_table=plan.table,
        op=Op.DELETE,
        image=Image.FULL,
        keys=dict(keys),
        new_values=None,
        old_values=None,
        column_types=plan.types,
        commit_ts=read_at,
        ordering_key=encode_ordering_key(read_at, RECONCILE_PHASE, text),
        transaction_id=None,
        event_id=f"{plan.table}/reconciled/{format_ts(read_at)}/{text}",
        partition_id=plan.table,
        source_metadata={"read_timestamp": format_ts(read_at), "reconciled": True},
    )


def row_results(plan: TablePlan, values, *, table: str, stream: str, window_id: str,
                read_at: datetime) -> list[tuple]:
    """What one result row of a window read becomes: ("row", table, changelog tuple), after
    ("soft", table, None) for a soft delete; or one ("dead", table, dead-letter tuple) naming
    the row and the fault, whatever the row holds (the window's other rows still land)."""
    try:
        if len(values) != len(plan.columns):
            raise UnreadableRowError(
                f"row of {plan.table} has {len(values)} values for its {len(plan.columns)} "
                f"columns {[name for name, _ in plan.columns]}")
        row = row_change(plan, values, stream=stream, window_id=window_id, read_at=read_at)
        written = changelog_tuple(row)
    except Exception as error:  # noqa: BLE001 - the row is kept with the reason
        reason = str(error) if isinstance(error, UnreadableRowError) else (
            f"row of {plan.table} cannot become a change row ({type(error).__name__}: {error})")
        try:
            raw = json.dumps([repr(v) for v in values])
        except Exception:  # noqa: BLE001
            raw = f"<a {type(values).__name__} of values>"
        return [("dead", table, dead_letter_tuple(stream, window_id,
                                                  DeadLetter(table, raw, reason, plan.table)))]
    soft = [("soft", table, None)] if row.op == "DELETE" else []
    return [*soft, ("row", table, written)]
