"""Merge-on-read targets (``targets.write_mode``): the same rows as copy-on-write, delete files
instead of rewritten data files, readable by other engines, and a mode that can be changed.

One history (inserts, full and partial updates, deletes, a late older change, a revive) is
applied in two namespaces, one per write mode (merge-on-read with the default compaction
threshold of 32 delete files, which these windows stay under).
"""

from __future__ import annotations

import pytest

from airflow_cdc.spark_jobs.apply.compaction import compact
from airflow_cdc.spark_jobs.apply.config import TableName

from .support import Changes, Lake, at, business, normalized, values_of, window

W0, W1, W2 = window(0), window(1), window(2)
TYPES = {"id": "INT64", "v": "STRING", "n": "INT64"}
MOR = {"targets": {"write_mode": "merge-on-read"}}
EAGER = {"targets": {"write_mode": "merge-on-read", "compact_delete_files": 1}}


def _history() -> Changes:
    items = Changes("Items", TYPES)
    for key in range(1, 21):
        items.add(W0, "INSERT", key, {"v": f"a{key}", "n": key}, when=at(0, key))
    items.add(W1, "UPDATE", 1, {"v": "b1", "n": 100}, when=at(1, 10))
    items.add(W1, "UPDATE", 2, {"n": 200}, image="PARTIAL", when=at(1, 10))
    items.add(W1, "DELETE", 3, when=at(1, 10))
    items.add(W1, "DELETE", 4, when=at(1, 10))
    items.add(W2, "UPDATE", 1, {"v": "late", "n": 0}, when=at(0, 50))  # older than window 1's
    items.add(W2, "INSERT", 4, {"v": "back", "n": 4}, when=at(2, 5))  # revives key 4
    items.add(W2, "UPDATE", 5, {"v": "c5", "n": 5}, when=at(2, 5))
    return items


@pytest.fixture(scope="module")
def lakes(module_lake):
    """(merge-on-read lake, copy-on-write lake), both after windows 0-2."""
    mor = module_lake
    cow = mor.sibling("cow")
    items = _history()
    for lake, overrides in ((mor, MOR), (cow, {})):
        lake.replay(items, [W0, W1, W2], [W0, W1, W2], **overrides)
    return mor, cow


def _properties(lake: Lake, table: str) -> dict[str, str]:
    return {row.key: row.value for row in lake.spark.sql(f"SHOW TBLPROPERTIES {lake.table(table)}").collect()}


def _content_kinds(lake: Lake, table: str) -> set[int]:
    """The kinds of the table's live files: 0 data, 1 position deletes, 2 equality deletes."""
    return {row.content for row in lake.spark.sql(f"SELECT content FROM {lake.table(table)}.files").collect()}


def test_a_merge_on_read_target_holds_the_same_rows_as_a_copy_on_write_one(lakes):
    mor, cow = lakes
    assert mor.rows("Items") == cow.rows("Items")
    assert values_of(mor.rows("Items"), "v", "n")[2] == ("a2", 200)  # the partial image kept v
    assert 3 not in values_of(mor.rows("Items"), "v") and values_of(mor.rows("Items"), "v")[4] == ("back",)
    assert mor.rows("Items__tombstones") == cow.rows("Items__tombstones")


def test_a_merge_on_read_window_writes_delete_files_and_rewrites_no_data_file(lakes):
    mor, cow = lakes
    assert 1 in _content_kinds(mor, "Items")  # position deletes beside the rows
    assert _content_kinds(cow, "Items") == {0}
    assert _properties(mor, "Items")["write.merge.mode"] == "merge-on-read"


def test_another_engine_reads_a_merge_on_read_target_with_its_deletes_applied(lakes):
    mor, _ = lakes
    assert business(normalized(mor.pyiceberg_rows("Items"))) == business(normalized(mor.rows("Items")))


