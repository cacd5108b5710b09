"""Debezium's incremental snapshots followed by the pipeline (issue 23): READ events and
notifications become each table's progress, which reaches the window summary, the state
store, ``airflow-cdc status`` and the snapshot sensor. No JVM, no Spark: the sink is a folder
of hand-written lines in Debezium's format (``SCAN_COMPLETED`` is a line a real capture wrote;
the others have the fields and schema part a Debezium 3.6 capture wrote here), and windows are
committed to a SQLite state store as the extract and commit steps do.
"""

from __future__ import annotations

import asyncio
import io
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_cdc.model import Op, PartitionPosition, Window, format_ts
from airflow_cdc.pipeline.files import WindowPlanFile
from airflow_cdc.pipeline.protocol import STORE_COMPUTED_COUNTS
from airflow_cdc.sources.registry import build_source, source_spec
from airflow_cdc.spark_jobs.sources import spark_side
from airflow_cdc.state import StateStore

# The window holds the notification a real capture wrote at 1795617800546 ms.
T0 = datetime(2026, 11, 25, 14, 40, tzinfo=timezone.utc)
W1 = Window("shop", T0, T0 + timedelta(minutes=10))
W2 = Window("shop", W1.end, W1.end + timedelta(minutes=10))
ORDERS = "sx.public.orders"
SIGNALS = "sx.public.debezium_signal"
NOTIFICATIONS = "sx.notifications"
HEARTBEATS = "__debezium-heartbeat.sx"
# The schema part as Debezium 3.6's sink channel writes it (seen in a capture on this machine).
NOTIFICATION_SCHEMA = {
    "type": "struct", "optional": False, "name": "io.debezium.connector.common.Notification", "version": 1,
    "fields": [
        {"type": "string", "optional": False, "field": "id"},
        {"type": "string", "optional": False, "field": "type"},
        {"type": "string", "optional": False, "field": "aggregate_type"},
        {"type": "map", "keys": {"type": "string", "optional": False},
         "values": {"type": "string", "optional": False}, "optional": True, "field": "additional_data"},
        {"type": "int64", "optional": False, "field": "timestamp"},
    ],
}
SCAN_COMPLETED = (
    '{"schema":' + json.dumps(NOTIFICATION_SCHEMA) + ',"payload":{"id":"sig-1","type":"TABLE_SCAN_COMPLETED",'
    '"aggregate_type":"Incremental Snapshot","additional_data":{"scanned_collection":"public.orders",'
    '"connector_name":"sx","total_rows_scanned":"4","status":"SUCCEEDED","data_collections":"public.orders"},'
    '"timestamp":1795617800546}}'
)


