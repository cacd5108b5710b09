"""Data change records as read through the client: transactions, capture types, dialects, truth."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

import pytest
from google.cloud.spanner_admin_database_v1.types import DatabaseDialect

from spanner_reading import PG_DATABASE, decode_row, spanner_database

US = timedelta(microseconds=1)


def key_names(record: dict) -> list[str]:
    return [c["name"] for c in record["column_types"] if c["is_primary_key"]]


def value_names(record: dict) -> list[str]:
    return [c["name"] for c in record["column_types"] if not c["is_primary_key"]]


def all_value_columns(history, table_name: str) -> list[str]:
    table = next(t for t in history.tables if t.name == table_name)
    return [c.name for c in table.value_columns]


def row_before_and_after(history, record: dict, mod: dict) -> tuple[dict | None, dict | None]:
    """The true row (JSON-encoded) just before and right after the record's commit."""
    table = next(t for t in history.tables if t.name == record["table_name"])
    key = tuple(c.type.decode(mod["keys"][c.name]) for c in table.key_columns)
    at = record["commit_timestamp"]
    before = history.row_at(table.name, key, at - US, as_json=True)
    after = history.row_at(table.name, key, at, as_json=True)
    return before, after


def non_key(row: dict | None, names) -> dict:
    return {name: row[name] for name in names} if row else {}


def records_of(data_records, capture: str) -> list[dict]:
    found = [record for _, record in data_records if record["value_capture_type"] == capture]
    assert {r["mod_type"] for r in found} == {"INSERT", "UPDATE", "DELETE"}, capture
    return found


def test_records_of_one_transaction_agree_across_partitions(data_records):
    by_transaction = defaultdict(list)
    for token, record in data_records:
        by_transaction[record["server_transaction_id"]].append((token, record))
    multi_partition = [group for group in by_transaction.values() if len({t for t, _ in group}) > 1]

    assert len(multi_partition) > 50
    for group in by_transaction.values():
        records = [r for _, r in group]
        tokens = {t for t, _ in group}
        assert len({r["commit_timestamp"] for r in records}) == 1
        assert {r["number_of_records_in_transaction"] for r in records} == {len(records)}
        assert {r["number_of_partitions_in_transaction"] for r in records} == {len(tokens)}
        sequences = [r["record_sequence"] for r in records]
        assert len(set(sequences)) == len(sequences)
        for token in tokens:
            in_partition = sorted(
                (r for t, r in group if t == token), key=lambda r: r["record_sequence"]
            )
            assert [r["is_last_record_in_transaction_in_partition"] for r in in_partition] == [
                False
            ] * (len(in_partition) - 1) + [True]


def test_a_record_holds_one_table_and_one_mod_type_of_one_transaction(data_records, history):
    for _, record in data_records:
        assert record["mods"]
        keys = key_names(record)
        table = next(t for t in history.tables if t.name == record["table_name"])
        assert keys == [c.name for c in table.key_columns]
        assert all(set(mod["keys"]) == set(keys) for mod in record["mods"])
        assert [c["ordinal_position"] for c in record["column_types"]] == sorted(
            table.ordinal(c["name"]) for c in record["column_types"]
        )


def test_old_and_new_values_records_carry_old_and_new_values_of_written_columns(
    data_records, history
):
    for record in records_of(data_records, "OLD_AND_NEW_VALUES"):
        all_values = all_value_columns(history, record["table_name"])
        for mod in record["mods"]:
            before, after = row_before_and_after(history, record, mod)
            if record["mod_type"] == "INSERT":
                assert mod["new_values"] == non_key(after, all_values) and mod["old_values"] == {}
            elif record["mod_type"] == "UPDATE":
                written = value_names(record)
                assert set(mod["new_values"]) == set(mod["old_values"]) == set(written)
                assert mod["new_values"] == non_key(after, written)
                assert mod["old_values"] == non_key(before, written)
            else:
                assert mod["new_values"] == {} and mod["old_values"] == non_key(before, all_values)


def test_new_values_records_carry_only_new_values_of_written_columns(data_records, history):
    partial_updates = 0
    for record in records_of(data_records, "NEW_VALUES"):
        all_values = all_value_columns(history, record["table_name"])
        for mod in record["mods"]:
            _, after = row_before_and_after(history, record, mod)
            assert mod["old_values"] == {}
            if record["mod_type"] == "INSERT":
                assert mod["new_values"] == non_key(after, all_values)
            elif record["mod_type"] == "UPDATE":
                assert mod["new_values"] == non_key(after, value_names(record))
                partial_updates += len(mod["new_values"]) < len(all_values)
            else:
                assert mod["new_values"] == {}
    assert partial_updates > 0


def test_new_row_records_carry_the_whole_new_row_and_no_old_values(data_records, history):
    for record in records_of(data_records, "NEW_ROW"):
        all_values = all_value_columns(history, record["table_name"])
        assert value_names(record) == all_values
        for mod in record["mods"]:
            _, after = row_before_and_after(history, record, mod)
            assert mod["old_values"] == {}
            assert mod["new_values"] == (
                {} if record["mod_type"] == "DELETE" else non_key(after, all_values)
            )


def test_new_row_and_old_values_records_carry_the_new_row_and_old_values_of_written_columns(
    data_records, history
):
    partial_old = 0
    for record in records_of(data_records, "NEW_ROW_AND_OLD_VALUES"):
        all_values = all_value_columns(history, record["table_name"])
        assert value_names(record) == all_values
        for mod in record["mods"]:
            before, after = row_before_and_after(history, record, mod)
            if record["mod_type"] == "DELETE":
                assert mod["new_values"] == {} and mod["old_values"] == non_key(before, all_values)
                continue
            assert mod["new_values"] == non_key(after, all_values)
            if record["mod_type"] == "INSERT":
                assert mod["old_values"] == {}
            else:
                assert mod["old_values"] == non_key(before, list(mod["old_values"]))
                assert 0 < len(mod["old_values"])
                partial_old += len(mod["old_values"]) < len(all_values)
    assert partial_old > 0


