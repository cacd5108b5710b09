"""The extract Spark job on the emulated stream: one tagged changelog commit per window (I1)."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from airflow_cdc.model import Window
from airflow_cdc.pipeline.protocol import StreamConfig, commit_window, plan_window
from airflow_cdc.state import StateStore
from airflow_cdc.spark_jobs.extract import extract_window


@pytest.fixture
def pipeline(emulator, history, tmp_path):
    return stream_pipeline(emulator, history, tmp_path)


def stream_pipeline(emulator, history, folder):
    stream_id = f"s_{uuid.uuid4().hex[:8]}"
    tmp_path = folder / stream_id
    tmp_path.mkdir()
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.migrate()
    config = StreamConfig(
        stream_id,
        "spanner_change_stream",
        {
            "kind": "spanner_change_stream",
            "stream_id": stream_id,
            "stream_name": history.stream_name,
            "dialect": "GOOGLE_STANDARD_SQL",
            "heartbeat_milliseconds": 1000,
            "connection": {
                "project": "p",
                "instance": "i",
                "database": "db",
                "emulator_host": emulator.emulator_host,
            },
        },
        work_root=str(tmp_path / "work"),
    )
    return store, config


def windows_of(history, stream_id, minutes=20):
    start = history.created_at
    while start < history.end:
        yield Window(stream_id, start, min(start + timedelta(minutes=minutes), history.end))
        start += timedelta(minutes=minutes)


def run_window(spark, store, config, window):
    from airflow_cdc.sources.spanner.query import INITIAL_PARTITION
    from airflow_cdc.model import PartitionPosition

    plan = plan_window(
        store, config, window, "run", 600,
        [PartitionPosition(INITIAL_PARTITION, window.start)], "lake",
    )
    result = extract_window(spark, plan, str(config.outcome_path(window)))
    store.mark_extracted(window, "run", result["snapshot_id"])
    return result


def changelog(spark, config):
    return f"lake.{config.changelog_table}"


def test_extract_writes_every_change_of_the_window_in_one_tagged_commit(spark, pipeline, history):
    store, config = pipeline
    window = next(windows_of(history, config.stream_id))
    result = run_window(spark, store, config, window)
    in_window = [t for t in history.transactions if window.start <= t.commit_timestamp < window.end]
    expected = sum(len(t.changes) for t in in_window)
    table = changelog(spark, config)
    assert spark.table(table).count() == expected == result["counts"]["changes"]
    # every transaction counted once: those a read held whole, and those spread over partitions
    assert result["counts"]["transactions"] == len(in_window)
    tags = spark.sql(
        f"SELECT summary['airflow-cdc.window-id'] AS w FROM {table}.snapshots"
    ).collect()
    assert [r.w for r in tags] == [window.window_id]


def test_crash_between_changelog_commit_and_state_commit_then_rerun_loses_and_duplicates_nothing(
    spark, pipeline, history
):
    store, config = pipeline
    table = changelog(spark, config)
    first, second = list(windows_of(history, config.stream_id))[:2]
    run_window(spark, store, config, first)
    commit_window(store, config, first, "run")
    # Second window: the changelog commit lands, then the run dies before the state commit.
    run_window(spark, store, config, second)
    config.outcome_path(second).unlink()  # the crashed run's local files are gone too
    rows_before = spark.table(table).count()
    snapshots_before = spark.sql(f"SELECT * FROM {table}.snapshots").count()

    rerun = run_window(spark, store, config, second)
    commit_window(store, config, second, "run")

    assert rerun["skipped"] is True
    assert spark.table(table).count() == rows_before
    assert spark.sql(f"SELECT * FROM {table}.snapshots").count() == snapshots_before
    expected = sum(
        len(t.changes) for t in history.transactions if first.start <= t.commit_timestamp < second.end
    )
    ids = [r.event_id for r in spark.table(table).select("event_id").collect()]
    assert len(ids) == len(set(ids)) == expected
    assert store.get_window(config.stream_id, second.start).committed


def test_each_round_reports_every_partition_with_records_watermark_and_lag(capsys):
    from datetime import datetime, timezone

    from airflow_cdc.model import ChildPartition, PartitionOutcome
    from airflow_cdc.spark_jobs.extract import report_round

    start = datetime(2024, 5, 1, 9, tzinfo=timezone.utc)
    window = Window("s", start, start + timedelta(hours=1))
    report_round(
        window,
        2,
        [
            (PartitionOutcome("b", False, start + timedelta(minutes=45), records=7), ()),
            (
                PartitionOutcome(
                    "a", True, start + timedelta(minutes=10), records=3,
                    children=(ChildPartition("a1", start + timedelta(minutes=10), ("a",)),),
                ),
                (),
            ),
        ],
    )
    assert capsys.readouterr().out.splitlines() == [
        "airflow-cdc extract round 2: partition a records=3 "
        "watermark=2024-05-01T09:10:00.000000Z lag=0:50:00 finished, children=1",
        "airflow-cdc extract round 2: partition b records=7 "
        "watermark=2024-05-01T09:45:00.000000Z lag=0:15:00 continues",
    ]


def test_a_window_read_from_more_partitions_than_cores_is_committed_in_one_file_per_core(
    spark, pipeline, history
):
    store, config = pipeline
    window = next(windows_of(history, config.stream_id))
    result = run_window(spark, store, config, window)
    cores = spark.sparkContext.defaultParallelism
    assert result["counts"]["partitions"] > cores  # one Spark partition per source partition read
    files = spark.sql(
        f"SELECT summary['added-data-files'] AS files FROM {changelog(spark, config)}.snapshots"
    ).collect()
    assert [int(r.files) <= cores for r in files] == [True]


def changelog_rows(spark, table):
    """The rows of a changelog table, comparable across streams (no stream, no window id)."""
    columns = [f.name for f in spark.table(table).schema.fields if f.name not in ("stream", "window_id")]
    return sorted((
        tuple(tuple(sorted(v.items())) if isinstance(v, dict) else v for v in row)
        for row in spark.table(table).select(*columns).collect()
    ), key=repr)


@pytest.mark.parametrize("rows_per_task", [4, 2000], ids=["every-task-writes", "small-reads-held"])
def test_rows_the_read_tasks_write_themselves_are_the_rows_spark_writes(
    spark, emulator, history, tmp_path, monkeypatch, rows_per_task
):
    import airflow_cdc.spark_jobs.extract

    window_of = lambda config: next(windows_of(history, config.stream_id))  # noqa: E731
    # A read task with a quarter of this writes its own files: 4, every one; 2,000, the
    # larger reads, and the others' rows are written by one more pass.
    monkeypatch.setattr(airflow_cdc.spark_jobs.extract, "ROWS_PER_TASK", rows_per_task)
    store, direct = stream_pipeline(emulator, history, tmp_path)
    written = run_window(spark, store, direct, window_of(direct))
    monkeypatch.setenv("CDC_DIRECT_CHANGELOG", "false")
    store, by_spark = stream_pipeline(emulator, history, tmp_path)
    run_window(spark, store, by_spark, window_of(by_spark))

    rows = changelog_rows(spark, changelog(spark, direct))
    assert len(rows) == written["counts"]["changes"] > 0
    assert rows == changelog_rows(spark, changelog(spark, by_spark))
    summaries = [
        spark.sql(f"SELECT summary FROM {changelog(spark, c)}.snapshots").collect()[0].summary
        for c in (direct, by_spark)
    ]
    assert summaries[0]["airflow-cdc.declarations"] == summaries[1]["airflow-cdc.declarations"]
    # the files are the read tasks' own (named <window prefix>-<task>-<n>), not Spark's
    paths = [r.file_path for r in spark.sql(f"SELECT file_path FROM {changelog(spark, direct)}.files").collect()]
    assert paths and all(re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{32}-\d{5}\.parquet", p.rsplit("/", 1)[1])
                         for p in paths)


def assert_failed_window_leaves_no_files(spark, pipeline, history, monkeypatch, error, match=None):
    """The pipeline's first window, its read tasks writing their files, fails with ``error``;
    nothing is committed and no Parquet file is left in the changelog's folder."""
    import airflow_cdc.spark_jobs.extract
    from airflow_cdc.spark_jobs.commits import _iceberg_table

    store, config = pipeline
    monkeypatch.setattr(airflow_cdc.spark_jobs.extract, "ROWS_PER_TASK", 4)  # every read task writes its files
    with pytest.raises(error, match=match):
        run_window(spark, store, config, next(windows_of(history, config.stream_id)))
    location = str(_iceberg_table(spark, changelog(spark, config)).location()).removeprefix("file:")
    assert sorted(p.name for p in Path(location).rglob("*.parquet")) == []
    assert spark.table(changelog(spark, config)).count() == 0


