"""Spanner commit-timestamp windows through the extract and apply Spark jobs (in this session's
Spark), the state store and Iceberg, against the Spanner emulator through the real client.

Each test builds its own database on the emulator's settable clock and places commits exactly
(``tables.commit(..., at=T)``), so window boundaries, shared commit timestamps, hard deletes
and the version retention are where the test says.
"""

from __future__ import annotations

import json
import logging
import uuid
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from airflow_cdc_emulators.spanner import (
    COMMIT_TIMESTAMP,
    COMMIT_TIMESTAMP_SCHEMA,
    SpannerEmulator,
    VersionedDatabase,
    mutations,
)
from airflow_cdc.model import Window
from airflow_cdc.pipeline.protocol import StreamConfig, commit_window, plan_window
from airflow_cdc.sources.registry import build_source
from airflow_cdc.sources.spanner.reader import SpannerConnection
from airflow_cdc.sources.spanner_commit_ts.errors import (
    CommitTimestampSchemaError,
    FutureWindowError,
    RetentionExceededError,
)
from airflow_cdc.state import StateStore
from airflow_cdc.spark_jobs import apply_job
from airflow_cdc.spark_jobs.extract import extract_window

T0 = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
WINDOW = timedelta(minutes=10)
US = timedelta(microseconds=1)
GSQL, PG = "GOOGLE_STANDARD_SQL", "POSTGRESQL"
ORDER_COLUMNS = ("OrderId", "CustomerName", "Quantity", "LastUpdateTime")


class EmulatorDatabases:
    """What the plan needs of the Spanner hook, on the emulator: the database (the real
    client, like ``SpannerDatabaseHook`` with ``SPANNER_EMULATOR_HOST``), no re-seeds."""

    def __init__(self, host: str) -> None:
        self.host = host

    def get_database(self, instance_id, database_id, project_id=None):
        return SpannerConnection(project=project_id or "test-project", instance=instance_id,
                                 database=database_id, emulator_host=self.host).open_database()

    def reseed_requests(self, stream_id):
        return []


@pytest.fixture
def tables():
    return VersionedDatabase(COMMIT_TIMESTAMP_SCHEMA, created_at=T0, now=T0)


@pytest.fixture
def emulator(tables):
    with SpannerEmulator(tables=tables, postgresql_databases=("pgshop",)) as running:
        yield running


def order(order_id: int, name: str, quantity: int = 1):
    return mutations.insert_or_update("Orders", ORDER_COLUMNS,
                                      [(order_id, name, quantity, COMMIT_TIMESTAMP)])


def windows(n: int) -> list[Window]:
    return [(T0 + WINDOW * i, T0 + WINDOW * (i + 1)) for i in range(n)]


class Stream:
    """One commit-timestamp stream: plan, extract, commit and apply of its windows."""

    def __init__(self, spark, emulator, tmp_path, *, tables, dialect=GSQL, database="shop",
                 reconcile_every=0) -> None:
        self.spark, self.emulator, self.tmp_path = spark, emulator, tmp_path
        self.stream_id = f"cts_{uuid.uuid4().hex[:8]}"
        self.store = StateStore(f"sqlite:///{tmp_path / f'{self.stream_id}.db'}")
        self.store.migrate()
        self.config = StreamConfig.for_source("spanner_commit_ts", self.stream_id, {
            "connection": {"project": "test-project", "instance": "test-instance",
                           "database": database},
            "dialect": dialect, "tables": tables,
            "settings": {"reconcile_every": reconcile_every, "safety_margin_seconds": 0},
        }, namespace=self.stream_id, work_root=str(tmp_path / "work" / self.stream_id))
        self.config.source_spec["connection"]["emulator_host"] = emulator.emulator_host
        self.hook = EmulatorDatabases(emulator.emulator_host)

    def window(self, bounds) -> Window:
        return Window(self.stream_id, *bounds)

    def plan(self, bounds, now: datetime | None = None):
        """Steps 0 and 1 as the plan task takes them: readiness, then the plan."""
        window = self.window(bounds)
        source = build_source(self.config.source_spec)
        now = now or window.end
        ready = source.readiness(window, now, [], self.hook)
        if not ready.ready:
            raise FutureWindowError(ready.reason)
        return plan_window(
            self.store, self.config, window, "run", 600, source.initial_positions(window), "lake",
            plan_options=lambda kept, positions: source.plan_options(
                kept, now, self.hook, positions, window=window),
        )

    def extract(self, bounds) -> dict:
        window = self.window(bounds)
        plan = self.plan(bounds)
        result = extract_window(self.spark, plan, str(self.config.outcome_path(window)))
        self.store.mark_extracted(window, "run", result["snapshot_id"])
        return result

    def apply(self, bounds) -> dict:
        window = self.window(bounds)
        job = self.tmp_path / f"apply-{uuid.uuid4().hex[:6]}.json"
        result = self.tmp_path / f"{job.stem}-result.json"
        job.write_text(json.dumps({
            "catalog": "lake", "stream": self.stream_id, "window_id": window.window_id,
            "changelog_table": self.config.changelog_table,
            "targets": {"namespace": f"{self.stream_id}_t"}, "source": self.config.source_spec,
        }))
        assert apply_job.main(["--job-config", str(job), "--result", str(result)],
                              spark=self.spark) == 0
        return json.loads(result.read_text())

    def run(self, bounds) -> dict:
        extracted = self.extract(bounds)
        commit_window(self.store, self.config, self.window(bounds), "run")
        self.apply(bounds)
        return extracted

    def changelog(self) -> list:
        return self.spark.table(f"lake.{self.config.changelog_table}").collect()

    def target(self, table: str, key: str = "OrderId") -> dict:
        rows = self.spark.table(f"lake.{self.stream_id}_t.{table}").collect()
        return {r[key]: r.asDict() for r in rows}


