"""Datastream events -> changelog rows: ops, keys and the per-source ordering (seed 001)."""

from __future__ import annotations

import pytest

from airflow_cdc.model import Op
from airflow_cdc.sources.datastream.events import MalformedEventError, event_to_change_row

from .support import at, mysql, oracle, postgres, sqlserver


def row(event):
    return event_to_change_row(event, "shop", "w", "file-1")


def in_order(*events) -> list[str]:
    """The uuids of ``events`` sorted by their changelog ordering keys."""
    return [r.event_id for r in sorted((row(e) for e in events), key=lambda r: r.ordering_key)]


def test_mysql_orders_by_log_file_before_log_position():
    later_file = mysql({"id": 1}, log_file="mysql-bin.000010", pos=4, uuid="b")
    earlier_file = mysql({"id": 1}, log_file="mysql-bin.000009", pos=900, uuid="a")

    assert in_order(later_file, earlier_file) == ["a", "b"]


def test_mysql_ties_on_log_file_are_broken_by_log_position():
    second = mysql({"id": 1}, pos=2000, uuid="b")
    first = mysql({"id": 1}, pos=120, uuid="a")

    assert in_order(second, first) == ["a", "b"]


def test_oracle_orders_by_scn_then_rs_id_then_ssn():
    later_scn = oracle({"ID": 1}, scn=20, rs_id="0x0001.00000001.0010", uuid="c")
    same_scn_later_rs = oracle({"ID": 1}, scn=10, rs_id="0x0001.00000002.0010", ssn=0, uuid="b2")
    same_rs_later_ssn = oracle({"ID": 1}, scn=10, rs_id="0x0001.00000001.0010", ssn=5, uuid="b1")
    first = oracle({"ID": 1}, scn=10, rs_id="0x0001.00000001.0010", ssn=4, uuid="a")

    assert in_order(later_scn, same_scn_later_rs, same_rs_later_ssn, first) == ["a", "b1", "b2", "c"]


def test_oracle_rs_id_parts_compare_as_hexadecimal_numbers():
    small = oracle({"ID": 1}, scn=10, rs_id="0x0001.0000000f.0010", uuid="a")
    large = oracle({"ID": 1}, scn=10, rs_id="0x0001.00000010.0010", uuid="b")

    assert in_order(large, small) == ["a", "b"]


def test_postgres_lsn_is_compared_as_a_number_where_text_comparison_is_wrong():
    # As text "10/0" < "9/FFFFFFFF"; as LSNs 9/FFFFFFFF comes first.
    later = postgres({"id": 1}, lsn="10/0", uuid="b")
    earlier = postgres({"id": 1}, lsn="9/FFFFFFFF", uuid="a")

    assert "10/0" < "9/FFFFFFFF"
    assert in_order(later, earlier) == ["a", "b"]


def test_postgres_orders_by_source_timestamp_before_lsn():
    later_time = postgres({"id": 1}, lsn="0/1", when=at(2), uuid="b")
    earlier_time = postgres({"id": 1}, lsn="0/2", when=at(1), uuid="a")

    assert in_order(later_time, earlier_time) == ["a", "b"]


def test_sqlserver_ties_on_source_timestamp_are_broken_by_lsn_numbers():
    later = sqlserver({"id": 1}, lsn="0000000a:00000001:0001", uuid="b")
    earlier = sqlserver({"id": 1}, lsn="00000009:ffffffff:ffff", uuid="a")

    assert in_order(later, earlier) == ["a", "b"]


def test_backfill_ranks_below_cdc_events_of_the_same_key():
    backfill = mysql({"id": 1, "v": "old"}, backfill=True, when=at(50), uuid="b")
    cdc = mysql({"id": 1, "v": "new"}, pos=4, when=at(1), uuid="c")

    assert in_order(cdc, backfill) == ["b", "c"]
    assert row(backfill).op is Op.READ


def test_rollback_reverse_insert_delete_pair_ends_with_the_delete():
    insert = mysql({"id": 7}, pos=100, uuid="ins")
    reverse = mysql({"id": 7}, pos=180, change="DELETE", deleted=True, uuid="rev")

    assert in_order(reverse, insert) == ["ins", "rev"]
    assert row(reverse).op is Op.DELETE


@pytest.mark.parametrize(
    ("change", "deleted", "op"),
    [
        ("INSERT", False, Op.INSERT),
        ("UPDATE", False, Op.UPDATE),
        ("UPDATE-INSERT", False, Op.UPDATE),
        ("UPDATE-DELETE", True, Op.DELETE),
        ("DELETE", True, Op.DELETE),
    ],
)
def test_change_types_become_changelog_ops(change, deleted, op):
    assert row(mysql({"id": 1}, change=change, deleted=deleted)).op is op