def test_a_window_that_fails_its_transaction_check_leaves_none_of_the_files_its_read_wrote(
    spark, pipeline, history, monkeypatch
):
    import airflow_cdc.spark_jobs.extract
    from airflow_cdc.pipeline.partition_lineage import IncompleteTransactionError

    def incomplete(*_):
        raise IncompleteTransactionError("transaction t1 is incomplete in this window")

    monkeypatch.setattr(airflow_cdc.spark_jobs.extract, "check_transactions_on_driver", incomplete)
    monkeypatch.setattr(airflow_cdc.spark_jobs.extract, "check_transactions_on_executors", incomplete)
    assert_failed_window_leaves_no_files(spark, pipeline, history, monkeypatch, IncompleteTransactionError)


def test_a_window_whose_dead_letters_fail_to_commit_leaves_none_of_the_files_its_read_wrote(
    spark, pipeline, history, monkeypatch
):
    import dataclasses

    import airflow_cdc.spark_jobs.extract

    read_partitions = airflow_cdc.spark_jobs.extract.read_partitions

    def read_with_dead_letters(*args, **kwargs):  # the read's rows, and dead letters to commit
        return dataclasses.replace(read_partitions(*args, **kwargs), dead_letters=object())

    def failing_append(*_):
        raise OSError("No space left on device")

    monkeypatch.setattr(airflow_cdc.spark_jobs.extract, "read_partitions", read_with_dead_letters)
    monkeypatch.setattr(airflow_cdc.spark_jobs.extract, "append_dead_letters", failing_append)
    assert_failed_window_leaves_no_files(spark, pipeline, history, monkeypatch, OSError, "No space left")