def millis(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def read_event(row_id: int, at: datetime, lsn: int, snapshot: str = "incremental") -> dict:
    return {"op": "r", "before": None, "after": {"id": row_id, "status": "open"}, "ts_ms": millis(at),
            "source": {"connector": "postgresql", "name": "sx", "db": "shop", "schema": "public",
                       "table": "orders", "ts_ms": millis(at), "lsn": lsn, "txId": None,
                       "snapshot": snapshot}}


def signal_row(signal_id: str, kind: str, at: datetime, lsn: int) -> dict:
    """A row of the signaling table as Debezium streams it (signals and its own watermarks)."""
    return {"op": "c", "before": None, "after": {"id": signal_id, "type": kind, "data": None},
            "ts_ms": millis(at), "source": {"connector": "postgresql", "name": "sx", "db": "shop",
                                            "schema": "public", "table": "debezium_signal",
                                            "ts_ms": millis(at), "lsn": lsn, "txId": lsn // 10}}


def notification(kind: str, at: datetime, signal_id: str = "sig-1", **extra: str) -> str:
    payload = {"id": signal_id, "type": kind, "aggregate_type": "Incremental Snapshot",
               "additional_data": {"connector_name": "sx", **extra}, "timestamp": millis(at)}
    return json.dumps({"schema": NOTIFICATION_SCHEMA, "payload": payload})


def in_progress(at: datetime, last_key: str, signal_id: str = "sig-1") -> str:
    return notification("IN_PROGRESS", at, signal_id, data_collections="public.orders",
                        current_collection_in_progress="public.orders", maximum_key="4",
                        last_processed_key=last_key)


def write(sink: Path, topic: str, start: int, lines) -> None:
    folder = sink / "topics" / topic / "partition=0"
    folder.mkdir(parents=True, exist_ok=True)
    text = [line if isinstance(line, str) else json.dumps(line) for line in lines]
    (folder / f"{topic}+0+{start:010d}.json").write_text("\n".join(text) + "\n")


def heartbeat(sink: Path, at: datetime, start: int = 0) -> None:
    write(sink, HEARTBEATS, start, [{"ts_ms": millis(at)}])


def spec(sink: Path, **extra) -> dict:
    return source_spec("debezium", "shop", {
        "prefix": str(sink), "topic_prefix": "sx", "key_columns": {"public.orders": ["id"]},
        "signal_table": "public.debezium_signal", "notification_topic": NOTIFICATIONS, **extra})


def at(minutes: float, window: Window = W1) -> datetime:
    return window.start + timedelta(minutes=minutes)


@pytest.fixture
def sink(tmp_path) -> Path:
    """W1 of a snapshot of public.orders: STARTED, two chunks read, the table's scan completed."""
    sink = tmp_path / "sink"
    write(sink, ORDERS, 0, [read_event(i, at(2), 100 + i) for i in (1, 2)]
          + [read_event(i, at(3), 200 + i) for i in (3, 4)])
    write(sink, SIGNALS, 0, [signal_row("sig-1", "execute-snapshot", at(1), 50),
                             signal_row("8d2e-open", "snapshot-window-open", at(2), 60), None])
    write(sink, NOTIFICATIONS, 0, [
        notification("STARTED", at(1.5), data_collections="public.orders"),
        in_progress(at(2.5), "2"), in_progress(at(3.5), "4"), SCAN_COMPLETED])
    heartbeat(sink, W1.end + timedelta(minutes=2))
    return sink


@pytest.fixture
def store(tmp_path, monkeypatch) -> StateStore:
    url = f"sqlite:///{tmp_path / 'cdc_state.db'}"
    monkeypatch.setenv("AIRFLOW_CDC_STATE_URL", url)
    store = StateStore(url)
    store.migrate()
    store.register_stream("shop", "debezium", "f")
    return store


def extract(store: StateStore, sink: Path, window: Window, **extra) -> dict:
    """Steps 1-3 as the plan task, the extract job (counts summed per name, the driver's
    check_window, window_counts) and the commit task run them; returns the recorded counts."""
    source = build_source(spec(sink, **extra))
    found = source.discover(window, window.end + timedelta(hours=1), None)
    plan = store.plan_window(window, "run", 600, source.initial_positions(window),
                             new_partitions=found.partitions)
    options = source.plan_options(None, window.end + timedelta(hours=1), None, plan.positions)
    plan_file = WindowPlanFile(window, tuple(plan.positions), (), spec(sink, **extra), "lake.cdc.shop_changelog",
                               options=options)
    reader = build_source(spec(sink, **extra), options)
    reads = [reader.read_partition(window, p) for p in plan.positions]
    summed: dict = {}
    for read in reads:
        for name, value in read.counts.items():
            summed[name] = summed.get(name, 0) + value
    checked = spark_side(reader).check_window(None, plan_file, None)
    counts = reader.window_counts({**summed, **checked},
                                  sum(len(r.rows) for r in reads))
    store.mark_extracted(window, "run", 11)
    record = store.commit_window(window, "run", [r.outcome for r in reads],
                                 {k: v for k, v in counts.items() if k not in STORE_COMPUTED_COUNTS})
    return record.counts


def completed_window(store: StateStore, sink: Path, window: Window, **extra) -> dict:
    counts = extract(store, sink, window, **extra)
    store.mark_applied(window, "run", {"lake.current.public_orders": 7})
    store.mark_complete(window)
    return counts


def read_topic(sink: Path, topic: str, window: Window = W1):
    source = build_source(spec(sink))
    position = PartitionPosition(f"{topic}+0", window.start, "0")
    options = source.plan_options(None, window.end + timedelta(hours=1), None, (position,))
    return build_source(spec(sink), options).read_partition(window, position)


# --- what each line becomes ----------------------------------------------------------------------
def test_incremental_read_events_are_changes_counted_per_table(sink):
    read = read_topic(sink, ORDERS)

    assert [(r.source_table, r.op, r.keys["id"]) for r in read.rows] == [
        ("public_orders", Op.READ, i) for i in (1, 2, 3, 4)]
    assert read.counts["incremental_snapshot_rows"] == 4
    assert read.counts["incremental_snapshot_rows[public.orders]"] == 4


def test_read_events_of_the_initial_snapshot_are_not_incremental_snapshot_rows(tmp_path):
    write(tmp_path / "sink", ORDERS, 0, [read_event(1, at(1), 10, snapshot="first")])

    read = read_topic(tmp_path / "sink", ORDERS)

    assert len(read.rows) == 1 and "incremental_snapshot_rows" not in read.counts


def test_signal_table_events_are_counted_and_never_dead_lettered(sink):
    read = read_topic(sink, SIGNALS)  # public.debezium_signal has no key columns

    assert (read.rows, read.dead_letters) == ((), ())
    assert read.counts["signal_events"] == 3
    assert read.outcome.resume_position == "3"


def test_notification_lines_are_counted_and_never_become_changes(sink):
    read = read_topic(sink, NOTIFICATIONS)

    assert (read.rows, read.dead_letters) == ((), ())
    assert read.counts["notifications"] == 4 and read.counts["events"] == 0


def test_a_malformed_notification_is_a_dead_letter_with_its_reason(tmp_path):
    sink = tmp_path / "sink"
    change_shaped = json.dumps(read_event(9, at(1), 10))  # never a change on this topic
    write(sink, NOTIFICATIONS, 0, [
        json.dumps({"id": "sig-1", "aggregate_type": "Incremental Snapshot", "additional_data": {}}),
        change_shaped, SCAN_COMPLETED])

    read = read_topic(sink, NOTIFICATIONS)

    assert read.rows == ()
    assert [d.reason for d in read.dead_letters] == [
        "notification has no type (a non-empty string), got None; fields ['additional_data', "
        "'aggregate_type', 'id']: a Debezium notification has id, aggregate_type, type and additional_data",
        "notification has no id (a non-empty string), got None; fields ['after', 'before', 'op', "
        "'source', 'ts_ms']: a Debezium notification has id, aggregate_type, type and additional_data",
    ]
    assert [d.event_id for d in read.dead_letters] == [f"{NOTIFICATIONS}+0@0", f"{NOTIFICATIONS}+0@1"]
    assert read.counts["notifications"] == 1


def test_without_notification_topic_a_notification_is_a_dead_letter_naming_the_setting(tmp_path):
    sink = tmp_path / "sink"
    write(sink, NOTIFICATIONS, 0, [SCAN_COMPLETED])
    plain = source_spec("debezium", "shop", {"prefix": str(sink), "topic_prefix": "sx"})
    position = PartitionPosition(f"{NOTIFICATIONS}+0", T0, "0")
    options = build_source(plain).plan_options(None, W1.end + timedelta(hours=1), None, (position,))

    read = build_source(plain, options).read_partition(W1, position)

    assert "is a Debezium notification ('Incremental Snapshot' 'TABLE_SCAN_COMPLETED')" in read.dead_letters[0].reason
    assert "name its topic in the stream's notification_topic" in read.dead_letters[0].reason


def test_notifications_sent_after_the_window_end_are_read_by_the_next_window(sink):
    write(sink, NOTIFICATIONS, 4, [notification("COMPLETED", at(1, W2))])

    read = read_topic(sink, NOTIFICATIONS)

    assert read.counts["notifications"] == 4 and read.outcome.resume_position == "4"


def test_a_signal_table_that_is_not_schema_dot_table_is_refused_when_the_dag_is_parsed(tmp_path):
    with pytest.raises(ValueError, match=r"stream 'shop': signal_table 'debezium_signal' is not a table name"):
        source_spec("debezium", "shop", {"prefix": str(tmp_path), "topic_prefix": "sx",
                                         "signal_table": "debezium_signal"})
    with pytest.raises(ValueError, match="notification_topic 'sx.transaction' of stream 'shop' is the transaction topic"):
        source_spec("debezium", "shop", {"prefix": str(tmp_path), "topic_prefix": "sx",
                                         "notification_topic": "sx.transaction"})


# --- progress -----------------------------------------------------------------------------------
def test_a_window_records_each_tables_progress_and_its_state_after_the_window(sink, store):
    counts = extract(store, sink, W1)

    assert counts["incremental_snapshots"] == {"public.orders": {
        "status": "completed", "signal_id": "sig-1", "rows": 4, "chunks": 2,
        "last_processed_key": "4", "maximum_key": "4", "total_rows_scanned": 4,
        "scan_status": "SUCCEEDED", "at": "2026-11-25T14:43:20.546000Z"}}
    assert counts["incremental_snapshot_signals"] == {"sig-1": {
        "status": "in_progress", "tables": ["public.orders"], "at": "2026-11-25T14:43:20.546000Z"}}
    assert (counts["incremental_snapshot_rows"], counts["signal_events"], counts["notifications"]) == (4, 3, 4)
    assert "dead_letters" not in counts and "incremental_snapshot_rows[public.orders]" not in counts


def test_the_gates_window_summary_carries_per_table_progress(sink, store):
    from airflow_cdc.sensors.gate import CdcWindowCompleteSensor

    extract(store, sink, W1)
    store.mark_applied(W1, "run", {"lake.current.public_orders": 7})
    pushed = {}

    class TaskInstance:
        def xcom_push(self, key, value):
            pushed[key] = value

    gate = CdcWindowCompleteSensor(task_id="gate", stream_id="shop", source="debezium")
    assert gate.poke({"data_interval_start": W1.start, "data_interval_end": W1.end, "ti": TaskInstance()})

    summary = pushed["window_summary"]
    assert summary["incremental_snapshots"]["public.orders"]["status"] == "completed"
    assert summary["incremental_snapshots"]["public.orders"]["rows"] == 4
    assert summary["incremental_snapshot_signals"]["sig-1"]["tables"] == ["public.orders"]
    assert (summary["incremental_snapshot_rows"], summary["notifications"]) == (4, 4)


def test_a_completed_notification_completes_the_tables_earlier_windows_knew():
    from airflow_cdc.sources.debezium.progress import stream_snapshot_state

    first = window_progress([notification("STARTED", at(1), data_collections="public.orders"),
                                      in_progress(at(2), "2")])
    second = window_progress([notification("COMPLETED", at(1, W2))])

    state = stream_snapshot_state([first, second])

    assert second["incremental_snapshot_signals"] == {"sig-1": {"status": "completed", "tables": [],
                                                                "at": format_ts(at(1, W2))}}
    assert (state["public.orders"].status, state["public.orders"].chunks) == ("completed", 1)


def window_progress(lines) -> dict:
    """The progress counts one window's notification lines make (check_window + window_counts)."""
    from airflow_cdc.sources.debezium.progress import WindowSnapshotProgress, join_window_counts, parse_notification

    return join_window_counts(WindowSnapshotProgress.of_notifications(
        [parse_notification(line) for line in lines]).to_counts())


# --- the sensor, its trigger, the status command ---------------------------------------------------
def aborted_sink(tmp_path: Path) -> Path:
    sink = tmp_path / "aborted"
    write(sink, NOTIFICATIONS, 0, [notification("STARTED", at(1), data_collections="public.orders"),
                                   in_progress(at(2), "2"), notification("ABORTED", at(3))])
    heartbeat(sink, W1.end + timedelta(minutes=2))
    return sink


def test_the_snapshot_sensor_in_poke_mode_succeeds_on_a_completed_table(sink, store):
    from airflow_cdc.sensors.debezium_snapshot import DebeziumSnapshotCompleteSensor

    completed_window(store, sink, W1)
    sensor = DebeziumSnapshotCompleteSensor(task_id="snapshotted", stream_id="shop", table="public.orders",
                                            signal_id="sig-1", deferrable=False)

    returned = sensor.poke({})

    assert returned.is_done
    assert returned.xcom_value["status"] == "completed" and returned.xcom_value["total_rows_scanned"] == 4


def test_the_snapshot_sensor_waits_while_the_window_is_not_complete(sink, store):
    from airflow_cdc.sensors.debezium_snapshot import DebeziumSnapshotCompleteSensor

    extract(store, sink, W1)  # committed, not yet through its gate

    assert DebeziumSnapshotCompleteSensor(task_id="s", stream_id="shop", table="public.orders",
                                          deferrable=False).poke({}) is False


def test_the_snapshot_sensor_fails_naming_why_when_the_snapshot_was_aborted(tmp_path, store):
    from airflow.providers.common.compat.sdk import AirflowFailException

    from airflow_cdc.sensors.debezium_snapshot import DebeziumSnapshotCompleteSensor

    completed_window(store, aborted_sink(tmp_path), W1)
    sensor = DebeziumSnapshotCompleteSensor(task_id="snapshotted", stream_id="shop", table="public.orders",
                                            deferrable=False)

    with pytest.raises(AirflowFailException) as failed:
        sensor.poke({})

    assert str(failed.value) == (
        "stream 'shop': the incremental snapshot of table 'public.orders' (signal 'sig-1') was aborted: the "
        "snapshot was stopped or failed (see the connector's log); send a new execute-snapshot signal to read it again")


def test_with_a_signal_id_an_earlier_completed_snapshot_does_not_count(sink, store):
    from airflow_cdc.sensors.debezium_snapshot import DebeziumSnapshotCompleteSensor

    completed_window(store, sink, W1)  # sig-1 completed

    assert DebeziumSnapshotCompleteSensor(task_id="s", stream_id="shop", table="public.orders",
                                          signal_id="sig-2", deferrable=False).poke({}) is False


def test_the_trigger_fires_once_a_window_shows_the_table_completed(sink, store):
    from airflow_cdc.triggers.debezium_snapshot import DebeziumSnapshotCompleteTrigger

    extract(store, sink, W1)
    trigger = DebeziumSnapshotCompleteTrigger(stream_id="shop", table="public.orders", signal_id="sig-1",
                                              poll_interval=0.05)

    async def run():
        events = trigger.run()
        first = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(0.3)
        assert not first.done()  # W1 is committed, not complete: the snapshot is not in the targets yet
        await asyncio.to_thread(store.mark_applied, W1, "run", {"lake.current.public_orders": 7})
        await asyncio.to_thread(store.mark_complete, W1)
        return (await asyncio.wait_for(first, 30)).payload

    event = asyncio.run(run())

    assert event["status"] == "completed" and event["polls"] > 1
    assert event["progress"]["signal_id"] == "sig-1" and event["progress"]["rows"] == 4
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_cdc.triggers.debezium_snapshot.DebeziumSnapshotCompleteTrigger"
    assert kwargs["table"] == "public.orders" and kwargs["signal_id"] == "sig-1"


def test_the_status_command_prints_each_tables_latest_snapshot_state(sink, store):
    from airflow_cdc.cli import main

    completed_window(store, sink, W1)
    heartbeat(sink, W2.end + timedelta(minutes=2), start=1)
    write(sink, NOTIFICATIONS, 4, [notification("COMPLETED", at(1, W2))])
    completed_window(store, sink, W2)
    out = io.StringIO()

    assert main(["status", "shop"], out=out) == 0

    lines = out.getvalue().split("incremental snapshots:")[1].split("partitions:")[0].strip().splitlines()
    assert [" ".join(line.split()) for line in lines] == [
        "public.orders completed, signal sig-1, 4 rows in 2 chunk(s), key 4 of 4, "
        "scan SUCCEEDED, at 2026-11-25T14:43:20.546000Z"]
