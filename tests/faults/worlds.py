"""The reliability matrix's worlds: one per source, each its history, its example DAG's
configuration and its truth at every window end (see ``matrix.py``)."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

from airflow_cdc.model import Window
from tests.faults.matrix import Check, changelog_rows, compare_rows

CLOCK_LEAD = timedelta(seconds=3)  # an emulator's clock at a run's start: window end + this


class World:
    """A source's history and DAG. Subclasses set ``name``, ``dag_id``, ``window``, ``start``,
    ``stream_id`` and the source's environment, and check targets against the truth."""

    name = ""
    dag_id = ""
    window = timedelta(minutes=10)

    def __init__(self, base: Path) -> None:
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        self.warehouse = base / "warehouse"
        self.armed_file = base / "armed"
        self.env = {
            "AIRFLOW_CDC_WAREHOUSE": str(self.warehouse),
            "AIRFLOW_CDC_WORK_ROOT": str(base / "work"),
            "AIRFLOW_CDC_STATE_URL": f"sqlite:///{base / 'cdc_state.db'}",
        }
        self.start: datetime | None = None
        self.stream_id = ""
        # Asset events of this world's runs are recorded after this instant: a shared Airflow
        # DB (the test suite's) may hold events of other runs with the same DAG and run ids.
        self.created_at = datetime.now(timezone.utc)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def window_ends(self, count: int) -> list[datetime]:
        return [self.start + self.window * (i + 1) for i in range(count)]

    def window_id(self, end: datetime) -> str:
        return Window(self.stream_id, end - self.window, end).window_id

    def before_window(self, end: datetime) -> None:
        """Make the source ready for the run of the window ending at ``end``."""

    def check(self, end: datetime, ends: list[datetime]) -> Check:
        raise NotImplementedError


def compare_emulator_tables(tables, truth: dict, folder: Path, not_yet_seen=None) -> Check:
    """Targets of emulator tables (``demo.compare`` columns) against ``truth`` {table: {key: row}};
    ``not_yet_seen(table, key)`` says a row still in a target is one whose delete no read could
    see yet (a hard delete before the next reconciliation)."""
    from demo.compare import compare_table, read_iceberg_rows

    check = Check()
    for table in tables:
        target = folder / table.name
        rows = read_iceberg_rows(target) if target.exists() else []
        result = compare_table(table, truth.get(table.name, {}), rows)
        check.lost += [f"{table.name}: key {k} missing" for k in result.missing]
        check.lost += [f"{table.name}: key {k} present though deleted" for k in result.unexpected
                       if not (not_yet_seen and not_yet_seen(table, k))]
        check.lost += [f"{table.name}: key {k} differs {d}" for k, d in result.different]
        if len(rows) > result.target_rows:
            check.duplicated.append(f"{table.name}: {len(rows) - result.target_rows} keys twice")
    return check


