"""Checks every hostile-input test shares: what a parser hands to Spark must fit the tables.

A parser's output leaves a Spark task as tuples that ``spark.createDataFrame`` turns into
changelog or dead-letter rows. pyspark's own type verifier (the one ``createDataFrame``
runs) and the schema's conversion to Spark's internal form are pure Python, so a test can
tell, without a JVM, that a tuple will be accepted: a wrong type or a timestamp Spark
cannot hold fails here rather than in the job.
"""

from __future__ import annotations

from hypothesis import settings

from airflow_cdc.model import CHANGELOG_COLUMNS

#: For properties whose examples are batches of records (good ones among hostile ones): half
#: the examples of the loaded profile (conftest.py), each several records.
HALF = settings(max_examples=max(1, settings.default.max_examples // 2))

_CHANGELOG_NAMES = [name for name, _ in CHANGELOG_COLUMNS]
_verifiers: dict[str, tuple] = {}


def _schema(kind: str):
    from pyspark.sql import types as T

    from airflow_cdc.spark_jobs.changelog import changelog_schema

    if kind not in _verifiers:
        schema = changelog_schema()
        if kind == "dead":
            schema = T.StructType(list(schema.fields) + [T.StructField("reason", T.StringType())])
        _verifiers[kind] = (schema, T._make_type_verifier(schema))
    return _verifiers[kind]


def fits(kind: str, values: tuple) -> tuple:
    """``values`` if Spark's ``createDataFrame`` accepts it as a ``kind`` ("row": changelog,
    "dead": dead letter) row, and keeps it as it is; raises naming what does not fit otherwise.

    Spark accepts a string holding a lone surrogate but stores U+FFFD in its place: every
    text must be UTF-8, or the row would land altered.
    """
    schema, verify = _schema(kind)
    verify(values)
    schema.toInternal(values)
    for value in values:
        for text in _texts(value):
            text.encode("utf-8")  # UnicodeEncodeError: Spark would alter it
    return values


def _texts(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _texts(key)
            yield from _texts(item)


def as_record(values: tuple) -> dict:
    """A changelog (or dead-letter) tuple as a dict by column name."""
    names = _CHANGELOG_NAMES + (["reason"] if len(values) > len(_CHANGELOG_NAMES) else [])
    return dict(zip(names, values))


def check_dead_letter(values: tuple) -> dict:
    """A dead-letter tuple that fits its table and carries a reason; returned as a dict."""
    record = as_record(fits("dead", values))
    assert isinstance(record["reason"], str) and len(record["reason"]) > len("extract: "), record
    return record


def check_partition_read(stream: str, window_id: str, read) -> tuple[list[dict], list[dict]]:
    """A source's partition read as its Spark task hands it over (changelog and dead-letter
    tuples), each checked to fit its table; returned as dicts by column name."""
    from airflow_cdc.sources.base import read_tuples

    rows, dead = read_tuples(stream, window_id, read)
    return [as_record(fits("row", r)) for r in rows], [check_dead_letter(d) for d in dead]
