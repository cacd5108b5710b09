"""The spark-submit entry point: a JSON job config in, a JSON result file out."""

from __future__ import annotations

import json

from airflow_cdc.spark_jobs import apply_job

from .support import Changes, at, values_of, window

W0 = window(0)


def test_entry_point_applies_the_configured_window_and_writes_the_result(lake, tmp_path):
    items = Changes("Items", {"id": "INT64", "v": "STRING"})
    items.add(W0, "INSERT", 1, {"v": "a"}, when=at(0, 1))
    lake.write(items)
    config = tmp_path / "apply.json"
    config.write_text(json.dumps({**lake.config(W0, targets={"mapping": {"Items": "items_current"}}), "result": str(tmp_path / "result.json")}))
    assert apply_job.main(["--job-config", str(config)], spark=lake.spark) == 0
    result = json.loads((tmp_path / "result.json").read_text())
    (table,) = result["tables"]
    assert (result["status"], result["window_id"], table["target_table"], table["upserts"]) == (
        "applied",
        W0.window_id,
        lake.table("items_current"),
        1,
    )
    assert table["target_snapshot_id"] == lake.snapshots("items_current")[-1]["snapshot_id"]
    assert values_of(lake.rows("items_current"), "v") == {1: ("a",)}


def test_entry_point_exits_1_with_a_failed_result_when_the_policy_fails_the_window(lake, tmp_path, capsys):
    items = Changes("Items", {"id": "INT64", "v": "STRING"})
    items.add(W0, "UPDATE", 1, {"v": "a"}, when=at(0, 1), image="PARTIAL")
    lake.write(items)
    config = tmp_path / "apply.json"
    config.write_text(json.dumps(lake.config(W0)))
    assert apply_job.main(["--job-config", str(config), "--result", str(tmp_path / "r.json")], spark=lake.spark) == 1
    result = json.loads((tmp_path / "r.json").read_text())
    assert (result["status"], result["dead_letter_rows"]) == ("failed", 1)
    assert "dead-lettered" in capsys.readouterr().err


def test_entry_point_refuses_a_bad_config_before_starting_spark(tmp_path, capsys):
    config = tmp_path / "apply.json"
    config.write_text(json.dumps({"stream": "orders", "window_id": "x/2024-05-01T00:00:00Z", "changelog_table": "cdc.log",
                                  "targets": {"namespace": "cur", "mapping": {"A": "bad-name"}}}))
    assert apply_job.main(["--job-config", str(config)]) == 2
    assert "'bad-name' is not an identifier" in capsys.readouterr().err


def test_a_changelog_of_the_old_json_text_format_is_refused_naming_the_columns_and_the_fix(lake):
    import pytest

    from airflow_cdc.spark_jobs.changelog import ChangelogFormatError

    lake.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{lake.namespace}")
    lake.spark.sql(
        f"CREATE TABLE {lake.changelog} (stream string, window_id string, source_table string, "
        f"op string, image string, keys_json string, new_values_json string, old_values_json string, "
        f"column_types_json string, commit_ts timestamp, ordering_key binary) USING iceberg"
    )

    with pytest.raises(ChangelogFormatError) as refused:
        lake.apply(window(0))

    assert "new_values map<string,string> (found: no such column)" in str(refused.value)
    assert "earlier airflow-cdc" in str(refused.value)
    assert not lake.exists("Accounts")