class SpannerWorld(World):
    """Spanner change stream: 10-minute windows over a history with splits and merges."""

    name = "spanner_change_stream"
    dag_id = "spanner_change_stream_to_iceberg"
    tables = ("Accounts", "Orders", "Documents")

    def __enter__(self):
        from airflow_cdc_emulators.spanner import SpannerChangeStreamEmulator, generate_history

        self.history = generate_history(
            seed=5, duration=self.window * 10, changes_per_second=0.5, splits=3, merges=2,
            three_way_merges=0, quiet_periods=1,
        )
        self.start = self.history.created_at
        self.emulator = SpannerChangeStreamEmulator(self.history).__enter__()
        self.env.update({
            "SPANNER_EMULATOR_HOST": self.emulator.emulator_host,
            "CDC_WINDOW_MINUTES": str(int(self.window.total_seconds() // 60)),
            "CDC_START": self.start.isoformat(),
            "CDC_SPANNER_STREAM": self.history.stream_name,
            "CDC_SPANNER_TABLES": ",".join(self.tables),
        })
        self.stream_id = self.history.stream_name.lower()
        return self

    def __exit__(self, *exc) -> None:
        self.emulator.__exit__(*exc)

    def check(self, end, ends) -> Check:
        from airflow_cdc_emulators.spanner.timeline import to_micros

        truth = self.history.state_at(end - timedelta(microseconds=1))
        check = compare_emulator_tables(self.history.tables, truth, self.warehouse / "current")
        end_us = to_micros(end)
        expected = sum(len(t.changes) for t in self.history.transactions if t.commit_us < end_us)
        rows = len(changelog_rows(self.warehouse / "cdc" / f"{self.stream_id}_changelog"))
        if rows < expected:
            check.lost.append(f"changelog holds {rows} changes, the history {expected}")
        elif rows > expected:
            check.duplicated.append(f"changelog holds {rows} changes, the history {expected}")
        return check


class CommitTimestampWorld(World):
    """Spanner tables read by their commit-timestamp columns (with reconciliation)."""

    name = "spanner_commit_ts"
    dag_id = "spanner_commit_ts_to_iceberg"
    window = timedelta(minutes=20)
    reconcile_every = 3

    def __enter__(self):
        from airflow_cdc_emulators.spanner import SpannerEmulator, generate_commit_timestamp_tables

        self.database = generate_commit_timestamp_tables(seed=7, duration=self.window * 10)
        self.start = self.database.created_at
        self.emulator = SpannerEmulator(tables=self.database).__enter__()
        self.stream_id = "faults_commit_ts"
        self.env.update({
            "SPANNER_EMULATOR_HOST": self.emulator.emulator_host,
            "CDC_START": self.start.isoformat(),
            "CDC_WINDOW_MINUTES": str(int(self.window.total_seconds() // 60)),
            "CDC_RECONCILE_EVERY": str(self.reconcile_every),
            "CDC_STREAM_ID": self.stream_id,
        })
        return self

    def __exit__(self, *exc) -> None:
        self.emulator.__exit__(*exc)

    def before_window(self, end) -> None:
        self.emulator.now = end + CLOCK_LEAD

    def check(self, end, ends) -> Check:
        from demo.commit_ts import NAMESPACE, expected_rows

        tables, truth = [], {}
        for table in self.database.schema.tables:
            tables.append(SimpleNamespace(name=table.name, columns=[
                SimpleNamespace(name=c.name, type=c.type, primary_key=c.name in table.primary_key)
                for c in table.columns]))
            truth[table.name] = expected_rows(self.database, table, ends)
        # A hard delete is seen by the key reconciliation, every third window; in between,
        # a target may still hold a row deleted since the last reconciliation (by design).
        reconciled = ends[len(ends) - len(ends) % self.reconcile_every - 1] if len(ends) >= self.reconcile_every else self.start
        pending = {(c.table, c.key) for c in self.database.hard_deletes_between(reconciled, end)}

        def not_yet_seen(table, encoded_key) -> bool:
            keys = [c for c in table.columns if c.primary_key]
            return any(t == table.name and tuple(c.type.encode(v) for c, v in zip(keys, key)) == encoded_key
                       for t, key in pending)

        return compare_emulator_tables(tables, truth, self.warehouse / NAMESPACE, not_yet_seen)


class BigtableWorld(World):
    """Bigtable change stream: splits, merges, a lagging cluster, GC, DropRowRange."""

    name = "bigtable_change_stream"
    dag_id = "bigtable_change_stream_to_iceberg"
    window = timedelta(minutes=30)
    history_config: dict = {"seed": 7, "hours": 5.0}  # generate_history's arguments

    def __enter__(self):
        from airflow_cdc_emulators.bigtable import BigtableEmulator, generate_history

        self.history = generate_history(**self.history_config)
        self.start = self.history.start
        self.emulator = BigtableEmulator(self.history).__enter__()
        self.stream_id = self.history.config.table_id
        self.env.update({
            "BIGTABLE_EMULATOR_HOST": self.emulator.emulator_host,
            "CDC_START": self.start.isoformat(),
            "CDC_WINDOW_MINUTES": str(int(self.window.total_seconds() // 60)),
            "CDC_BIGTABLE_TABLE": self.history.config.table_id,
        })
        return self

    def __exit__(self, *exc) -> None:
        self.emulator.__exit__(*exc)

    def before_window(self, end) -> None:
        self.emulator.set_now(end + CLOCK_LEAD)

    def check(self, end, ends) -> Check:
        from demo.compare import read_iceberg_rows

        truth = self.emulator.true_state(end)
        cells = {
            (row, family, qualifier, ts): {"value": value}
            for row, families in truth.items() for family, columns in families.items()
            for qualifier, versions in columns.items() for ts, value in versions.items()
        }
        latest: dict = {}
        for (row, family, qualifier, ts), value in cells.items():
            known = latest.get((row, family, qualifier))
            if known is None or ts > known["cell_ts"]:
                latest[(row, family, qualifier)] = {"cell_ts": ts, "value": value["value"]}
        table = self.history.config.table_id
        folder = self.warehouse / "bigtable"

        def rows(name):
            path = folder / f"{table}_{name}"
            return read_iceberg_rows(path) if path.exists() else []

        check = compare_rows("cells", cells, rows("cells"),
                             lambda r: (r["row_key"], r["family"], r["qualifier"], r["cell_ts"]))
        return check.merge(compare_rows("latest", latest, rows("latest"),
                                        lambda r: (r["row_key"], r["family"], r["qualifier"])))


class DatastreamWorld(World):
    """Datastream event files (JSON and Avro, MySQL, PostgreSQL and Oracle sources) arriving
    late, duplicated and unsettled; the truth is the final state, so targets are compared
    after the last window and the changelog after every window."""

    name = "datastream"
    dag_id = "datastream_to_iceberg"

    def __enter__(self):
        from demo import datastream as demo

        self.window = demo.WINDOW
        self.start = demo.START
        prefix = self.base / "landing" / "shop"
        self.env.update(demo.environment(self.base, prefix, self.start))
        self.env["AIRFLOW_CDC_STATE_URL"] = f"sqlite:///{self.base / 'cdc_state.db'}"
        self.history = demo.generate_history(prefix, seed=11, windows=9)
        self.stream_id = os.environ.get("CDC_DATASTREAM_STREAM_ID", "shop")
        self.last_end: datetime | None = None
        return self

    def window_ends(self, count: int) -> list[datetime]:
        ends = super().window_ends(min(count, self.history.windows))
        self.last_end = ends[-1]
        return ends

    def before_window(self, end) -> None:
        last = end >= self.last_end
        self.history.write_arrived(None if last else end + timedelta(minutes=7))

    def check(self, end, ends) -> Check:
        from demo.datastream import compare_targets

        check = Check()
        if end >= self.last_end:
            result = compare_targets(self.warehouse, self.history.truth)
            if result["mismatches"]:
                check.lost.append(f"targets differ from the truth: {result['tables']}")
        changelog = changelog_rows(self.warehouse / "cdc" / f"{self.stream_id}_changelog")
        events = [r["event_id"] for r in changelog]
        if len(events) != len(set(events)):
            check.duplicated.append(f"{len(events) - len(set(events))} Datastream events twice")
        if end >= self.last_end and len(set(events)) != self.history.events:
            check.lost.append(f"changelog holds {len(set(events))} distinct events, the files "
                              f"{self.history.events}")
        return check


class DebeziumWorld(World):
    """Real PostgreSQL through real Debezium (the embedded capture in its own process, running
    for the whole world) into the Kafka Connect sink layout. A window reads the sink's files up
    to the offsets a heartbeat proves complete when it is planned, so each window's workload
    runs just before its DAG run, and the truth of a window is PostgreSQL's tables right after
    its workload was captured. Windows are 20 seconds of wall-clock time, run behind it."""

    name = "debezium"
    dag_id = "debezium_to_iceberg"
    window = timedelta(seconds=20)

    def __enter__(self):
        from datetime import timezone

        from demo import debezium as demo
        from airflow_cdc.sources.debezium.source import DebeziumSource

        self.demo = demo
        sink, logs = self.base / "sink", self.base / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        demo.recreate_database()
        self.capture = demo.CaptureProcess(sink, logs)
        self.capture.start()
        try:
            demo.wait_for(lambda: (sink / "topics" / f"__debezium-heartbeat.{demo.TOPIC_PREFIX}").is_dir(),
                          180, "the capture's snapshot and first heartbeat", self.capture.check_alive)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.start = datetime.now(timezone.utc).replace(microsecond=0)
        self.env.update(demo.environment(sink, self.start, int(self.window.total_seconds()), 3.0))
        self.stream_id = demo.STREAM_ID
        self.source = DebeziumSource({"prefix": str(sink), "topic_prefix": demo.TOPIC_PREFIX,
                                      "key_columns": demo.KEY_COLUMNS,
                                      "settings": {"flush_lateness_seconds": 3.0}})
        self.truths: dict[datetime, dict] = {}
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.capture.stop()
        finally:
            self.demo.drop_slot()  # a slot left behind would keep WAL on this machine for ever

    def before_window(self, end) -> None:
        from datetime import timezone

        index = round((end - self.start) / self.window) - 1
        for statement in workload(index):
            self.demo.execute(statement)
        self.truths[end] = self.demo.source_tables()
        now = datetime.now(timezone.utc)
        self.demo.wait_until_captured(self.source, max(now, end) + timedelta(seconds=4), self.capture)

    def check(self, end, ends) -> Check:
        from demo.datastream import compare_targets

        check = Check()
        result = compare_targets(self.warehouse, self.truths[end])
        if result["mismatches"]:
            check.lost.append(f"targets differ from PostgreSQL at {end.isoformat()}: {result['tables']}")
        return check


def workload(index: int) -> list[str]:
    """Window ``index``'s statements on the Debezium demo's schema: inserts, updates, a delete
    and a multi-table transaction, new keys every window."""
    base = 100 + index * 10
    return [
        f"INSERT INTO customers VALUES ({base}, 'c{base}', {index}.25, 'doc {index}', now(), "
        f"'2000-01-0{1 + index % 9}', {str(index % 2 == 0).lower()})",
        f"INSERT INTO orders VALUES ({base}, {base}, {index + 1}, {index}.50, now()::timestamp), "
        f"({base + 1}, 1, 1, NULL, NULL)",
        f"UPDATE customers SET balance = balance + 1, name = name || '+' WHERE id IN (1, {base})",
        "UPDATE orders SET quantity = quantity + 1 WHERE id = 1",
        f"DELETE FROM orders WHERE id = {base - 9}" if index else "DELETE FROM orders WHERE id = 3",
        f"BEGIN; INSERT INTO customers VALUES ({base + 2}, 't{base}', NULL, NULL, NULL, NULL, "
        f"false); UPDATE orders SET amount = {index}.75 WHERE id = {base}; COMMIT",
    ]


WORLDS = {
    world.name: world
    for world in (SpannerWorld, DatastreamWorld, BigtableWorld, DebeziumWorld, CommitTimestampWorld)
}
