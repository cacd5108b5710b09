"""Airflow-side refusals: zero-width windows and schedules, secrets in pipeline arguments; the
apply task's warning for a failed compaction."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pytest

from airflow_cdc.operators.task_context import window_from_context

T = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)


def test_zero_width_data_interval_is_refused_naming_the_timetable_to_use():
    from airflow.providers.common.compat.sdk import AirflowFailException

    with pytest.raises(AirflowFailException, match="CronDataIntervalTimetable"):
        window_from_context("orders", {"data_interval_start": T, "data_interval_end": T})


def test_pipeline_in_a_dag_with_a_cron_trigger_schedule_is_refused_at_parse_time():
    from airflow.sdk import DAG

    from airflow_cdc.operators.pipeline import SpannerChangeStreamPipeline

    with DAG("cron_trigger", schedule="@hourly", start_date=T):
        with pytest.raises(ValueError, match="CronTriggerTimetable.*CronDataIntervalTimetable"):
            SpannerChangeStreamPipeline(
                group_id="g", instance_id="i", database_id="d", change_stream="Orders"
            )


def test_pipeline_adds_the_five_protocol_tasks_in_order():
    from airflow.sdk import DAG
    from airflow.timetables.interval import CronDataIntervalTimetable

    from airflow_cdc.operators.pipeline import SpannerChangeStreamPipeline

    with DAG("ok", schedule=CronDataIntervalTimetable("@hourly", timezone="UTC"), start_date=T) as dag:
        SpannerChangeStreamPipeline(group_id="g", instance_id="i", database_id="d",
                                    change_stream="Orders")
    order = ["g.plan", "g.extract", "g.commit", "g.apply", "g.gate"]
    assert dag.task_ids == order
    for upstream, downstream in zip(order, order[1:]):
        assert dag.get_task(downstream).upstream_task_ids == {upstream}


def test_invalid_change_stream_name_is_refused_before_any_task_exists():
    from airflow.sdk import DAG
    from airflow.timetables.interval import CronDataIntervalTimetable

    from airflow_cdc.model import InvalidIdentifierError
    from airflow_cdc.operators.pipeline import SpannerChangeStreamPipeline

    with DAG("bad", schedule=CronDataIntervalTimetable("@hourly", timezone="UTC"), start_date=T):
        with pytest.raises(InvalidIdentifierError, match="change stream name 'Orders; DROP'"):
            SpannerChangeStreamPipeline(group_id="g", instance_id="i", database_id="d",
                                        change_stream="Orders; DROP")


def test_a_secret_in_the_source_spec_is_refused():
    from airflow_cdc.pipeline.protocol import StreamConfig

    with pytest.raises(ValueError, match=r"holds secrets at \['connection.access_token'\]"):
        StreamConfig("orders", "spanner_change_stream", {"connection": {"access_token": "ya29"}})


def lineage_pipeline():
    from airflow.sdk import DAG
    from airflow.timetables.interval import CronDataIntervalTimetable

    from airflow_cdc.operators.pipeline import SpannerChangeStreamPipeline
    from airflow_cdc.spark.iceberg import IcebergCatalog

    catalog = IcebergCatalog(name="lake", warehouse="gs://lakehouse/wh")
    with DAG("lineage", schedule=CronDataIntervalTimetable("@hourly", timezone="UTC"),
             start_date=T) as dag:
        SpannerChangeStreamPipeline(
            group_id="g", project_id="shop-prod", instance_id="main", database_id="shop",
            change_stream="Orders", catalog=catalog, source_tables=["Orders"],
            targets={"namespace": "current", "mapping": {"Customers": "crm.customers"}},
        )
    return dag


def test_extract_lineage_reads_the_change_stream_and_writes_the_changelog():
    lineage = lineage_pipeline().get_task("g.extract").get_openlineage_facets_on_complete(None)
    assert [(d.namespace, d.name) for d in lineage.inputs] == [
        ("spanner://shop-prod/main", "shop.Orders")
    ]
    assert [(d.namespace, d.name) for d in lineage.outputs] == [
        ("gs://lakehouse", "wh/cdc/orders_changelog")
    ]


def test_apply_lineage_reads_the_changelog_and_writes_the_applied_targets():
    apply = lineage_pipeline().get_task("g.apply")
    apply._applied_tables = ["lake.current.Orders", "lake.crm.customers"]
    lineage = apply.get_openlineage_facets_on_complete(None)
    assert [d.name for d in lineage.inputs] == ["wh/cdc/orders_changelog"]
    assert [d.name for d in lineage.outputs] == ["wh/current/Orders", "wh/crm/customers"]


def test_parsing_a_pipeline_dag_imports_no_providers_asset_uri_handlers():
    """Every task process parses its DAG file. An Asset URI whose scheme lacks the ``x-`` mark
    makes Airflow import every installed provider's URI handlers (the Google one pulls in the
    GCS client and gRPC) in each of them."""
    import subprocess
    import sys
    from pathlib import Path

    dag_file = Path(__file__).resolve().parents[1] / "dags" / "spanner_change_stream_to_iceberg.py"
    watched = ("airflow.providers.google.assets.gcs", "google.cloud.storage", "grpc")
    code = ("import runpy, sys; runpy.run_path(sys.argv[1]); "
            f"print('imported:', [m for m in {watched!r} if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code, str(dag_file)], capture_output=True,
                          text=True, timeout=300)

    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "imported: []"


def test_gate_outlets_are_the_changelog_and_target_assets_named_by_catalog():
    gate = lineage_pipeline().get_task("g.gate")
    assert [(a.name, a.uri) for a in gate.outlets] == [
        ("lake.cdc.orders_changelog", "x-iceberg://lake/cdc/orders_changelog"),
        ("lake.current.Orders", "x-iceberg://lake/current/Orders"),
        ("lake.crm.customers", "x-iceberg://lake/crm/customers"),
    ]



def test_a_misspelled_shared_option_is_refused_naming_the_options_there_are():
    from airflow.sdk import DAG
    from airflow.timetables.interval import CronDataIntervalTimetable

    from airflow_cdc.operators.datastream import DatastreamPipeline

    with DAG("typo", schedule=CronDataIntervalTimetable("@hourly", timezone="UTC"), start_date=T):
        with pytest.raises(TypeError, match=r"DatastreamPipeline\(\) got unknown argument\(s\) "
                                            r"\['gate_timout'\].*'gate_timeout'"):
            DatastreamPipeline(group_id="g", stream_id="shop", prefix="/tmp/x", gate_timout=60)


def test_both_pipelines_take_the_shared_options_and_pass_them_to_their_tasks():
    from airflow.sdk import DAG
    from airflow.timetables.interval import CronDataIntervalTimetable

    from airflow_cdc.operators.datastream import DatastreamPipeline
    from airflow_cdc.operators.pipeline import SpannerChangeStreamPipeline

    shared = {"lease_seconds": 300, "gate_timeout": 900, "spark_conf": {"spark.x": "1"},
              "on_dead_letter": "continue", "namespace": "raw"}
    with DAG("shared", schedule=CronDataIntervalTimetable("@hourly", timezone="UTC"),
             start_date=T) as dag:
        SpannerChangeStreamPipeline(group_id="s", instance_id="i", database_id="d",
                                    change_stream="Orders", **shared)
        DatastreamPipeline(group_id="d", stream_id="shop", prefix="/tmp/x", **shared)
    for group in ("s", "d"):
        assert dag.get_task(f"{group}.extract").lease_seconds == 300
        assert dag.get_task(f"{group}.apply").spark_conf == {"spark.x": "1"}
        assert dag.get_task(f"{group}.apply").on_dead_letter == "continue"
        assert dag.get_task(f"{group}.gate").timeout == 900
        assert dag.get_task(f"{group}.plan").stream.changelog_table.startswith("raw.")
    assert dag.get_task("d.plan").wait_timeout == 900


def test_a_failed_compaction_is_logged_as_a_warning_naming_the_window_and_the_table(caplog):
    import logging

    from airflow_cdc.pipeline.apply_step import warn_failed_compactions

    log = logging.getLogger("test.apply")
    result = {"tables": [
        {"target_table": "lake.t.a", "compaction_errors": ["lake.t.a: ValidationException: Cannot commit"]},
        {"target_table": "lake.t.b", "compaction_errors": []},
    ]}

    with caplog.at_level(logging.WARNING, logger="test.apply"):
        count = warn_failed_compactions(log, "w-1", result)

    assert count == 1
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "window w-1 is applied" in record.getMessage()
    assert "lake.t.a: ValidationException" in record.getMessage()


def test_a_window_operators_templated_fields_make_the_stream_it_runs():
    from airflow.sdk import DAG
    from airflow.timetables.interval import CronDataIntervalTimetable

    from airflow_cdc.operators.apply import CdcApplyOperator
    from airflow_cdc.operators.datastream import datastream_stream_config

    with DAG("templated", schedule=CronDataIntervalTimetable("@hourly", timezone="UTC"),
             start_date=T, params={"folder": "landing", "ns": "gold"}) as dag:
        apply = CdcApplyOperator(
            task_id="apply",
            stream=datastream_stream_config(stream_id="orders", prefix="/data/{{ params.folder }}"),
            stream_id="{{ params.folder }}_orders",
            work_root="/work/{{ params.folder }}",
            targets={"namespace": "{{ params.ns }}"},
            source_conn={"gcp_conn_id": "{{ params.folder }}_gcp"},
        )
    assert {"stream_id", "spec", "work_root", "source_conn", "targets"} <= set(apply.template_fields)

    apply.render_template_fields({"params": dag.params})

    stream = apply.stream_config
    assert (stream.stream_id, stream.source_spec["prefix"], stream.work_root) == (
        "landing_orders", "/data/landing", "/work/landing")
    assert stream.source_spec["stream_id"] == "landing_orders"
    assert apply.targets == {"namespace": "gold"}
    assert apply.source_conn == {"gcp_conn_id": "landing_gcp"}


def test_an_untemplated_window_operator_runs_the_stream_it_was_given(monkeypatch):
    from airflow_cdc.operators.plan import CdcPlanOperator
    from airflow_cdc.operators.spanner import spanner_stream_config

    monkeypatch.setenv("AIRFLOW_CDC_WORK_ROOT", "/cdc-work")
    stream = spanner_stream_config(instance_id="i", database_id="d", change_stream="Orders")
    plan = CdcPlanOperator(task_id="plan", stream=stream)

    assert plan.stream_config == replace(stream, work_root="/cdc-work")