def test_column_values_use_spanner_json_encoding(data_records):
    inserts = [
        r for _, r in data_records if r["mod_type"] == "INSERT" and r["table_name"] == "Orders"
    ]
    mod = next(
        m
        for r in inserts
        for m in r["mods"]
        if all(v is not None for v in m["new_values"].values())
    )
    types = {c["name"]: c["type"] for r in inserts for c in r["column_types"]}

    assert (
        isinstance(mod["keys"]["CustomerId"], str) and int(mod["keys"]["CustomerId"]) > 0
    )  # INT64 as text
    assert isinstance(mod["new_values"]["Amount"], float)
    assert isinstance(mod["new_values"]["Details"], str) and mod["new_values"][
        "Details"
    ].startswith("{")
    assert all(isinstance(q, (str, type(None))) for q in mod["new_values"]["Quantities"])
    assert mod["new_values"]["PlacedAt"].endswith("Z")
    assert types["Quantities"] == {"code": "ARRAY", "array_element_type": {"code": "INT64"}}
    assert types["Details"] == {"code": "JSON"}


def test_transaction_tags_and_system_transactions_are_present(data_records):
    records = [record for _, record in data_records]
    system = [r for r in records if r["is_system_transaction"]]
    tags = {r["transaction_tag"] for r in records if not r["is_system_transaction"]}

    assert system and all(r["mod_type"] == "DELETE" and r["transaction_tag"] == "" for r in system)
    assert "app=banking,env=prod,action=transfer" in tags
    assert "" in tags and len(tags) >= 4


def test_every_value_capture_type_appears_in_its_period(data_records, history):
    seen = defaultdict(set)
    for _, record in data_records:
        seen[record["value_capture_type"]].add(
            history.value_capture_type_at(record["commit_timestamp"])
        )

    assert set(seen) == {"OLD_AND_NEW_VALUES", "NEW_VALUES", "NEW_ROW", "NEW_ROW_AND_OLD_VALUES"}
    assert all(periods == {capture} for capture, periods in seen.items())


def test_postgresql_dialect_returns_the_same_records_as_googlesql(reader, history):
    partition = history.merges[0].children[0]
    start = history.partition(partition).start

    googlesql = reader.query(start, token=partition)
    postgresql = reader.query(start, token=partition, dialect="postgresql")

    annotations = {
        c["name"]: c["type"].pop("type_annotation")
        for r in postgresql
        if r["kind"] == "data_change_record"
        for c in r["column_types"]
        if "type_annotation" in c["type"]
    }
    assert annotations == {"Balance": "PG_NUMERIC", "Details": "PG_JSONB", "Metadata": "PG_JSONB"}
    assert postgresql == googlesql


def test_named_positional_and_literal_arguments_return_the_same_records(reader, history):
    token = history.splits[1].children[0]
    start = history.partition(token).start
    end = start + timedelta(minutes=3)
    literal = (
        f"SELECT ChangeRecord FROM READ_{history.stream_name}("
        f"'{start.isoformat()}', TIMESTAMP '{end.isoformat()}', '{token}', 5000, NULL)"
    )

    named = reader.query(start, end=end, token=token, heartbeat_ms=5000)
    positional = reader.query(start, end=end, token=token, heartbeat_ms=5000, style="positional")
    rows, fields = reader.execute(literal)

    assert len(named) > 10
    assert positional == named
    assert [decode_row(row, fields) for row in rows] == named


def test_true_state_at_a_timestamp_equals_replaying_the_read_records(data_records, history):
    ordered = sorted(
        (record for _, record in data_records),
        key=lambda r: (r["commit_timestamp"], r["server_transaction_id"], r["record_sequence"]),
    )
    checkpoints = [
        history.created_at + (history.end - history.created_at) * share for share in (0.3, 0.7, 1.0)
    ]
    for checkpoint in checkpoints:
        replayed: dict[str, dict] = {t.name: {} for t in history.tables}
        for record in ordered:
            if record["commit_timestamp"] > checkpoint:
                break
            rows = replayed[record["table_name"]]
            for mod in record["mods"]:
                key = tuple(mod["keys"][name] for name in key_names(record))
                if record["mod_type"] == "DELETE":
                    del rows[key]
                elif record["mod_type"] == "INSERT":
                    rows[key] = {**mod["keys"], **mod["new_values"]}
                else:
                    rows[key].update(mod["new_values"])

        assert replayed == history.state_at(checkpoint, as_json=True), checkpoint
        assert sum(len(rows) for rows in replayed.values()) > 100


def test_database_dialect_is_reported_per_database(emulator):
    assert (
        spanner_database(emulator.emulator_host, PG_DATABASE).database_dialect
        == DatabaseDialect.POSTGRESQL
    )
    assert (
        spanner_database(emulator.emulator_host, "db").database_dialect
        == DatabaseDialect.GOOGLE_STANDARD_SQL
    )


@pytest.mark.parametrize("dialect", ["GOOGLE_STANDARD_SQL", "POSTGRESQL"])
def test_database_ddl_describes_the_tables_and_the_change_stream(emulator, history, dialect):
    database_id = PG_DATABASE if dialect == "POSTGRESQL" else "db"
    database = spanner_database(emulator.emulator_host, database_id)

    database.reload()

    statements = database.ddl_statements
    assert [s.split()[2] for s in statements[:-1]] == [t.name for t in history.tables]
    assert statements[-1].startswith(f"CREATE CHANGE STREAM {history.stream_name} FOR ALL")
