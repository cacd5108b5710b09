"""Which columns key a Datastream table, and rows that move (issue 18, point 2).

Datastream's Oracle events carry no primary_keys, only the ROWID, which changes when a row
moves (Oracle logs the move as an UPDATE-DELETE of the old ROWID and an UPDATE-INSERT of the
new one at the same SCN). These tests run the real extract and apply jobs into Iceberg and
read the target tables; the key lookup runs against the real PostgreSQL on 127.0.0.1 (no
Oracle server exists here: its tables are imitated by upper-case quoted names).
"""

from __future__ import annotations

import itertools
import os
from datetime import datetime, timezone

import pytest

from airflow_cdc.model import InvalidIdentifierError
from airflow_cdc.sources.datastream.writer import write_json_events

from .support import STREAM, apply, at, mysql, oracle, run_extract, table_rows, window

_namespaces = itertools.count()
_uuids = itertools.count(1)
PG_URL = "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"


def low_uuid() -> str:
    return f"00000000-0000-4000-8000-{next(_uuids):012d}"


def high_uuid() -> str:
    # Sorts after every low_uuid: an UPDATE-DELETE with it would win a uuid tie-break.
    return f"ffffffff-0000-4000-8000-{next(_uuids):012d}"


def row_move(obj, old, new, *, scn, old_row_id, new_row_id, keys=None, rs_id="0x0002.00000001.0010"):
    """Oracle's two events of one row moving from ``old_row_id`` to ``new_row_id``.

    Same SCN, rs_id and ssn; the delete gets the uuid that sorts last.
    """
    delete = oracle(old, obj=obj, scn=scn, rs_id=rs_id, ssn=3, change="UPDATE-DELETE",
                    deleted=True, row_id=old_row_id, uuid=high_uuid(), keys=keys)
    insert = oracle(new, obj=obj, scn=scn, rs_id=rs_id, ssn=3, change="UPDATE-INSERT",
                    row_id=new_row_id, uuid=low_uuid(), keys=keys)
    return [insert, delete]


@pytest.fixture
def namespace(spark):
    name = f"ds_keys_{next(_namespaces)}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{name}")
    return name