def tally_frame(spark, *rows):
    """A tally frame (transaction_id, expected, record, commit_ts) as the read tasks leave it."""
    return spark.createDataFrame(
        list(rows), "transaction_id string, expected long, record string, commit_ts timestamp")


@pytest.mark.parametrize("where", ["check_transactions_on_executors", "check_transactions_on_driver"])
def test_the_transaction_check_counts_transactions_and_names_the_first_incomplete_one(spark, where):
    import airflow_cdc.spark_jobs.extract
    from airflow_cdc.pipeline.partition_lineage import IncompleteTransactionError
    from airflow_cdc.sources.base import TransactionTally

    check_transactions = getattr(airflow_cdc.spark_jobs.extract, where)

    window = Window("s", datetime_at(0), datetime_at(60))

    def reads(*tallies_per_partition):  # the tally frame of these partitions' reads
        return tally_frame(spark, *[(t.transaction_id, t.expected_records, record, t.commit_ts)
                                    for tallies in tallies_per_partition
                                    for t in tallies for record in t.record_ids])

    two_partitions = reads(
        [TransactionTally("t1", 2, frozenset({"00000000"})), TransactionTally("t3", 1, frozenset({"00000000"}))],
        [TransactionTally("t1", 2, frozenset({"00000001"}))],
    )
    assert check_transactions(two_partitions, window, []) == 2

    missing = reads(
        [TransactionTally("t9", 3, frozenset({"00000000"})), TransactionTally("t5", 2, frozenset({"00000000"}))],
        [TransactionTally("t9", 3, frozenset({"00000001"}))],
    )
    with pytest.raises(IncompleteTransactionError, match="transaction t5 has 1 of its 2 data change records"):
        check_transactions(missing, window, [])


@pytest.mark.parametrize("where", ["check_transactions_on_executors", "check_transactions_on_driver"])
def test_the_transaction_check_counts_a_record_tallied_twice_once(spark, where):
    """A record two reads tallied (a partition read again after a retry) is one record: it
    neither completes a transaction missing another record nor makes one look over-full."""
    import airflow_cdc.spark_jobs.extract
    from airflow_cdc.pipeline.partition_lineage import IncompleteTransactionError

    check_transactions = getattr(airflow_cdc.spark_jobs.extract, where)
    window = Window("s", datetime_at(0), datetime_at(60))

    twice = tally_frame(spark, ("t1", 2, "00000000", None), ("t1", 2, "00000000", None), ("t1", 2, "00000001", None))
    assert check_transactions(twice, window, []) == 1
    with pytest.raises(IncompleteTransactionError, match="transaction t2 has 1 of its 2"):
        check_transactions(tally_frame(spark, ("t2", 2, "00000000", None), ("t2", 2, "00000000", None)), window, [])


