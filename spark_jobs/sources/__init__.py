"""The Spark side of each change source, found by the source's kind.

A source's wire format is in ``airflow_cdc/sources/<kind>/`` (no pyspark); what of it builds or
takes DataFrames is here, one module per kind with a :class:`~.base.SparkSide` subclass.
:func:`spark_side` is the one place the extract and apply jobs find it:

1. a built-in kind names its Spark side in :data:`SPARK_SIDES`;
2. any other source names its own by import path (``ChangeSource.spark_side``,
   ``"package.module:Class"``);
3. otherwise the source gets the plain :class:`~.base.SparkSide` (partitions read by the
   extract job, every row kept as read, the relational apply).

Nothing here imports a source's Spark side before it is asked for.
"""

from __future__ import annotations

import importlib

from airflow_cdc.spark_jobs.sources.base import SparkSide

SPARK_SIDES = {
    "datastream": "airflow_cdc.spark_jobs.sources.datastream:DatastreamSpark",
    "debezium": "airflow_cdc.spark_jobs.sources.debezium:DebeziumSpark",
    "bigtable_change_stream": "airflow_cdc.spark_jobs.sources.bigtable:BigtableSpark",
    "spanner_commit_ts": "airflow_cdc.spark_jobs.sources.spanner_commit_ts:CommitTimestampSpark",
}


def spark_side_class(source) -> type[SparkSide]:
    """The :class:`~.base.SparkSide` subclass of ``source`` (a ChangeSource), by the rule of
    the module doc."""
    path = getattr(type(source), "spark_side", None) or SPARK_SIDES.get(source.kind)
    if path is None:
        return SparkSide
    module_name, _, attribute = path.partition(":")
    found = getattr(importlib.import_module(module_name), attribute)
    if not (isinstance(found, type) and issubclass(found, SparkSide)):
        raise TypeError(f"source {source.kind!r} names {path!r} as its Spark side, which is not "
                        f"a SparkSide subclass: derive it from airflow_cdc.spark_jobs.sources.base.SparkSide")
    return found


def spark_side(source) -> SparkSide:
    """``source``'s Spark side, holding ``source``."""
    return spark_side_class(source)(source)