def test_is_deleted_makes_a_delete_whatever_the_change_type():
    assert row(postgres({"id": 1}, change="UPDATE", deleted=True)).op is Op.DELETE


def test_keys_come_from_primary_keys_metadata():
    event = postgres({"tenant": "t1", "id": 3, "name": "x"}, keys=("tenant", "id"))

    assert row(event).keys == {"tenant": "t1", "id": 3}


def test_oracle_table_without_key_is_keyed_by_row_id():
    result = row(oracle({"FIELD1": "foo"}, row_id="AAAGYPAATAAPIC5AAB"))

    assert result.keys == {"row_id": "AAAGYPAATAAPIC5AAB"}
    assert result.new_values == {"FIELD1": "foo", "row_id": "AAAGYPAATAAPIC5AAB"}
    assert result.source_metadata["keyed_by"] == "row_id"


def test_mysql_table_without_primary_key_is_refused_naming_the_table():
    with pytest.raises(MalformedEventError, match="'shop_logs'.*no primary key"):
        row(mysql({"id": 1}, keys=(), obj="shop_logs"))


def test_generic_and_source_metadata_are_kept_on_the_row():
    result = row(oracle({"ID": 1}, scn=42, keys=("ID",)))

    assert result.source_metadata["read_method"] == "oracle-cdc-logminer"
    assert result.source_metadata["source_metadata"]["scn"] == 42
    assert result.source_metadata["schema_key"] == "ROOT_SAMPLE-schema"
    assert result.transaction_id == "tx-1"


def test_unknown_read_method_is_refused_with_the_supported_prefixes():
    event = mysql({"id": 1})
    event["read_method"] = "db2-cdc"

    with pytest.raises(MalformedEventError, match="'db2-cdc'.*mysql-, oracle-"):
        row(event)


@pytest.mark.parametrize(
    "make",
    [
        lambda change, uuid, **kw: mysql({"id": 1}, pos=40, change=change, uuid=uuid, **kw),
        lambda change, uuid, **kw: oracle({"ID": 1}, scn=9, ssn=2, change=change, uuid=uuid,
                                          keys=("ID",), **kw),
        lambda change, uuid, **kw: postgres({"id": 1}, lsn="0/40", change=change, uuid=uuid, **kw),
        lambda change, uuid, **kw: sqlserver({"id": 1}, change=change, uuid=uuid, **kw),
    ],
    ids=["mysql", "oracle", "postgresql", "sqlserver"],
)
def test_update_delete_ranks_before_other_changes_at_the_same_source_position(make):
    # The uuids alone would put the delete last.
    delete = make("UPDATE-DELETE", "z-delete", deleted=True)
    insert = make("UPDATE-INSERT", "a-insert")
    update = make("UPDATE", "b-update")

    assert in_order(insert, update, delete) == ["z-delete", "a-insert", "b-update"]


def test_update_delete_at_a_later_source_position_still_ranks_after_earlier_changes():
    insert = oracle({"ID": 1}, scn=9, change="UPDATE-INSERT", uuid="a", keys=("ID",))
    later_delete = oracle({"ID": 1}, scn=10, change="UPDATE-DELETE", deleted=True, uuid="b",
                          keys=("ID",))

    assert in_order(later_delete, insert) == ["a", "b"]


def test_declared_key_columns_rank_before_primary_keys_metadata():
    event = postgres({"tenant": "t1", "id": 3}, keys=("id",), obj="public_customers")

    result = event_to_change_row(event, "shop", "w", "f", {"public_customers": ["tenant", "id"]})

    assert result.keys == {"tenant": "t1", "id": 3}
    assert result.source_metadata["keyed_by"] == "declared"


def test_declared_key_of_an_oracle_table_replaces_the_row_id():
    event = oracle({"EMPLOYEE_ID": 7, "NAME": "Ann"}, obj="HR.EMPLOYEES", row_id="AAAGYPAATAAPIC5AAB")

    result = event_to_change_row(event, "shop", "w", "f", {"HR_EMPLOYEES": ["EMPLOYEE_ID"]})

    assert result.keys == {"EMPLOYEE_ID": 7}
    assert "row_id" not in result.new_values


def test_sqlserver_table_is_keyed_by_its_replication_index():
    result = row(sqlserver({"id": 4, "sku": "x"}, keys=("sku",)))

    assert result.keys == {"sku": "x"}
    assert result.source_metadata["keyed_by"] == "replication_index"


def test_declared_key_columns_missing_from_the_payload_are_refused_naming_table_and_columns():
    event = oracle({"NAME": "Ann"}, obj="HR.EMPLOYEES")

    with pytest.raises(MalformedEventError,
                       match=r"table 'HR_EMPLOYEES'.*declared key column\(s\) \['EMPLOYEE_ID'\]"):
        event_to_change_row(event, "shop", "w", "f", {"HR_EMPLOYEES": ["EMPLOYEE_ID"]})
