"""Each source's Spark side is found by its kind (airflow_cdc.spark_jobs.sources): built-in kinds
by the registry, other sources by the import path they name, the rest get the plain side."""

from __future__ import annotations

import pytest

from airflow_cdc.sources.base import ChangeSource
from airflow_cdc.sources.registry import BUILT_IN, source_class
from airflow_cdc.spark_jobs.sources import SPARK_SIDES, spark_side
from airflow_cdc.spark_jobs.sources.base import SparkSide


class PlainSource(ChangeSource):
    kind = "plain_partitions"


class CheckingSide(SparkSide):
    rows_pass_through = False

    def check_window(self, spark, plan, frame) -> dict:
        return {"checked": 1}


class NamedSideSource(ChangeSource):
    kind = "named_side"
    spark_side = f"{__name__}:CheckingSide"


class NotASideSource(ChangeSource):
    kind = "not_a_side"
    spark_side = f"{__name__}:PlainSource"


@pytest.mark.parametrize("kind", sorted(BUILT_IN))
def test_every_built_in_kind_has_its_spark_side_or_the_plain_one(kind):
    cls = source_class(kind)
    side = spark_side(cls.__new__(cls))
    assert isinstance(side, SparkSide)
    assert (type(side) is not SparkSide) == (kind in SPARK_SIDES)


def test_the_sources_that_read_windows_whole_or_apply_their_own_changes_have_a_side_that_does():
    for kind in BUILT_IN:
        cls = source_class(kind)
        side = type(spark_side(cls.__new__(cls)))
        if cls.reads_whole_windows:
            assert side.read_window is not SparkSide.read_window, kind
        if cls.applies_own_changes:
            assert side.apply_window is not SparkSide.apply_window, kind


def test_a_source_without_a_spark_side_keeps_every_row_as_read():
    side = spark_side(PlainSource({}))
    assert type(side) is SparkSide and side.rows_pass_through
    assert side.drop_repeats(None, None, "frame") == "frame"
    assert side.native_rows(None, None) is None and side.check_window(None, None, None) == {}


def test_a_source_names_its_own_spark_side_by_import_path():
    side = spark_side(NamedSideSource({}))
    assert isinstance(side, CheckingSide) and side.check_window(None, None, None) == {"checked": 1}


def test_a_spark_side_that_is_not_one_is_refused_naming_the_fix():
    with pytest.raises(TypeError, match="derive it from airflow_cdc.spark_jobs.sources.base.SparkSide"):
        spark_side(NotASideSource({}))