def test_a_target_takes_a_new_write_mode_at_its_next_window(lake):
    items = _history()
    for win in (W0, W1):
        lake.write(items, win=win)
    lake.apply(W0)
    assert _properties(lake, "Items").get("write.merge.mode", "copy-on-write") == "copy-on-write"
    lake.apply(W1, **MOR)
    for table in ("Items", "Items__tombstones"):
        properties = _properties(lake, table)
        assert [properties[f"write.{op}.mode"] for op in ("merge", "update", "delete")] == ["merge-on-read"] * 3
    assert values_of(lake.rows("Items"), "v")[1] == ("b1",)


def test_a_compacted_merge_on_read_target_keeps_its_rows_and_its_windows(lake):
    items = _history()
    for win in (W0, W1, W2):
        lake.write(items, win=win)
    for win in (W0, W1):
        lake.apply(win, **MOR)
    before = lake.rows("Items")
    # The compaction apply runs (compaction.py), here between windows, as a user's own
    # maintenance would: rows rewritten with their deletes applied, stale delete files dropped.
    compact(lake.spark, TableName("lake", lake.namespace, "Items"))
    assert _content_kinds(lake, "Items") == {0} and lake.rows("Items") == before
    assert lake.apply(W1, **MOR).table("Items").already_applied
    lake.apply(W2, **MOR)
    target = values_of(lake.rows("Items"), "v")
    assert target[1] == ("b1",) and target[4] == ("back",) and target[5] == ("c5",)


def test_apply_compacts_a_merge_on_read_target_once_it_holds_enough_delete_files(lake):
    items = _history()
    lake.replay(items, [W0, W1, W2], [W0])
    result = lake.apply(W1, **EAGER).table("Items")
    assert result.compacted_tables == [lake.table("Items")] and result.compaction_errors == []
    assert _content_kinds(lake, "Items") == {0}
    assert values_of(lake.rows("Items"), "v", "n")[2] == ("a2", 200) and 3 not in values_of(lake.rows("Items"), "v")
    again = lake.apply(W1, **EAGER).table("Items")
    assert again.already_applied and again.compacted_tables == []


def test_a_failed_compaction_leaves_the_window_applied_and_names_the_table(lake, monkeypatch):
    from airflow_cdc.spark_jobs.apply import compaction

    def refused(spark, table):  # as a commit that lost to another writer would fail
        raise RuntimeError("org.apache.iceberg.exceptions.ValidationException: found conflicting files")

    items = _history()
    lake.replay(items, [W0, W1], [W0])
    monkeypatch.setattr(compaction, "compact", refused)
    result = lake.apply(W1, **EAGER).table("Items")
    assert result.compacted_tables == []
    assert result.compaction_errors == [f"{lake.table('Items')}: org.apache.iceberg.exceptions.ValidationException: "
                                        f"found conflicting files"]
    assert values_of(lake.rows("Items"), "v")[1] == ("b1",) and 1 in _content_kinds(lake, "Items")


def test_a_sources_own_table_is_created_in_the_write_mode_and_an_existing_one_takes_a_new_mode(module_lake):
    from airflow_cdc.spark_jobs.apply.config import ApplyConfig
    from airflow_cdc.spark_jobs.apply.source_tables import WindowTables

    lake = module_lake
    table = lake.table("Own_cells")
    base = {"catalog": "lake", "stream": "s", "window_id": W0.window_id, "changelog_table": "x.changelog"}

    def tables(mode: str) -> WindowTables:
        targets = {"namespace": lake.namespace, "write_mode": mode}
        return WindowTables(lake.spark, ApplyConfig.from_dict({**base, "targets": targets}))

    tables("merge-on-read").create(table, "k bigint, v string", partitioned_by="bucket(4, k)")
    created = _properties(lake, "Own_cells")["write.merge.mode"]
    tables("copy-on-write").create(table, "k bigint, v string")
    switched = _properties(lake, "Own_cells")

    assert created == "merge-on-read"
    assert switched["write.merge.mode"] == switched["write.delete.mode"] == "copy-on-write"
