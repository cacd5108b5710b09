"""Rows a parallel snapshot read over JDBC, as the changelog's READ change rows, in Spark.

The rows never pass through Python: every column becomes its changelog text (the text
:func:`airflow_cdc.model.value_text` gives the same value in a Debezium event) with Spark SQL,
and its canonical type (:mod:`airflow_cdc.sources.column_types`) comes from the Spark type the
JDBC reader gave it, the way Debezium's default mapping types the same column:

==============================  ==================  =========================================
Spark type (JDBC)               canonical           changelog text
==============================  ==================  =========================================
byte, short, int, long          INT64               decimal digits
decimal(p,s) (numeric(p,s))     NUMERIC(p,s)        exact decimal text
string (text, varchar, ...)     STRING              as is
boolean                         BOOL                ``true`` / ``false``
float, double                   FLOAT32, FLOAT64    Spark's text (``NaN``, ``1.0E10``)
date                            DATE                ``YYYY-MM-DD``
timestamp (timestamptz)         TIMESTAMP           ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (UTC)
timestamp_ntz (timestamp)       DATETIME            ``YYYY-MM-DDTHH:MM:SS.ffffff``
binary (bytea, blob)            BYTES               base64
==============================  ==================  =========================================

The reader's ``customSchema`` (``spark_jobs/snapshot.py``) reads PostgreSQL ``timestamp with
time zone`` as ``timestamp`` and ``timestamp without time zone`` as ``timestamp_ntz`` (the
driver reports both alike), and a ``numeric`` without precision as text, typed PG_NUMERIC, as Debezium's VariableScaleDecimal is, so no digit is
rounded to Spark's decimal(38,18). Any other type is refused naming the column.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from airflow_cdc.model import CdcError


class UnsupportedSnapshotColumnError(CdcError, ValueError):
    """A column the JDBC reader typed in a way the changelog has no text for."""


# Spark type -> (canonical type, SQL text of its changelog text, ``{}`` the column).
_TEXTS = {
    **{t: ("INT64", "CAST({} AS STRING)") for t in ("tinyint", "smallint", "int", "bigint")},
    **{t: ("STRING", "{}") for t in ("string", "varchar", "char")},
    "boolean": ("BOOL", "CAST({} AS STRING)"),
    "float": ("FLOAT32", "CAST({} AS STRING)"),
    "double": ("FLOAT64", "CAST({} AS STRING)"),
    "date": ("DATE", "CAST({} AS STRING)"),
    "timestamp": ("TIMESTAMP", "date_format({}, \"yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'\")"),
    "timestamp_ntz": ("DATETIME", "date_format({}, \"yyyy-MM-dd'T'HH:mm:ss.SSSSSS\")"),
    "binary": ("BYTES", "base64({})"),
}


def canonical_and_text(column: str, spark_type: str, declared: str | None = None,
                       ref: str | None = None) -> tuple[str, str]:
    """(canonical type, SQL text of the column's changelog text) for ``column`` of Spark type
    ``spark_type`` (``DataType.simpleString``); ``declared`` overrides the canonical type of a
    column read as text (PG_NUMERIC); ``ref`` is the SQL text naming the column (default:
    ``column`` quoted)."""
    ref = ref or f"`{column.replace('`', '``')}`"
    if declared is not None:
        return declared, f"CAST({ref} AS STRING)"
    if spark_type.startswith("decimal("):
        precision, scale = spark_type[len("decimal("):-1].split(",")
        return f"NUMERIC({precision},{scale})", f"CAST({ref} AS STRING)"
    base = spark_type.split("(", 1)[0]  # varchar(20), char(3)
    if base in _TEXTS and (base == spark_type or base in ("varchar", "char")):
        canonical, text = _TEXTS[base]
        return canonical, text.format(ref)
    raise UnsupportedSnapshotColumnError(
        f"column {column!r} was read as Spark type {spark_type!r}, which a snapshot cannot write "
        f"as a change: leave the column out of the snapshot's columns, or cast it in a view "
        f"the snapshot reads")


def read_rows(frame, *, stream: str, source_table: str, key_columns: Sequence[str],
              ordering_key: bytes, commit_ts, event_id_prefix: str, partition_id: str,
              metadata: Mapping, declared: Mapping[str, str] | None = None):
    """``frame`` (the JDBC reader's rows) as changelog rows (``CHANGELOG_COLUMNS``) of READ
    changes at ``ordering_key``; ``window_id`` stays empty until a window takes them."""
    from pyspark.sql import functions as F

    from airflow_cdc.spark_jobs.apply.sql import string

    declared = dict(declared or {})
    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    # The database's column names never enter SQL text as names: Spark substitutes ${...} in
    # SQL text before parsing, quoted names included. The columns are renamed by position
    # (no parsing), and their names appear only as escaped literals (the map keys).
    refs = {name: f"__c{index}" for index, name in enumerate(types)}
    frame = frame.toDF(*refs.values())
    missing = [k for k in key_columns if k not in types]
    if missing:
        raise UnsupportedSnapshotColumnError(f"key columns {missing} are not among the columns read {sorted(types)}")
    texts, canonical = {}, {}
    for column in sorted(types):
        canonical[column], texts[column] = canonical_and_text(
            column, types[column], declared.get(column), refs[column])
    # Column names are the database's: quoted as literals, whatever they hold.
    key_map = ", ".join(f"{string(k)}, {texts[k]}" for k in sorted(key_columns))
    value_map = ", ".join(f"{string(c)}, {texts[c]}" for c in sorted(types))
    column_types_json = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    keys = F.expr(f"map({key_map})")
    return frame.select(
        F.lit(stream).alias("stream"),
        F.lit("").alias("window_id"),
        F.lit(source_table).alias("source_table"),
        F.lit("READ").alias("op"),
        F.lit("FULL").alias("image"),
        keys.alias("keys"),
        F.expr(f"map({value_map})").alias("new_values"),
        F.lit(None).cast("map<string,string>").alias("old_values"),
        F.lit(column_types_json).alias("column_types_json"),
        F.lit(commit_ts).cast("timestamp").alias("commit_ts"),
        F.lit(bytearray(ordering_key)).alias("ordering_key"),
        F.lit(None).cast("string").alias("transaction_id"),
        F.concat(F.lit(event_id_prefix), F.to_json(keys)).alias("event_id"),
        F.lit(partition_id).alias("partition_id"),
        F.lit(json.dumps(dict(metadata), sort_keys=True, separators=(",", ":"))).alias(
            "source_metadata_json"),
    )