class TestRowMoves:
    """HR.EMPLOYEES with declared key EMPLOYEE_ID and keyless HR.LOGS, over two windows."""

    @pytest.fixture(scope="class")
    def lake(self, spark, tmp_path_factory):
        namespace = "ds_keys_moves"
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{namespace}")
        folder = tmp_path_factory.mktemp("ds_keys_moves")
        emp, logs = "HR.EMPLOYEES", "HR.LOGS"
        first = [
            oracle({"EMPLOYEE_ID": 1, "NAME": "Ann", "DEPT": 10}, obj=emp, scn=100, row_id="R1"),
            oracle({"EMPLOYEE_ID": 2, "NAME": "Bob", "DEPT": 10}, obj=emp, scn=101, row_id="R2"),
            oracle({"EMPLOYEE_ID": 3, "NAME": "Cy", "DEPT": 30}, obj=emp, scn=102, row_id="R3"),
            oracle({"MSG": "boot", "N": 1}, obj=logs, scn=103, row_id="L1"),
            oracle({"MSG": "tick", "N": 1}, obj=logs, scn=104, row_id="L2"),
        ]
        second = [
            # Ann moves to another partition (DEPT is the partition key): ROWID R1 -> R1b.
            *row_move(emp, {"EMPLOYEE_ID": 1, "NAME": "Ann", "DEPT": 10},
                      {"EMPLOYEE_ID": 1, "NAME": "Ann", "DEPT": 20},
                      scn=200, old_row_id="R1", new_row_id="R1b"),
            # Bob's plain UPDATE names a new ROWID (the table was shrunk in between).
            oracle({"EMPLOYEE_ID": 2, "NAME": "Bobby", "DEPT": 10}, obj=emp, scn=210,
                   change="UPDATE", row_id="R2b"),
            # Dee is inserted and moved within the window.
            oracle({"EMPLOYEE_ID": 4, "NAME": "Dee", "DEPT": 10}, obj=emp, scn=220, row_id="R4"),
            *row_move(emp, {"EMPLOYEE_ID": 4, "NAME": "Dee", "DEPT": 10},
                      {"EMPLOYEE_ID": 4, "NAME": "Dee", "DEPT": 40},
                      scn=230, old_row_id="R4", new_row_id="R4b", rs_id="0x0002.00000002.0010"),
            # A keyless row moves: L1 -> L1b, with a new value.
            *row_move(logs, {"MSG": "boot", "N": 1}, {"MSG": "boot", "N": 2},
                      scn=240, old_row_id="L1", new_row_id="L1b", rs_id="0x0002.00000003.0010"),
        ]
        keys = {"HR.EMPLOYEES": ["EMPLOYEE_ID"]}
        runs = []
        for index, events in enumerate([first, second]):
            files = [write_json_events(folder / f"w{index}.jsonl", events)]
            runs.append(run_extract(spark, namespace, folder, window(index), files, key_columns=keys))
            apply(spark, namespace, window(index))
        return namespace, runs

    def test_declared_key_table_whose_rows_move_keeps_one_row_per_key_with_the_latest_values(
        self, spark, lake
    ):
        namespace, _ = lake

        rows = table_rows(spark, f"lake.{namespace}.HR_EMPLOYEES", key="EMPLOYEE_ID")

        assert rows == {
            1: {"EMPLOYEE_ID": 1, "NAME": "Ann", "DEPT": 20},
            2: {"EMPLOYEE_ID": 2, "NAME": "Bobby", "DEPT": 10},
            3: {"EMPLOYEE_ID": 3, "NAME": "Cy", "DEPT": 30},
            4: {"EMPLOYEE_ID": 4, "NAME": "Dee", "DEPT": 40},
        }
        assert spark.table(f"lake.{namespace}.HR_EMPLOYEES").count() == 4

    def test_keyless_oracle_table_keyed_by_rowid_leaves_no_ghost_after_a_row_move(self, spark, lake):
        namespace, _ = lake

        rows = table_rows(spark, f"lake.{namespace}.HR_LOGS", key="row_id")

        assert rows == {
            "L1b": {"MSG": "boot", "N": 2, "row_id": "L1b"},
            "L2": {"MSG": "tick", "N": 1, "row_id": "L2"},
        }

    def test_window_counts_name_the_tables_keyed_by_rowid_and_only_those(self, lake):
        _, runs = lake

        assert [r.result["counts"]["rowid_keyed_tables"] for r in runs] == [["HR_LOGS"], ["HR_LOGS"]]
        assert [r.outcome.counts["rowid_keyed_tables"] for r in runs] == [["HR_LOGS"], ["HR_LOGS"]]


def test_declared_key_columns_missing_from_a_payload_dead_letter_the_event_naming_table_and_columns(
    spark, tmp_path, namespace
):
    good = oracle({"EMPLOYEE_ID": 1, "NAME": "Ann"}, obj="HR.EMPLOYEES", scn=10)
    keyless = oracle({"NAME": "Nobody"}, obj="HR.EMPLOYEES", scn=11)
    files = [write_json_events(tmp_path / "a.jsonl", [good, keyless])]

    run = run_extract(spark, namespace, tmp_path, window(0), files,
                      key_columns={"HR.EMPLOYEES": ["EMPLOYEE_ID"]})

    [dead] = spark.table(f"lake.{namespace}.{STREAM}_dead_letters").collect()
    assert dead.event_id == keyless["uuid"]
    assert "'HR_EMPLOYEES'" in dead.reason and "declared key column(s) ['EMPLOYEE_ID']" in dead.reason
    assert run.result["counts"]["dead_letters"] == 1
    ids = [r.event_id for r in spark.table(f"lake.{namespace}.{STREAM}_changelog").collect()]
    assert ids == [good["uuid"]]


