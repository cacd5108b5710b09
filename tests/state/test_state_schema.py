"""The versioned schema: migrate creates and upgrades it, and the store refuses a wrong version."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import create_engine, inspect, text

from airflow_cdc.model import PartitionState, Window, WindowState
from airflow_cdc.state import HEAD_VERSION, SchemaVersionError, StateStore

from .helpers import LEASE, T0, position, window


def test_migrate_brings_an_empty_database_to_the_newest_version_and_is_idempotent(state_url):
    with StateStore(state_url) as store:
        assert store.schema_version() == 0
        assert store.migrate() == HEAD_VERSION
        store.register_stream("orders", "spanner", "fp")
        assert store.migrate() == HEAD_VERSION
        assert store.schema_version() == HEAD_VERSION
        assert [s.stream_id for s in store.streams()] == ["orders"]


def test_upgrade_from_version_1_keeps_the_data_and_adds_the_gate_indexes(state_url):
    with StateStore(state_url) as store:
        assert store.migrate(target_version=1) == 1
        # Rows as an airflow-cdc at schema version 1 wrote them.
        engine = create_engine(state_url)
        naive = state_url.startswith("sqlite")  # SQLite keeps UTC text without an offset

        def ts(value: datetime):
            return value.replace(tzinfo=None) if naive else value

        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO cdc_streams (stream_id, source_kind, config_fingerprint, "
                    "created_at) VALUES ('orders', 'spanner', 'fp', :now)"
                ),
                {"now": ts(T0)},
            )
            conn.execute(
                text(
                    "INSERT INTO cdc_partitions (stream_id, partition_id, parent_ids, reported_by, "
                    "resume_position, start_ts, watermark, watermark_since, state, created_window, "
                    "updated_at) VALUES ('orders', 'p1', '[]', '[]', 'tok', :t0, :wm, :t0, "
                    "'RUNNING', :t0, :t0)"
                ),
                {"t0": ts(T0), "wm": ts(T0 + timedelta(hours=1))},
            )
            conn.execute(
                text(
                    "INSERT INTO cdc_windows (stream_id, window_start, window_end, state, "
                    "low_watermark, counts, attempt, lease_owner, lease_expires_at, created_at, "
                    "updated_at) VALUES ('orders', :t0, :t1, 'COMMITTED', :t1, :counts, 1, "
                    "'run-1', :t1, :t0, :t0)"
                ),
                {"t0": ts(T0), "t1": ts(T0 + timedelta(hours=1)), "counts": '{"records":3}'},
            )
        engine.dispose()

        assert store.migrate() == HEAD_VERSION

        [committed] = store.list_windows("orders")
        assert (committed.state, committed.counts) == (WindowState.COMMITTED, {"records": 3})
        [p1] = store.list_partitions("orders")
        assert (p1.state, p1.resume_position, p1.watermark) == (
            PartitionState.RUNNING,
            "tok",
            T0 + timedelta(hours=1),
        )
        next_plan = store.plan_window(window(1), "run-2", LEASE)
        assert [(p.partition_id, p.start, p.resume_position) for p in next_plan.positions] == [
            ("p1", T0 + timedelta(hours=1), "tok")
        ]
        engine = create_engine(state_url)
        indexes = {
            ix["name"]
            for table in ("cdc_partitions", "cdc_windows")
            for ix in inspect(engine).get_indexes(table)
        }
        engine.dispose()
        assert {"ix_cdc_partitions_stream_state", "ix_cdc_windows_stream_state"} <= indexes


def test_store_refuses_a_database_whose_schema_is_newer_than_the_code(state_url):
    with StateStore(state_url) as store:
        store.migrate()
        engine = create_engine(state_url)
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO cdc_schema_version (version, description, applied_at) "
                    "VALUES (7, 'from the future', '2031-01-01 00:00:00.000000')"
                )
            )
        engine.dispose()
    expected = (
        f"state store schema version 7 is newer than this airflow-cdc (knows {HEAD_VERSION}): "
        f"upgrade airflow-cdc"
    )
    with StateStore(state_url) as store:
        with pytest.raises(SchemaVersionError) as on_migrate:
            store.migrate()
        with pytest.raises(SchemaVersionError) as on_use:
            store.streams()
    assert str(on_migrate.value) == expected
    assert str(on_use.value) == expected


def test_store_on_an_unmigrated_database_says_to_run_migrate(state_url):
    with StateStore(state_url) as store:
        with pytest.raises(SchemaVersionError, match=r"has no state tables yet.*migrate\(\)"):
            store.register_stream("orders", "spanner", "fp")
        store.migrate(target_version=1)
        with pytest.raises(
            SchemaVersionError,
            match=rf"is at schema version 1, this airflow-cdc needs version {HEAD_VERSION}",
        ):
            store.streams()


def test_timestamps_come_back_as_the_same_instants_in_utc_with_microseconds(orders):
    berlin = timezone(timedelta(hours=2))
    start = datetime(2024, 6, 1, 2, 0, 0, 123456, tzinfo=berlin)
    win = Window("orders", start, start + timedelta(hours=1))
    plan = orders.plan_window(
        win,
        "run-1",
        LEASE,
        [position("p1", datetime(2024, 6, 1, 1, 59, 59, 999999, tzinfo=berlin))],
    )

    stored = orders.get_window("orders", start)
    [p1] = orders.list_partitions("orders")
    assert stored.start == start and stored.start.tzinfo == timezone.utc
    assert stored.start.microsecond == 123456
    assert p1.start == datetime(2024, 5, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)
    assert p1.start.tzinfo == timezone.utc
    assert plan.positions[0].start == p1.start


def test_default_url_is_the_configured_state_url_when_set(state_url, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CDC_STATE_URL", state_url)
    assert StateStore.default_url() == state_url
    with StateStore() as default_store:
        default_store.migrate()
        default_store.register_stream("orders", "spanner", "fp")
    with StateStore(state_url) as store:
        assert [s.stream_id for s in store.streams()] == ["orders"]


def test_default_store_is_a_wal_mode_sqlite_file_in_airflow_home(tmp_path, monkeypatch):
    # SQLite only by nature: this is the embedded default, with no URL configured.
    monkeypatch.delenv("AIRFLOW_CDC_STATE_URL", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow_home"))
    expected_file = tmp_path / "airflow_home" / "cdc_state.db"
    assert StateStore.default_url() == f"sqlite:///{expected_file}"
    with StateStore() as store:
        store.migrate()
    assert expected_file.is_file()
    engine = create_engine(f"sqlite:///{expected_file}")
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    engine.dispose()
