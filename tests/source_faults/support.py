"""Helpers of the source-fault tests: a stream's plan -> extract -> commit steps as the operators
run them, and the emulators' truth of a window."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow_cdc.model import Window
from airflow_cdc.pipeline.protocol import StreamConfig, commit_window, plan_window
from airflow_cdc.sources.registry import build_source
from airflow_cdc.state import StateStore
from airflow_cdc.spark_jobs.extract import extract_window

BIGTABLE_START = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)
WINDOW = timedelta(minutes=20)


class Pipeline:
    """One stream's plan -> extract -> commit steps, as the operators run them."""

    def __init__(self, store: StateStore, config: StreamConfig, hook=None) -> None:
        self.store, self.config, self.hook = store, config, hook  # hook: the plan task's

    @property
    def changelog(self) -> str:
        return f"lake.{self.config.changelog_table}"

    def plan(self, window: Window, hook=None):
        """The plan step: the source's partitions found now (files) and its plan options."""
        source = build_source(self.config.source_spec)
        hook = hook or self.hook
        now = datetime.now(timezone.utc) + timedelta(days=1)  # every file written has settled
        found = source.discover(window, now, hook)
        return plan_window(
            self.store, self.config, window, "run", 600, source.initial_positions(window), "lake",
            new_partitions=found.partitions,
            plan_options=lambda kept, positions: source.plan_options(kept, now, hook, positions,
                                                                     window))

    def extract(self, spark, window: Window, plan=None) -> dict:
        plan = plan or self.plan(window)
        result = extract_window(spark, plan, str(self.config.outcome_path(window)))
        self.store.mark_extracted(window, "run", result["snapshot_id"])
        return result

    def commit(self, window: Window) -> None:
        commit_window(self.store, self.config, window, "run")

    def event_ids(self, spark) -> list[str]:
        return [r.event_id for r in spark.table(self.changelog).select("event_id").collect()]

    def dead_letters(self, spark) -> list:
        table = self.changelog.replace("_changelog", "_dead_letters")
        return spark.table(table).select("partition_id", "event_id", "reason",
                                         "source_metadata_json").collect()

    def changelog_commits(self, spark) -> int:
        if not spark.catalog.tableExists(self.changelog):
            return 0
        return spark.sql(f"SELECT 1 FROM {self.changelog}.snapshots").count()


def new_pipeline(tmp_path, source: str, spec: dict, connection: dict | None = None) -> Pipeline:
    stream_id = f"f_{uuid.uuid4().hex[:8]}"
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.migrate()
    config = StreamConfig.for_source(source, stream_id, spec, namespace=stream_id,
                                     work_root=str(tmp_path / "work"))
    if connection is not None:
        config.source_spec["connection"] = connection
    return Pipeline(store, config)


def bigtable_stream(bigtable, tmp_path, **settings) -> Pipeline:
    return new_pipeline(tmp_path, "bigtable_change_stream", {
        "project": "demo-project", "instance": "demo-instance", "table": "events",
        "app_profile": "default", "settings": {"heartbeat_seconds": 0.2, **settings},
    }, {"emulator_host": bigtable.emulator_host})


def first_window(stream_id: str, start: datetime) -> Window:
    return Window(stream_id, start, start + WINDOW)


def spanner_truth(history, window: Window) -> set[str]:
    """The event ids of every change the history committed in ``window``."""
    return {
        f"{record.server_transaction_id}/{record.record_sequence}/{index}"
        for transaction in history.transactions
        if window.start <= transaction.commit_timestamp < window.end
        for record in transaction.records
        for index in range(len(record.changes))
    }


def bigtable_truth(emulator, window: Window) -> set[str]:
    """The event ids of every mutation the emulator holds committed in ``window``."""
    start, end = (int(t.timestamp() * 1_000_000) for t in (window.start, window.end))
    return {f"{c.row_key.hex()}/{c.commit_us}/{c.tiebreaker}/{c.cluster or '-'}/{i}"
            for c in emulator.commits if start <= c.commit_us < end
            for i in range(len(c.mutations))}