def test_mysql_key_changing_updates_and_a_key_swap_in_one_statement_keep_every_row(
    spark, tmp_path, namespace
):
    inserts = [mysql({"id": 1, "name": "a"}, pos=10), mysql({"id": 2, "name": "b"}, pos=20),
               mysql({"id": 5, "name": "e"}, pos=30)]
    # UPDATE ... SET id = 6 WHERE id = 5, then UPDATE ... SET id = 3 - id (1 <-> 2): each
    # statement's pairs share one binlog position; the deletes get the uuids that sort last.
    move = [mysql({"id": 5, "name": "e"}, pos=40, change="UPDATE-DELETE", deleted=True, uuid=high_uuid()),
            mysql({"id": 6, "name": "e"}, pos=40, change="UPDATE-INSERT", uuid=low_uuid())]
    swap = [mysql({"id": 1, "name": "a"}, pos=50, change="UPDATE-DELETE", deleted=True, uuid=high_uuid()),
            mysql({"id": 2, "name": "a"}, pos=50, change="UPDATE-INSERT", uuid=low_uuid()),
            mysql({"id": 2, "name": "b"}, pos=50, change="UPDATE-DELETE", deleted=True, uuid=high_uuid()),
            mysql({"id": 1, "name": "b"}, pos=50, change="UPDATE-INSERT", uuid=low_uuid())]
    run_extract(spark, namespace, tmp_path, window(0),
                [write_json_events(tmp_path / "w0.jsonl", inserts)])
    apply(spark, namespace, window(0))

    run = run_extract(spark, namespace, tmp_path, window(1),
                      [write_json_events(tmp_path / "w1.jsonl", [*move, *swap])])
    apply(spark, namespace, window(1))

    assert table_rows(spark, f"lake.{namespace}.shop_orders") == {
        1: {"id": 1, "name": "b"}, 2: {"id": 2, "name": "a"}, 6: {"id": 6, "name": "e"},
    }
    assert run.result["counts"]["rowid_keyed_tables"] == []


# --- keys looked up in the source database ----------------------------------------------------
@pytest.fixture(scope="module")
def source_schema():
    """A schema in the real PostgreSQL with tables named as Oracle's dictionary names them."""
    from sqlalchemy import create_engine, text

    schema = f"CDCKEYS_{os.getpid()}"
    engine = create_engine(PG_URL)
    statements = [
        f'CREATE SCHEMA "{schema}"',
        f'CREATE TABLE "{schema}"."EMPLOYEES" ("EMPLOYEE_ID" integer PRIMARY KEY, '
        f'"NAME" text, "DEPT" integer)',
        f'CREATE TABLE "{schema}"."LOGS" ("MSG" text, "N" integer)',
        f'CREATE TABLE "{schema}"."ASSIGNMENTS" ("PROJECT_ID" integer, "EMPLOYEE_ID" integer, '
        f'"ROLE" text, CONSTRAINT "ASSIGNMENTS_PK" PRIMARY KEY ("PROJECT_ID", "EMPLOYEE_ID"))',
        f'CREATE TABLE "{schema}"."DEPARTMENTS" ("DEPT_ID" integer, "NAME" text, '
        f'CONSTRAINT "DEPARTMENTS_PK" PRIMARY KEY ("DEPT_ID"))',
    ]
    with engine.begin() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        for statement in statements:
            conn.execute(text(statement))
    saved = os.environ.get("AIRFLOW_CONN_CDC_KEYS_SOURCE")
    os.environ["AIRFLOW_CONN_CDC_KEYS_SOURCE"] = "postgres://postgres@127.0.0.1:5432/postgres"
    try:
        yield schema
    finally:
        if saved is None:
            os.environ.pop("AIRFLOW_CONN_CDC_KEYS_SOURCE", None)
        else:
            os.environ["AIRFLOW_CONN_CDC_KEYS_SOURCE"] = saved
        with engine.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()


