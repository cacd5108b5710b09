"""The apply job's configuration is validated before any SQL is built (pure Python)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc.spark_jobs.apply import ApplyConfig, ApplyConfigError
from airflow_cdc.spark_jobs.apply.config import TableName

BASE = {
    "stream": "orders",
    "window_id": "2024-05-01T10:00:00.000000Z/2024-05-01T11:00:00.000000Z",
    "changelog_table": "cdc.orders_changelog",
    "targets": {"namespace": "current"},
}


def config(**changes) -> ApplyConfig:
    data = {**BASE, **changes}
    return ApplyConfig.from_dict(data)


def test_defaults_fail_on_dead_letters_keep_tombstones_a_week_and_no_history():
    parsed = config()
    assert parsed.on_dead_letter == "fail"
    assert parsed.tombstone_horizon == timedelta(days=7)
    assert parsed.history_enabled("Singers") is False
    assert parsed.dead_letter_table.qualified == "lake.current.orders_dead_letters"
    assert parsed.window_end == datetime(2024, 5, 1, 11, tzinfo=timezone.utc)


def test_targets_come_from_the_mapping_or_the_source_table_name():
    parsed = config(targets={"namespace": "current", "mapping": {"Singers": "singers", "Albums": "music.albums"}})
    assert parsed.target_for("Singers").qualified == "lake.current.singers"
    assert parsed.target_for("Albums").qualified == "lake.music.albums"
    assert parsed.target_for("Songs").qualified == "lake.current.Songs"
    assert parsed.target_for("Songs").with_suffix("__tombstones").name == "Songs__tombstones"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"targets": {"namespace": "current", "mapping": {"A": "x;drop"}}}, "'x;drop' is not an identifier"),
        ({"targets": {"namespace": "cur rent"}}, "'cur rent' is not an identifier"),
        ({"changelog_table": "orders"}, "is not <namespace>.<name>"),
        ({"policies": {"on_dead_letter": "ignore"}}, "'ignore' is not one of"),
        ({"policies": {"tombstone_horizon_seconds": -1}}, "non-negative"),
        ({"targets": {"namespace": "c", "mapping": {"A": "t", "B": "t"}}}, "both map to lake.c.t"),
        ({"window_id": "not-a-window"}, "cannot tell the window's end"),
        ({"fault_point": "somewhere"}, "fault_point 'somewhere'"),
        ({"fault_point": ["fail_target_commit", "after_target_commit"]}, "fault_point 'after_target_commit'"),
        ({"targets": {"namespace": "c", "history": "yes"}}, "targets.history"),
        ({"fold_rows_per_task": 10}, "fold_rows_per_task 10 must be an integer of at least 1000"),
        ({"fold_rows_per_task": "many"}, "fold_rows_per_task 'many'"),
        ({"guard_filter_max_rows": -1}, "guard_filter_max_rows -1 must be a non-negative integer"),
        ({"targets": {"namespace": "c", "write_mode": "upsert"}}, "targets.write_mode 'upsert' is not one of"),
        ({"targets": {"namespace": "c", "compact_delete_files": -1}}, "targets.compact_delete_files -1 must be"),
    ],
)
def test_bad_configs_are_refused_with_the_reason(changes, message):
    with pytest.raises(ApplyConfigError) as error:
        config(**changes)
    assert message in str(error.value)


def test_an_unusable_source_table_name_is_reported_for_dead_letters():
    with pytest.raises(ValueError) as error:
        config().target_for("bad-table")
    assert "'bad-table' is not an identifier" in str(error.value)


def test_tombstones_are_purged_relative_to_the_window_end_not_the_clock():
    parsed = config(policies={"tombstone_horizon_seconds": 3600})
    assert parsed.tombstone_cutoff == datetime(2024, 5, 1, 10, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("qualified", "message"),
    [("lake.t", "is not <catalog>.<namespace>.<name>"), ("lake.ns.x;drop", "'x;drop' is not an identifier")],
)
def test_a_table_name_without_three_valid_parts_is_refused(qualified, message):
    with pytest.raises(ApplyConfigError) as error:
        TableName.parse(qualified)
    assert message in str(error.value)


def test_a_qualified_table_name_parses_into_its_parts():
    assert TableName.parse("lake.ns.t") == TableName("lake", "ns", "t")