@pytest.mark.parametrize("where", ["check_transactions_on_executors", "check_transactions_on_driver"])
def test_the_transaction_check_counts_a_tally_without_a_record_as_no_record(spark, where):
    """Both paths count the same records: a tally row whose record is null adds none."""
    import airflow_cdc.spark_jobs.extract
    from airflow_cdc.pipeline.partition_lineage import IncompleteTransactionError

    check_transactions = getattr(airflow_cdc.spark_jobs.extract, where)
    window = Window("s", datetime_at(0), datetime_at(60))

    with pytest.raises(IncompleteTransactionError, match="transaction t1 has 1 of its 2"):
        check_transactions(tally_frame(spark, ("t1", 2, "00000000", None), ("t1", 2, None, None)), window, [])
    assert check_transactions(tally_frame(spark, ("t2", 1, "00000000", None), ("t2", 1, None, None)), window, []) == 1


@pytest.mark.parametrize("where", ["check_transactions_on_executors", "check_transactions_on_driver"])
def test_the_transaction_check_accepts_the_parts_of_transactions_split_across_windows(spark, where):
    """Incomplete by design: one committed before the window (its rest came in the window
    before) and one committed at or after the progress of a partition that stopped short."""
    import airflow_cdc.spark_jobs.extract
    from airflow_cdc.model import PartitionOutcome
    from airflow_cdc.pipeline.partition_lineage import IncompleteTransactionError

    check_transactions = getattr(airflow_cdc.spark_jobs.extract, where)
    window = Window("s", datetime_at(0), datetime_at(60))
    short = [PartitionOutcome("p", False, datetime_at(40), records=1)]

    split = tally_frame(spark, ("before", 3, "00000000", datetime_at(-5)), ("after", 2, "00000000", datetime_at(45)),
                    ("whole", 1, "00000000", datetime_at(10)))
    assert check_transactions(split, window, short) == 3
    with pytest.raises(IncompleteTransactionError, match="transaction after has 1 of its 2"):
        check_transactions(split, window, [])  # no partition stopped short: "after" is missing a record
    mismatch = tally_frame(spark, ("t", 2, "00000000", datetime_at(10)), ("t", 3, "00000001", datetime_at(10)))
    with pytest.raises(IncompleteTransactionError, match="reports 2 and 3 records|reports 3 and 2 records"):
        check_transactions(mismatch, window, [])


def datetime_at(minutes: int):
    from datetime import datetime, timezone

    return datetime(2024, 5, 1, 9, tzinfo=timezone.utc) + timedelta(minutes=minutes)


def test_two_extracts_of_one_window_at_once_make_one_commit_and_report_it(
    spark, pipeline, history, monkeypatch
):
    """An orphaned driver and the task's retry: both read the window, both find no commit of
    it; the later commit conflicts and takes the earlier one's as its own (I1)."""
    import threading

    import airflow_cdc.spark_jobs.changelog as changelog_module
    from airflow_cdc.sources.spanner.query import INITIAL_PARTITION
    from airflow_cdc.model import PartitionPosition

    store, config = pipeline
    window = next(windows_of(history, config.stream_id))
    plan = plan_window(store, config, window, "run", 600,
                       [PartitionPosition(INITIAL_PARTITION, window.start)], "lake")
    barrier = threading.Barrier(2, timeout=300)
    create = changelog_module.create_changelog_table

    def create_then_wait(spark_, table):  # both jobs have read the table before either commits
        create(spark_, table)
        barrier.wait()

    monkeypatch.setattr(changelog_module, "create_changelog_table", create_then_wait)
    results, errors = [], []

    def extract():
        try:
            results.append(extract_window(spark, plan, str(config.outcome_path(window))))
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=extract) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    table = changelog(spark, config)
    tags = spark.sql(f"SELECT summary['airflow-cdc.window-id'] AS w FROM {table}.snapshots").collect()
    expected = sum(
        len(t.changes) for t in history.transactions if window.start <= t.commit_timestamp < window.end
    )
    assert [r.w for r in tags] == [window.window_id]
    assert spark.table(table).count() == expected
    assert len({r["snapshot_id"] for r in results}) == 1