def test_primary_keys_are_read_from_a_real_postgresql_connection_in_key_order(source_schema):
    from airflow_cdc.hooks.source_keys import SourcePrimaryKeyHook

    hook = SourcePrimaryKeyHook("cdc_keys_source")

    found = hook.primary_keys([(source_schema, "ASSIGNMENTS"), (source_schema, "EMPLOYEES"),
                               (source_schema, "LOGS")])

    assert found == {
        (source_schema, "ASSIGNMENTS"): ["PROJECT_ID", "EMPLOYEE_ID"],
        (source_schema, "EMPLOYEES"): ["EMPLOYEE_ID"],
        (source_schema, "LOGS"): [],
    }


def test_a_source_table_the_connection_cannot_see_is_an_error_naming_it(source_schema):
    from airflow_cdc.hooks.source_keys import SourceKeyLookupError, SourcePrimaryKeyHook

    with pytest.raises(SourceKeyLookupError, match=rf"table {source_schema}\.employees was not found.*upper case"):
        SourcePrimaryKeyHook("cdc_keys_source").primary_keys([(source_schema, "employees")])


class TestKeysLookedUpAtPlanTime:
    """The pipeline's plan, extract, commit and apply steps with keys from PostgreSQL.

    The plan task's planning step is called directly: its readiness wait (step 0) is not
    what these tests are about, and these windows lie in the future.
    """

    @pytest.fixture(scope="class")
    def flow(self, spark, airflow_db, iceberg_catalog, source_schema, tmp_path_factory):
        from airflow.sdk import DAG
        from airflow.timetables.interval import CronDataIntervalTimetable

        from airflow_cdc.operators.datastream import DatastreamPipeline
        from airflow_cdc.pipeline.files import WindowPlanFile
        from airflow_cdc.state import StateStore
        from airflow_cdc.spark_jobs.extract import extract_window

        namespace = "ds_keys_lookup"
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{namespace}")
        base = tmp_path_factory.mktemp("ds_keys_lookup")
        state_url = f"sqlite:///{base / 'cdc_state.db'}"
        saved = os.environ.get("AIRFLOW_CDC_STATE_URL")
        os.environ["AIRFLOW_CDC_STATE_URL"] = state_url
        emp, logs = f"{source_schema}.EMPLOYEES", f"{source_schema}.LOGS"
        events = [
            oracle({"EMPLOYEE_ID": 1, "NAME": "Ann", "DEPT": 10}, obj=emp, scn=100, row_id="R1"),
            oracle({"EMPLOYEE_ID": 2, "NAME": "Bob", "DEPT": 10}, obj=emp, scn=101, row_id="R2"),
            *row_move(emp, {"EMPLOYEE_ID": 1, "NAME": "Ann", "DEPT": 10},
                      {"EMPLOYEE_ID": 1, "NAME": "Ann", "DEPT": 20},
                      scn=200, old_row_id="R1", new_row_id="R1b"),
            oracle({"MSG": "boot", "N": 1}, obj=logs, scn=103, row_id="L1"),
            *row_move(logs, {"MSG": "boot", "N": 1}, {"MSG": "boot", "N": 2},
                      scn=240, old_row_id="L1", new_row_id="L1b", rs_id="0x0002.00000003.0010"),
        ]
        prefix = base / "landing"
        os.utime(write_json_events(prefix / "events.jsonl", events), (0, 0))
        with DAG("datastream_keys", schedule=CronDataIntervalTimetable("*/30 * * * *", timezone="UTC"),
                 start_date=datetime(2030, 1, 1, tzinfo=timezone.utc)) as dag:
            DatastreamPipeline(
                group_id="ds", prefix=str(prefix), stream_id=STREAM, namespace=namespace,
                catalog=iceberg_catalog, work_root=str(base / "work"), settle_seconds=0,
                source_tables=[emp, logs, f"{source_schema}.DEPARTMENTS"],
                key_columns_conn_id="cdc_keys_source",
            )
        plan_task, commit_task = dag.get_task("ds.plan"), dag.get_task("ds.commit")
        win = window(0)

        def context(run_id, w):
            return {"dag": dag, "run_id": run_id, "data_interval_start": w.start,
                    "data_interval_end": w.end}

        try:
            planned = plan_task.plan(context("run-0", win))
            config = plan_task.stream_config
            plan = WindowPlanFile.from_json(config.plan_path(win).read_text())
            result = extract_window(spark, plan, str(config.outcome_path(win)))
            with StateStore(state_url) as store:
                store.mark_extracted(win, f"{dag.dag_id}/run-0", int(result["snapshot_id"]))
            committed = commit_task.execute(context("run-0", win))
            apply(spark, namespace, win)
            yield {"namespace": namespace, "planned": planned, "committed": committed,
                   "plan_task": plan_task, "context": context, "schema": source_schema}
        finally:
            if saved is None:
                os.environ.pop("AIRFLOW_CDC_STATE_URL", None)
            else:
                os.environ["AIRFLOW_CDC_STATE_URL"] = saved

    def test_plan_looks_up_the_primary_keys_of_the_source_tables(self, flow):
        schema = flow["schema"]

        assert flow["planned"]["source_primary_keys"] == {
            f"{schema}_DEPARTMENTS": ["DEPT_ID"], f"{schema}_EMPLOYEES": ["EMPLOYEE_ID"],
        }

    def test_a_table_with_a_looked_up_key_keeps_one_row_per_key_after_a_row_move(self, spark, flow):
        rows = table_rows(spark, f"lake.{flow['namespace']}.{flow['schema']}_EMPLOYEES",
                          key="EMPLOYEE_ID")

        assert rows == {1: {"EMPLOYEE_ID": 1, "NAME": "Ann", "DEPT": 20},
                        2: {"EMPLOYEE_ID": 2, "NAME": "Bob", "DEPT": 10}}

    def test_a_table_without_a_primary_key_is_keyed_by_rowid_without_a_ghost(self, spark, flow):
        rows = table_rows(spark, f"lake.{flow['namespace']}.{flow['schema']}_LOGS", key="row_id")

        assert rows == {"L1b": {"MSG": "boot", "N": 2, "row_id": "L1b"}}

    def test_commit_summary_names_the_tables_keyed_by_rowid(self, flow):
        assert flow["committed"]["rowid_keyed_tables"] == [f"{flow['schema']}_LOGS"]

    def test_a_replan_of_a_window_keeps_the_keys_it_looked_up_first(self, flow):
        from sqlalchemy import create_engine, text

        from airflow_cdc.hooks.source_keys import SourcePrimaryKeyHook

        schema, task, context = flow["schema"], flow["plan_task"], flow["context"]
        first = task.plan(context("run-1", window(1)))
        engine = create_engine(PG_URL)
        with engine.begin() as conn:
            conn.execute(text(f'ALTER TABLE "{schema}"."DEPARTMENTS" DROP CONSTRAINT "DEPARTMENTS_PK"'))
        engine.dispose()

        again = task.plan(context("run-1", window(1)))

        assert SourcePrimaryKeyHook("cdc_keys_source").primary_keys([(schema, "DEPARTMENTS")]) == {
            (schema, "DEPARTMENTS"): []}
        assert again["source_primary_keys"] == first["source_primary_keys"]
        assert again["source_primary_keys"][f"{schema}_DEPARTMENTS"] == ["DEPT_ID"]


