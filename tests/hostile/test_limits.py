"""Values at the limits of their types, from Spanner change stream records to the target.

The records go through the Spanner source's own parsing and mapping (what the partition read
runs on what the client hands over: GoogleSQL mods carry INT64 and NUMERIC as strings,
FLOAT64 NaN and infinities as "NaN"/"Infinity"), into the changelog, and through the real
apply engine into an Iceberg target; the target is read back with Spark and with pyiceberg.
A value the target type cannot hold (a NUMERIC beyond 38 digits, an instant in year 10000,
an INT64 beyond 64 bits) becomes a dead letter naming the column, the value and the type.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import date, datetime, timezone
from decimal import Decimal

import pytest

from airflow_cdc.sources.spanner.mapping import change_rows
from airflow_cdc.sources.spanner.records import DataChangeRecord, parse_change_record
from tests.apply.support import STREAM, window, write_changelog

W = window(0)
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
NUMERIC_MAX = "9" * 29 + "." + "9" * 9  # 38 digits, scale 9: Spanner's NUMERIC
NUMERIC_MIN = "-" + NUMERIC_MAX
FIRST, LAST = "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z"
TEN_MB = "x" * (10 << 20)


def nested(depth: int):
    value: object = 1
    for level in range(depth):
        value = {f"k{level}": [value]} if level % 2 else {f"k{level}": value}
    return value


DEEP = nested(100)
COLUMNS = {"id": "INT64", "i": "INT64", "n": "NUMERIC", "ts": "TIMESTAMP", "d": "DATE", "f": "FLOAT64",
           "s": "STRING", "j": "JSON", "big": "STRING"}
GOOD = {
    INT64_MAX: {"i": str(INT64_MAX), "n": NUMERIC_MAX, "ts": LAST, "d": "9999-12-31", "f": "NaN", "s": "",
                "j": DEEP, "big": TEN_MB},
    INT64_MIN: {"i": str(INT64_MIN), "n": NUMERIC_MIN, "ts": FIRST, "d": "0001-01-01", "f": "Infinity",
                "s": None, "j": None, "big": None},
    0: {"i": "0", "n": "0.000000001", "ts": "1970-01-01T00:00:00Z", "d": "1970-01-01", "f": "-Infinity",
        "s": "x", "j": {}, "big": ""},
}
BEYOND = {  # key -> (column, value) the target type cannot hold
    1: ("n", "1" + "0" * 29),            # 30 integer digits: 39 digits at scale 9
    2: ("n", "0.0000000001"),           # scale 10
    4: ("i", str(INT64_MAX + 1)),       # beyond 64 bits
}
# Beyond Spanner's and Python's year 9999, but not beyond Spark's and Iceberg's (their
# timestamps are 64-bit microseconds, their dates 32-bit days: PostgreSQL's years up to
# 294276 fit): such values land, in a table of their own (Python cannot read them back).
FAR = {"ts": "10000-01-01T00:00:00Z", "d": "294276-12-31"}


def record(key: int, values: dict, sequence: int, table: str = "Limits") -> DataChangeRecord:
    [parsed] = parse_change_record({"data_change_record": {
        "commit_timestamp": "2024-05-01T10:00:01.000001Z", "record_sequence": f"{sequence:08d}",
        "server_transaction_id": f"txn-{sequence}", "is_last_record_in_transaction_in_partition": True,
        "table_name": table,
        "column_types": [{"name": name, "type": {"code": code}, "is_primary_key": name == "id",
                          "ordinal_position": index} for index, (name, code) in enumerate(COLUMNS.items())],
        "mods": [{"keys": {"id": str(key)}, "new_values": values, "old_values": {}}],
        "mod_type": "INSERT", "value_capture_type": "NEW_ROW",
        "number_of_records_in_transaction": 1, "number_of_partitions_in_transaction": 1,
    }})
    return parsed


@pytest.fixture(scope="module")
def applied(module_lake):
    lake = module_lake
    changes = [record(key, values, i) for i, (key, values) in enumerate(GOOD.items())]
    changes += [record(key, {column: value}, 100 + key) for key, (column, value) in BEYOND.items()]
    changes.append(record(1, FAR, 200, table="Far"))
    rows = [row for change in changes for row in change_rows(change, STREAM, W.window_id, "token-1")]
    write_changelog(lake.spark, lake.changelog, rows)
    result = lake.apply(W, policies={"on_dead_letter": "continue"})
    return lake, result


def test_int64_min_and_max_land_exactly_as_keys_and_values(applied):
    lake, _ = applied

    rows = lake.pyiceberg_rows("Limits")

    assert [(r["id"], r["i"]) for r in rows] == [(INT64_MIN, INT64_MIN), (0, 0), (INT64_MAX, INT64_MAX)]


def test_numeric_of_38_digits_at_scale_9_lands_exactly(applied):
    lake, _ = applied

    rows = lake.pyiceberg_rows("Limits")

    assert [r["n"] for r in rows] == [Decimal(NUMERIC_MIN), Decimal("0.000000001"), Decimal(NUMERIC_MAX)]


def test_timestamps_and_dates_at_year_1_and_year_9999_land_exactly(applied):
    lake, _ = applied

    rows = {r["id"]: r for r in lake.pyiceberg_rows("Limits")}

    assert rows[INT64_MIN]["ts"] == datetime(1, 1, 1, tzinfo=timezone.utc)
    assert rows[INT64_MAX]["ts"] == datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)
    assert (rows[INT64_MIN]["d"], rows[INT64_MAX]["d"]) == (date(1, 1, 1), date(9999, 12, 31))
    texts = lake.spark.sql(f"SELECT CAST(ts AS STRING) AS ts FROM {lake.table('Limits')} ORDER BY id").collect()
    assert [r.ts for r in texts] == ["0001-01-01 00:00:00", "1970-01-01 00:00:00", "9999-12-31 23:59:59.999999"]


def test_instants_and_dates_beyond_year_9999_land_where_iceberg_holds_them(applied):
    lake, _ = applied

    [row] = lake.spark.sql(f"SELECT CAST(ts AS STRING) AS ts, CAST(d AS STRING) AS d FROM {lake.table('Far')}").collect()

    assert (row.ts, row.d) == ("+10000-01-01 00:00:00", "+294276-12-31")


def test_nan_and_both_infinities_land_as_themselves(applied):
    lake, _ = applied

    rows = {r["id"]: r["f"] for r in lake.pyiceberg_rows("Limits")}

    assert math.isnan(rows[INT64_MAX]) and rows[INT64_MIN] == math.inf and rows[0] == -math.inf


def test_an_empty_string_and_null_stay_distinct(applied):
    lake, _ = applied

    rows = {r["id"]: (r["s"], r["big"]) for r in lake.pyiceberg_rows("Limits")}

    assert rows[INT64_MAX][0] == "" and rows[INT64_MIN] == (None, None) and rows[0][1] == ""


def test_json_nested_100_deep_lands_as_its_exact_text(applied):
    lake, _ = applied

    rows = {r["id"]: r["j"] for r in lake.pyiceberg_rows("Limits")}

    assert json.loads(rows[INT64_MAX]) == DEEP and rows[INT64_MAX] == json.dumps(DEEP, separators=(",", ":"))
    assert rows[0] == "{}"


def test_a_ten_megabyte_string_lands_whole(applied):
    lake, _ = applied

    [row] = lake.spark.sql(f"SELECT length(big) AS length, sha2(big, 256) AS digest FROM "
                           f"{lake.table('Limits')} WHERE id = {INT64_MAX}").collect()

    assert (row.length, row.digest) == (len(TEN_MB), hashlib.sha256(TEN_MB.encode()).hexdigest())


def test_values_beyond_their_types_are_dead_letters_naming_column_value_and_type(applied):
    lake, result = applied

    dead = {int(r.keys["id"]): r.reason for r in lake.spark.table(result.dead_letter_table).collect()}

    assert dead == {
        1: f"column 'n' value '{BEYOND[1][1]}' is not a decimal(38,9)",
        2: "column 'n' value '0.0000000001' is not a decimal(38,9)",
        4: f"column 'i' value '{INT64_MAX + 1}' is not a bigint",
    }
    assert {r["id"] for r in lake.pyiceberg_rows("Limits")} == set(GOOD)