def test_a_row_committed_exactly_at_a_window_end_belongs_to_the_next_window(
        spark, emulator, tables, tmp_path):
    (s1, e1), (s2, e2) = first, second = windows(2)
    tables.now = e2
    tables.commit([order(1, "at-start")], at=s1)
    tables.commit([order(2, "just-before-end")], at=e1 - US)
    tables.commit([order(3, "at-end")], at=e1)
    tables.commit([order(4, "at-second-end")], at=e2)
    stream = Stream(spark, emulator, tmp_path, tables={"Orders": "LastUpdateTime"},
                    reconcile_every=0)
    stream.config.source_spec["initial_load"] = False  # the first window reads [s1, e1) too

    stream.run(first)
    stream.run(second)

    by_window = {}
    for row in stream.changelog():
        by_window.setdefault(row.window_id, set()).add(row.keys["OrderId"])
    assert by_window == {stream.window(first).window_id: {"1", "2"},
                         stream.window(second).window_id: {"3"}}
    assert set(stream.target("Orders")) == {1, 2, 3}


def test_two_transactions_sharing_a_commit_timestamp_are_both_applied(
        spark, emulator, tables, tmp_path):
    (window,) = windows(1)
    shared = T0 + timedelta(minutes=4)
    tables.now = window[1]
    tables.commit([order(10, "first")], at=shared)
    tables.commit([order(11, "second")], at=shared)  # disjoint rows: the same timestamp
    tables.commit([order(10, "later", 5)], at=shared + US)
    stream = Stream(spark, emulator, tmp_path, tables={"Orders": "LastUpdateTime"})

    stream.run(window)

    target = stream.target("Orders")
    assert {k: (r["CustomerName"], r["Quantity"]) for k, r in target.items()} == {
        10: ("later", 5), 11: ("second", 1)}


def test_hard_deletes_are_found_by_the_key_reconciliation_and_recorded_as_deletes(
        spark, emulator, tables, tmp_path):
    (first, second) = windows(2)
    tables.now = second[1]
    for order_id in (20, 21, 22):
        tables.commit([order(order_id, f"o{order_id}")], at=T0 + timedelta(minutes=1, seconds=order_id))
    tables.commit([mutations.delete("Orders", [(21,)])], at=second[0] + timedelta(minutes=3))
    stream = Stream(spark, emulator, tmp_path, tables={"Orders": "LastUpdateTime"},
                    reconcile_every=1)

    stream.run(first)
    stream.run(second)

    deletes = [r for r in stream.changelog() if r.op == "DELETE"]
    assert set(stream.target("Orders")) == {20, 22}
    assert [(r.keys["OrderId"], r.window_id) for r in deletes] == [
        ("21", stream.window(second).window_id)]
    assert json.loads(deletes[0].source_metadata_json)["reconciled"] is True


def test_the_extract_and_apply_jobs_run_again_on_a_committed_window_change_nothing(
        spark, emulator, tables, tmp_path):
    (first, second) = windows(2)
    tables.now = second[1]
    tables.commit([order(30, "a")], at=T0 + timedelta(minutes=2))
    tables.commit([order(31, "b")], at=second[0] + timedelta(minutes=2))
    tables.commit([mutations.delete("Orders", [(30,)])], at=second[0] + timedelta(minutes=3))
    stream = Stream(spark, emulator, tmp_path, tables={"Orders": "LastUpdateTime"},
                    reconcile_every=1)
    stream.run(first)
    stream.run(second)
    changelog = sorted(r.event_id for r in stream.changelog())
    target = stream.target("Orders")
    snapshots = spark.sql(f"SELECT * FROM lake.{stream.stream_id}_t.Orders.snapshots").count()

    # A run that died after the changelog commit runs the extract job again; apply twice.
    again = extract_window(spark, stream.plan(second),
                           str(tmp_path / "outcome-again.json"))
    applied = stream.apply(second)

    assert again["skipped"] is True
    assert applied["tables"][0]["already_applied"] is True
    assert sorted(r.event_id for r in stream.changelog()) == changelog
    assert stream.target("Orders") == target
    assert spark.sql(f"SELECT * FROM lake.{stream.stream_id}_t.Orders.snapshots").count() == snapshots