# --- parse-time validation --------------------------------------------------------------------
def pipeline(**arguments):
    from airflow.sdk import DAG
    from airflow.timetables.interval import CronDataIntervalTimetable

    from airflow_cdc.operators.datastream import DatastreamPipeline

    with DAG("keys_config", schedule=CronDataIntervalTimetable("@hourly", timezone="UTC"),
             start_date=at(0)) as dag:
        DatastreamPipeline(group_id="ds", prefix="gs://bucket/hr", stream_id="hr", **arguments)
    return dag


@pytest.mark.parametrize(
    ("key_columns", "error", "message"),
    [
        ({"HR.EMPLOYEES": "EMPLOYEE_ID"}, ValueError,
         r"key_columns\['HR.EMPLOYEES'\] is 'EMPLOYEE_ID': give a non-empty list of column names"),
        ({"HR.EMPLOYEES": []}, ValueError, r"key_columns\['HR.EMPLOYEES'\] is \[\]: give a non-empty list"),
        ({"HR.EMPLOYEES": ["EMPLOYEE ID"]}, InvalidIdentifierError,
         r"key_columns\['HR.EMPLOYEES'\] column 'EMPLOYEE ID' is not an identifier: use letters"),
        ({"HR.EMPLOYEES": ["ID", "ID"]}, ValueError, r"a column appears twice"),
        ({"HR.EMPLOYEES": ["ID"], "HR_EMPLOYEES": ["EMPLOYEE_ID"]}, ValueError,
         r"names table 'HR_EMPLOYEES' twice, as 'HR.EMPLOYEES' \(\['ID'\]\) and as 'HR_EMPLOYEES'"),
        ({"": ["ID"]}, ValueError, r"key_columns names the table '': use the Datastream object name"),
        (["HR.EMPLOYEES"], TypeError, r"key_columns \['HR.EMPLOYEES'\] is a list: give a dict"),
    ],
)
def test_bad_key_columns_are_refused_at_parse_time_naming_table_value_and_fix(key_columns, error, message):
    with pytest.raises(error, match=message):
        pipeline(key_columns=key_columns)


