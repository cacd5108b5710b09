"""The extract job on real files: both formats, de-duplication, dead letters, evidence."""

from __future__ import annotations

import itertools
import json
from decimal import Decimal

import pytest

from airflow_cdc.sources.datastream.writer import write_avro_events, write_json_events

from .support import STREAM, apply, at, mysql, oracle, postgres, run_extract, table_rows, window

_namespaces = itertools.count()


@pytest.fixture
def namespace(spark):
    name = f"ds_{next(_namespaces)}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{name}")
    return name


def changelog(spark, namespace, *columns):
    frame = spark.table(f"lake.{namespace}.{STREAM}_changelog")
    return sorted(tuple(r) for r in frame.selectExpr(*columns).collect())


def test_json_and_avro_files_of_the_same_events_give_identical_changelog_rows(spark, tmp_path):
    # A JSON literal 2.50 and an Avro decimal of scale 2 are the same NUMERIC(38,2) value.
    events = [
        mysql({"id": 1, "name": "a", "price": Decimal("2.50"), "active": True}, pos=10),
        mysql({"id": 2, "name": None, "price": Decimal("1.00"), "active": False}, pos=20, change="UPDATE"),
        mysql({"id": 1, "name": "a", "price": Decimal("2.50"), "active": True}, pos=30, change="DELETE",
              deleted=True),
    ]
    json_file = write_json_events(tmp_path / "json" / "orders.jsonl", events)
    avro_file = write_avro_events(tmp_path / "avro" / "orders.avro", events)
    columns = ["source_table", "op", "image", "to_json(keys)", "to_json(new_values)", "to_json(old_values)",
               "column_types_json", "commit_ts", "ordering_key", "transaction_id", "event_id",
               "source_metadata_json"]

    run_extract(spark, "ds_json", tmp_path, window(0), [json_file])
    run_extract(spark, "ds_avro", tmp_path, window(0), [avro_file])

    from_json = changelog(spark, "ds_json", *columns)
    assert len(from_json) == 3
    assert '"price":"NUMERIC(38,2)"' in from_json[0][6] and '"price":"2.50"' in from_json[0][5]
    assert from_json == changelog(spark, "ds_avro", *columns)


def test_duplicates_in_one_window_are_removed_by_uuid(spark, tmp_path, namespace):
    event = postgres({"id": 1, "name": "x"}, lsn="0/10")
    first = write_json_events(tmp_path / "a.jsonl", [event])
    again = write_avro_events(tmp_path / "b.avro", [event])

    run = run_extract(spark, namespace, tmp_path, window(0), [first, again])

    assert changelog(spark, namespace, "event_id") == [(event["uuid"],)]
    assert (run.result["counts"]["events"], run.result["counts"]["duplicates"]) == (2, 1)


def test_malformed_lines_and_files_go_to_dead_letters_and_nothing_else_is_lost(
    spark, tmp_path, namespace
):
    good = [mysql({"id": i, "name": f"n{i}"}, pos=10 * i) for i in range(1, 4)]
    keyless = mysql({"id": 9}, keys=(), obj="shop_logs")
    lines = write_json_events(tmp_path / "lines.jsonl", [*good[:2], keyless], ["{not json", "[1, 2"])
    avro = write_avro_events(tmp_path / "ok.avro", good[2:])
    broken = tmp_path / "broken.avro"
    broken.write_bytes(b"Obj\x01 this is not an avro file")

    run = run_extract(spark, namespace, tmp_path, window(0), [lines, avro, broken])

    assert changelog(spark, namespace, "event_id") == sorted((e["uuid"],) for e in good)
    dead = spark.table(f"lake.{namespace}.{STREAM}_dead_letters").collect()
    reasons = sorted(r.reason for r in dead)
    assert len(dead) == 4 and run.result["counts"]["dead_letters"] == 4
    assert sum("line is not a JSON object" in r for r in reasons) == 2
    assert any("not readable Avro" in r and str(broken) in json.loads(d.source_metadata_json)["partition"]
               for r, d in zip(reasons, sorted(dead, key=lambda d: d.reason)))
    assert any("no primary key" in r for r in reasons)


def test_a_duplicate_at_the_earliest_commit_time_of_a_later_window_is_found_and_dropped(spark, tmp_path, namespace):
    first = mysql({"id": 1, "name": "x"}, pos=10, when=at(5))
    later = mysql({"id": 2, "name": "y"}, pos=20, when=at(40))
    run_extract(spark, namespace, tmp_path, window(0), [write_json_events(tmp_path / "w0.jsonl", [first])])

    run = run_extract(spark, namespace, tmp_path, window(1), [write_json_events(tmp_path / "w1.jsonl", [first, later])])

    assert run.result["counts"]["duplicates"] == 1
    assert changelog(spark, namespace, "event_id") == sorted([(first["uuid"],), (later["uuid"],)])