# --- file sources ---------------------------------------------------------------------------
FILES_START = datetime(2030, 1, 1, 0, 0, tzinfo=timezone.utc)


def datastream_event(row_id: int, position: int, minute: float = 1.0) -> dict:
    """A MySQL binlog event of ``shop.orders`` as Datastream writes it (seed 001)."""
    when = FILES_START + timedelta(minutes=minute)
    return {
        "stream_name": "projects/p/locations/l/streams/shop", "read_method": "mysql-cdc-binlog",
        "object": "shop_orders", "schema_key": "shop_orders-schema",
        "uuid": f"00000000-0000-0000-0000-{row_id:012d}",
        "read_timestamp": when + timedelta(seconds=2), "source_timestamp": when,
        "sort_keys": [],
        "source_metadata": {"log_file": "mysql-bin.000001", "log_position": position,
                            "primary_keys": ["id"], "is_deleted": False, "database": "shop",
                            "table": "orders", "change_type": "INSERT"},
        "payload": {"id": row_id, "name": f"order {row_id}", "amount": row_id * 10},
    }


def datastream_stream(tmp_path, prefix) -> Pipeline:
    from airflow_cdc.hooks.datastream import DatastreamSourceHook

    stream = new_pipeline(tmp_path, "datastream", {
        "prefix": str(prefix), "settings": {"settle_seconds": 0, "allowed_lateness_seconds": 0}})
    stream.hook = DatastreamSourceHook()  # a local folder: no connection needed
    return stream


DEBEZIUM_TOPIC = "pg.public.orders"
DEBEZIUM_HEARTBEATS = "__debezium-heartbeat.pg"


def debezium_change(row_id: int, lsn: int, minute: float = 1.0) -> dict:
    """A PostgreSQL insert as Debezium's JSON converter writes it (no schemas)."""
    millis = int((FILES_START + timedelta(minutes=minute)).timestamp() * 1000)
    return {"op": "c", "before": None, "after": {"id": row_id, "amount": f"{row_id}.50"},
            "ts_ms": millis + 5,
            "source": {"connector": "postgresql", "name": "pg", "db": "shop", "schema": "public",
                       "table": "orders", "ts_ms": millis, "lsn": lsn, "txId": lsn // 10,
                       "sequence": f'["{lsn - 5}","{lsn}"]', "snapshot": "false"}}


def debezium_sink_file(sink, topic: str, start: int, lines: list[str]):
    """One Kafka Connect sink file of ``topic`` partition 0 holding ``lines``."""
    folder = sink / "topics" / topic / "partition=0"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{topic}+0+{start:010d}.json"
    path.write_text("\n".join(lines) + "\n")
    return path


def debezium_stream(tmp_path, prefix) -> Pipeline:
    return new_pipeline(tmp_path, "debezium", {
        "prefix": str(prefix), "topic_prefix": "pg", "key_columns": {"public.orders": ["id"]},
        "settings": {"flush_lateness_seconds": 60}})


def list_unlistable_folder(base, listing: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Under ``base``, one readable file and a subfolder nobody may list (mode 000) holding
    another; run ``listing`` (Python, ``{root}`` replaced by ``base``) in a process that file
    permissions apply to: as root, without the capabilities that bypass them (CAP_DAC_OVERRIDE,
    CAP_DAC_READ_SEARCH). Returns the process and the unlistable subfolder."""

    (base / "ok").mkdir(parents=True)
    (base / "ok" / "a.jsonl").write_text("{}\n")
    hidden = base / "hidden"
    hidden.mkdir()
    (hidden / "b.jsonl").write_text("{}\n")
    command = [sys.executable, "-c", listing.replace("{root}", str(base))]
    if os.geteuid() == 0:
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *command]
    hidden.chmod(0)
    try:
        ran = subprocess.run(command, capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parents[2], timeout=120)
    finally:
        hidden.chmod(0o755)
    return ran, hidden