def test_key_lookup_without_source_tables_is_refused_at_parse_time():
    with pytest.raises(ValueError, match=r"key_columns_conn_id 'oracle_source'.*none are given.*SCHEMA.TABLE"):
        pipeline(key_columns_conn_id="oracle_source")


def test_key_lookup_of_a_source_table_named_without_its_schema_is_refused_at_parse_time():
    with pytest.raises(ValueError, match=r"source table 'HR_LOGS' has no schema.*SCHEMA.TABLE"):
        pipeline(key_columns_conn_id="oracle_source", source_tables=["HR.EMPLOYEES", "HR_LOGS"])


def test_declared_keys_reach_the_source_spec_by_identifier_and_object_names_become_assets():
    dag = pipeline(key_columns={"HR.EMPLOYEES": ["EMPLOYEE_ID"], "HR_JOBS": ["JOB_ID"]},
                   key_columns_conn_id="oracle_source",
                   source_tables=["HR.EMPLOYEES", "HR.LOGS", "HR_JOBS"])

    plan = dag.get_task("ds.plan")
    assert plan.stream.source_spec["key_columns"] == {"HR_EMPLOYEES": ["EMPLOYEE_ID"], "HR_JOBS": ["JOB_ID"]}
    assert plan.stream.source_spec["settings"]["look_up_keys"] == [["HR", "LOGS"]]
    assert plan.source_conn["key_columns_conn_id"] == "oracle_source"
    assets = {a.name for a in dag.get_task("ds.gate").outlets}
    assert {"lake.current.HR_EMPLOYEES", "lake.current.HR_LOGS", "lake.current.HR_JOBS"} <= assets


def test_a_pipeline_without_key_columns_keeps_its_source_spec_and_fingerprint():
    from airflow_cdc.operators.datastream import datastream_stream_config

    plain = datastream_stream_config(stream_id="hr", prefix="gs://bucket/hr")
    keyed = datastream_stream_config(stream_id="hr", prefix="gs://bucket/hr",
                                     key_columns={"HR.EMPLOYEES": ["EMPLOYEE_ID"]})

    assert plain.source_spec == {"kind": "datastream", "stream_id": "hr", "prefix": "gs://bucket/hr"}
    assert keyed.fingerprint != plain.fingerprint