def test_a_window_older_than_the_version_retention_is_refused_naming_the_window_and_the_fix(
        emulator, tables, tmp_path):
    (window,) = windows(1)
    tables.now = window[1] + timedelta(hours=2)  # retention 1 h: the window's end is gone
    stream = Stream(None, emulator, tmp_path, tables={"Orders": "LastUpdateTime"})

    with pytest.raises(RetentionExceededError) as error:
        stream.plan(window, now=tables.now)

    message = str(error.value)
    assert stream.window(window).window_id in message and "1h" in message
    assert "SpannerCommitTimestampReseedOperator" in message
    assert stream.store.get_window(stream.stream_id, window[0]) is None


def test_a_window_ending_in_the_future_is_refused(emulator, tables, tmp_path):
    (window,) = windows(1)
    stream = Stream(None, emulator, tmp_path, tables={"Orders": "LastUpdateTime"})

    source = build_source(stream.config.source_spec)
    early = window[1] - timedelta(seconds=1)

    waits = source.readiness(stream.window(window), early, [], stream.hook)
    with pytest.raises(FutureWindowError, match="after now"):
        source.plan_options(None, early, stream.hook, window=stream.window(window))

    assert not waits.ready and waits.retry_at == window[1]


def test_a_column_without_allow_commit_timestamp_is_refused_before_any_window(
        emulator, tables, tmp_path):
    (window,) = windows(1)
    tables.now = window[1]
    stream = Stream(None, emulator, tmp_path, tables={"Orders": "PlacedAt"})

    with pytest.raises(CommitTimestampSchemaError) as error:
        stream.plan(window)

    assert "Orders.PlacedAt" in str(error.value)
    assert "allow_commit_timestamp=true" in str(error.value)
    assert stream.store.get_window(stream.stream_id, window[0]) is None


def test_a_commit_timestamp_leading_the_key_or_an_index_warns_of_a_hotspot(
        emulator, tables, tmp_path, caplog):
    (window,) = windows(1)
    tables.now = window[1]
    stream = Stream(None, emulator, tmp_path, tables={
        "Events": "EventTime", "Customers": {"column": "UpdatedAt", "soft_delete": "Deleted"},
        "Orders": "LastUpdateTime"})

    with caplog.at_level(logging.WARNING):
        plan = stream.plan(window)

    warnings = plan.options["schema_warnings"]
    assert any("Events" in w and "hotspot" in w and "primary key" in w for w in warnings), warnings
    assert any("CustomersByUpdatedAt" in w and "hotspot" in w for w in warnings), warnings
    assert not any("Orders" in w for w in warnings)
    assert any("hotspot" in r.getMessage() for r in caplog.records)


@pytest.mark.long
def test_a_postgresql_database_gives_the_same_targets_as_googlesql(
        spark, emulator, tables, tmp_path):
    (first, second) = windows(2)
    tables.now = second[1]
    every_type = ("OrderId", "CustomerName", "Quantity", "Amount", "Paid", "Total", "Details",
                  "DeliveryDate", "Receipt", "Tags", "ItemCounts", "PlacedAt", "LastUpdateTime")
    tables.commit([mutations.insert("Orders", every_type, [(
        42, "all types", 7, 12.5, True, Decimal("12345678901234567890.123456789"),
        {"nested": {"list": [1, 2.5, "x"]}}, date(2025, 2, 28), b"\x00\xffbytes",
        ["a", None, "c"], [1, None, 3], datetime(2024, 12, 31, 23, 59, 59, 123456,
                                                 tzinfo=timezone.utc), COMMIT_TIMESTAMP)])],
        at=T0 + timedelta(minutes=3))
    tables.commit([order(40, "x", 2)], at=T0 + timedelta(minutes=1))
    tables.commit([order(41, "y", 3)], at=T0 + timedelta(minutes=12))
    tables.commit([order(40, "x2", 4)], at=T0 + timedelta(minutes=15))
    tables.commit([mutations.delete("Orders", [(41,)])], at=T0 + timedelta(minutes=16))
    config = {"Orders": "LastUpdateTime",
              "Customers": {"column": "UpdatedAt", "soft_delete": "Deleted"}}
    gsql = Stream(spark, emulator, tmp_path, tables=config, reconcile_every=1)
    pg = Stream(spark, emulator, tmp_path, tables=config, dialect=PG, database="pgshop",
                reconcile_every=1)

    for stream in (gsql, pg):
        stream.run(first)
        stream.run(second)

    def business(stream):
        return {k: {c: v for c, v in r.items() if not c.startswith("_cdc")}
                for k, r in stream.target("Orders").items()}

    assert business(pg) == business(gsql)
    assert {k: (r["CustomerName"], r["Quantity"]) for k, r in business(pg).items()} == {
        40: ("x2", 4), 42: ("all types", 7)}
    typed = business(pg)[42]
    assert typed["Total"] == Decimal("12345678901234567890.123456789")
    assert json.loads(typed["Details"]) == {"nested": {"list": [1, 2.5, "x"]}}
    assert (typed["DeliveryDate"], bytes(typed["Receipt"])) == (date(2025, 2, 28), b"\x00\xffbytes")
    assert (typed["Tags"], typed["ItemCounts"]) == (["a", None, "c"], [1, None, 3])