def test_rerun_of_an_extracted_window_writes_nothing_and_restores_its_outcome(
    spark, tmp_path, namespace
):
    events = write_json_events(tmp_path / "a.jsonl", [mysql({"id": 1}, pos=1)])
    first = run_extract(spark, namespace, tmp_path, window(0), [events])

    again = run_extract(spark, namespace, tmp_path, window(0), [events])

    assert again.result["skipped"] is True
    assert again.result["snapshot_id"] == first.result["snapshot_id"]
    assert again.outcome == first.outcome
    assert len(changelog(spark, namespace, "event_id")) == 1


def test_window_is_proven_complete_by_an_event_read_after_its_end_plus_lateness(
    spark, tmp_path, namespace
):
    win = window(0)  # [00:00, 00:30)
    late_read = mysql({"id": 1}, pos=1, when=at(20), read=at(36))
    events = write_json_events(tmp_path / "a.jsonl", [late_read])

    run = run_extract(spark, namespace, tmp_path, win, [events], lateness_seconds=300)

    progress = [o for o in run.outcome.outcomes if not o.finished]
    assert [o.watermark for o in progress] == [at(31)]
    assert all(o.finished for o in run.outcome.outcomes if o.partition_id.endswith(".jsonl"))


def test_idle_source_is_declared_complete_after_the_idle_timeout(spark, tmp_path, namespace):
    run = run_extract(spark, namespace, tmp_path, window(0), [], planned_at=at(45),
                      idle_timeout_seconds=600)

    assert [o.watermark for o in run.outcome.outcomes] == [at(30)]
    assert run.result["counts"]["idle_declared"] == 1


class TestAcrossWindows:
    """Three windows applied in turn: late duplicates and late older events."""

    @pytest.fixture(scope="class")
    def lake(self, spark, tmp_path_factory):
        namespace = "ds_windows"
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{namespace}")
        folder = tmp_path_factory.mktemp("ds_windows")
        insert = mysql({"id": 1, "name": "first"}, pos=100)
        update = mysql({"id": 1, "name": "second"}, pos=200, change="UPDATE")
        rollback_insert = mysql({"id": 2, "name": "rolled back"}, pos=300)
        rollback_reverse = mysql({"id": 2, "name": "rolled back"}, pos=310, change="DELETE",
                                 deleted=True)
        deleted = oracle({"ID": 5, "V": "x"}, scn=50, keys=("ID",))
        delete = oracle({"ID": 5, "V": "x"}, scn=70, change="DELETE", deleted=True, keys=("ID",))
        older = oracle({"ID": 5, "V": "stale"}, scn=60, change="UPDATE", keys=("ID",))
        files = [
            [write_json_events(folder / "w0.jsonl", [insert, rollback_insert, deleted])],
            [write_avro_events(folder / "w1.avro", [update, rollback_reverse]),
             write_json_events(folder / "w1-oracle.jsonl", [delete])],
            [write_json_events(folder / "w2.jsonl", [insert, older])],  # duplicate + late older
        ]
        runs = []
        for index, batch in enumerate(files):
            runs.append(run_extract(spark, namespace, folder, window(index), batch))
            apply(spark, namespace, window(index))
        return namespace, runs, insert

    def test_duplicate_arriving_two_windows_later_is_not_written_again(self, spark, lake):
        namespace, runs, insert = lake

        ids = [r[0] for r in changelog(spark, namespace, "event_id")]
        assert ids.count(insert["uuid"]) == 1
        assert runs[2].result["counts"]["duplicates"] == 1

    def test_rollback_reverse_dml_pair_leaves_no_row(self, spark, lake):
        namespace, _, _ = lake

        assert 2 not in table_rows(spark, f"lake.{namespace}.shop_orders")

    def test_later_update_wins_over_the_insert(self, spark, lake):
        namespace, _, _ = lake

        assert table_rows(spark, f"lake.{namespace}.shop_orders")[1]["name"] == "second"

    def test_late_older_event_after_a_delete_does_not_resurrect_the_row(self, spark, lake):
        namespace, _, _ = lake

        assert 5 not in table_rows(spark, f"lake.{namespace}.ROOT_SAMPLE", key="ID")
