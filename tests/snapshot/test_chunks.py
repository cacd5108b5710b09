"""Snapshot chunks by primary key, against the real PostgreSQL 15 and MariaDB 10.11 on 127.0.0.1.

Each database gets a throwaway database for this module (PostgreSQL: user postgres, trust auth;
MariaDB: root without password), dropped at its end. A test fails, never skips, when a server
is down: start it (``.ci/ensure-postgres``; MariaDB: ``service mariadb start``).

The chunk tests read every chunk's rows with the chunk's own predicate, from the plan as it
comes back from JSON (as a Spark job gets it), and check the union: every row once, no chunk
over ``chunk_size``. Text keys use collations that order differently from Python
(PostgreSQL ICU ``und-x-icu``, MariaDB ``utf8mb4_unicode_ci``).
"""

from __future__ import annotations

import math
import uuid
from collections import Counter
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from airflow_cdc.model import UTC, InvalidIdentifierError
from airflow_cdc.sources.snapshot import (
    MARIADB,
    POSTGRESQL,
    ChunkPlan,
    KeyColumn,
    NoUsableKeyError,
    SnapshotChunkError,
    UnsupportedKeyTypeError,
    chunk_predicate,
    discover_key_columns,
    parametrized_predicate,
    plan_chunks,
)

# Column types by role, per database. Text keys get a collation whose order is not Python's.
TYPES = {
    "postgresql": {
        "int": "integer",
        "bigint": "bigint",
        "text": 'varchar(40) COLLATE "und-x-icu"',
        "bintext": "varchar(40)",  # the database's C.UTF-8: every distinct string is distinct
        "decimal": "numeric(12,4)",
        "date": "date",
        "timestamp": "timestamp(6)",
        "timestamptz": "timestamptz(6)",
        "float": "double precision",
        "payload": "varchar(40)",
    },
    "mariadb": {
        "int": "int",
        "bigint": "bigint",
        "text": "varchar(40) COLLATE utf8mb4_unicode_ci",
        "bintext": "varchar(40) COLLATE utf8mb4_bin",
        "decimal": "decimal(12,4)",
        "date": "date",
        "timestamp": "datetime(6)",
        "timestamptz": "timestamp(6)",
        "float": "double",
        "payload": "varchar(40)",
    },
}


class Database:
    """One throwaway database: its DB-API connection (autocommit) and dialect."""

    def __init__(self, dialect, connection):
        self.dialect = dialect
        self.connection = connection
        self.name = dialect.name

    def execute(self, sql, params=None):
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)

    def rows(self, sql, params=None) -> list[tuple]:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return [tuple(row) for row in cursor.fetchall()]

    def create(self, table, columns: dict[str, str], primary_key=(), nullable=()):
        """``columns``: name -> role in :data:`TYPES`; NOT NULL unless named in ``nullable``."""
        q = self.dialect.quote
        defs = [
            f"{q('column', name)} {TYPES[self.name][role]}{'' if name in nullable else ' NOT NULL'}"
            for name, role in columns.items()
        ]
        if primary_key:
            defs.append(f"PRIMARY KEY ({', '.join(q('column', c) for c in primary_key)})")
        self.execute(f"DROP TABLE IF EXISTS {q('table', table)}")
        self.execute(f"CREATE TABLE {q('table', table)} ({', '.join(defs)})")

    def insert(self, table, columns, rows):
        """Insert rows; aware datetimes go in as UTC wall clock (MariaDB's session is +00:00)."""
        if self.name == "mariadb":
            rows = [
                tuple(v.astimezone(UTC).replace(tzinfo=None) if _aware(v) else v for v in row)
                for row in rows
            ]
        names = ", ".join(self.dialect.quote("column", c) for c in columns)
        relation = self.dialect.quote("table", table)
        with self.connection.cursor() as cursor:
            if self.name == "postgresql":  # one statement per page, not one per row
                from psycopg2.extras import execute_values

                execute_values(cursor, f"INSERT INTO {relation} ({names}) VALUES %s", rows)
            else:  # pymysql batches executemany into multi-row INSERTs itself
                marks = ", ".join(["%s"] * len(columns))
                cursor.executemany(f"INSERT INTO {relation} ({names}) VALUES ({marks})", rows)


def _aware(value) -> bool:
    return isinstance(value, datetime) and value.tzinfo is not None


@pytest.fixture(scope="module")
def postgresql_database():
    import psycopg2

    name = f"cdc_snapshot_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="postgres")
    except psycopg2.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable on 127.0.0.1:5432 (user postgres, trust auth): start it "
            f"with .ci/ensure-postgres. Cause: {exc}",
            pytrace=False,
        )
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    connection = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname=name)
    connection.autocommit = True
    yield Database(POSTGRESQL, connection)
    connection.close()
    with admin.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


@pytest.fixture(scope="module")
def mariadb_database():
    import pymysql

    name = f"cdc_snapshot_{uuid.uuid4().hex[:12]}"
    try:
        connection = pymysql.connect(
            host="127.0.0.1", port=3306, user="root", charset="utf8mb4", autocommit=True
        )
    except pymysql.err.OperationalError as exc:
        pytest.fail(
            f"MariaDB is not reachable on 127.0.0.1:3306 (root without password): start it "
            f"with `service mariadb start`. Cause: {exc}",
            pytrace=False,
        )
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        cursor.execute(f"USE `{name}`")
        cursor.execute("SET time_zone = '+00:00'")
    yield Database(MARIADB, connection)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    connection.close()


@pytest.fixture(params=["postgresql", "mariadb"])
def db(request) -> Database:
    return request.getfixturevalue(f"{request.param}_database")


def key_sql(db, plan) -> str:
    return ", ".join(db.dialect.quote("column", c.name) for c in plan.key_columns)


def chunk_rows(db, plan) -> list[list[tuple]]:
    """The key of every row each chunk's predicate selects, chunk by chunk, read from the plan
    as it comes back from JSON (as the Spark job gets it)."""
    shipped = ChunkPlan.from_json(plan.to_json())
    return [
        db.rows(f"SELECT {key_sql(db, shipped)} FROM {shipped.relation} WHERE {chunk.predicate}")
        for chunk in shipped.chunks
    ]


def assert_every_row_once_in_full_chunks(db, plan, table_rows):
    per_chunk = chunk_rows(db, plan)
    seen = Counter(row for rows in per_chunk for row in rows)
    assert [row for row, n in seen.items() if n > 1] == [], "rows in more than one chunk"
    assert set(table_rows) - set(seen) == set(), "rows in no chunk"
    assert set(seen) == set(table_rows)
    sizes = [len(rows) for rows in per_chunk]
    assert len(sizes) == math.ceil(len(table_rows) / plan.chunk_size)
    assert all(size == plan.chunk_size for size in sizes[:-1])
    assert 1 <= sizes[-1] <= plan.chunk_size


def all_keys(db, plan) -> list[tuple]:
    return db.rows(f"SELECT {key_sql(db, plan)} FROM {plan.relation}")


# --- chunks cover every row once ---------------------------------------------------------------


def test_chunks_of_an_integer_key_cover_every_row_once(db):
    db.create("int_keyed", {"id": "bigint", "payload": "payload"}, ["id"])
    db.insert("int_keyed", ["id", "payload"], [(i * 7 - 9000, f"p{i}") for i in range(2500)])

    plan = plan_chunks(db.connection, db.dialect, "int_keyed", chunk_size=300)

    assert plan.max_key == (2499 * 7 - 9000,)
    assert plan.chunks[0].lower is None and plan.chunks[-1].upper == plan.max_key
    assert_every_row_once_in_full_chunks(db, plan, all_keys(db, plan))


# Distinct even case- and accent-insensitively; Python orders them unlike both collations.
WORDS = ["apple", "Banana", "éclair", "Zucchini", "cherry", "Österreich", "damson", "_under",
         "Yam", "ærø"]


def test_chunks_of_a_text_and_integer_key_follow_the_database_collation(db):
    db.create("text_keyed", {"name": "text", "n": "int", "payload": "payload"}, ["name", "n"])
    rows = [(f"{w}{j}", n, "x") for w in WORDS for j in range(20) for n in range(10)]
    db.insert("text_keyed", ["name", "n", "payload"], rows)
    collated = [r[0] for r in db.rows("SELECT DISTINCT name FROM text_keyed ORDER BY name")]
    assert collated != sorted(collated), "the collation must order text unlike Python for this test"

    plan = plan_chunks(db.connection, db.dialect, "text_keyed", chunk_size=173)

    assert [c.name for c in plan.key_columns] == ["name", "n"]
    assert_every_row_once_in_full_chunks(db, plan, all_keys(db, plan))


T0 = datetime(2024, 3, 31, 0, 59, 59, 999_999, tzinfo=UTC)


def test_chunks_of_a_three_column_key_with_an_instant_cover_every_row_once(db):
    db.create("instant_keyed", {"tenant": "int", "at": "timestamptz", "code": "text"},
              ["tenant", "at", "code"])
    rows = [
        (tenant, T0 + timedelta(seconds=s, microseconds=s * 13), f"{WORDS[c % 10]}{c}")
        for tenant in range(3) for s in range(50) for c in range(15)
    ]
    db.insert("instant_keyed", ["tenant", "at", "code"], rows)

    plan = plan_chunks(db.connection, db.dialect, "instant_keyed", chunk_size=97)

    (greatest_code,) = db.rows("SELECT MAX(code) FROM instant_keyed WHERE tenant = 2")[0]
    latest = T0 + timedelta(seconds=49, microseconds=49 * 13)  # microseconds kept: ...:50.000636
    assert plan.max_key == (2, latest, greatest_code)
    assert plan.max_key[1].tzinfo == UTC and plan.max_key[1].microsecond == 636
    assert_every_row_once_in_full_chunks(db, plan, all_keys(db, plan))


def test_chunks_of_a_date_wall_clock_and_decimal_key_cover_every_row_once(db):
    db.create("wall_keyed", {"day": "date", "at": "timestamp", "price": "decimal"},
              ["day", "at", "price"])
    base = datetime(1999, 12, 31, 23, 59, 58, 500_000)
    rows = [
        (date(2024, 2, 28) + timedelta(days=d), base + timedelta(microseconds=a * 250_001),
         Decimal(p) / Decimal("8"))
        for d in range(4) for a in range(25) for p in range(-10, 10)
    ]
    db.insert("wall_keyed", ["day", "at", "price"], rows)

    plan = plan_chunks(db.connection, db.dialect, "wall_keyed", chunk_size=333)

    latest = base + timedelta(microseconds=24 * 250_001)
    assert plan.max_key == (date(2024, 3, 2), latest, Decimal("1.125"))
    assert_every_row_once_in_full_chunks(db, plan, all_keys(db, plan))


def test_rows_inserted_above_the_captured_maximum_are_in_no_chunk(db):
    db.create("growing", {"id": "int", "payload": "payload"}, ["id"])
    db.insert("growing", ["id", "payload"], [(i, "before") for i in range(1, 501)])
    plan = plan_chunks(db.connection, db.dialect, "growing", chunk_size=64)

    db.insert("growing", ["id", "payload"], [(i, "after") for i in range(501, 601)])

    seen = {row for rows in chunk_rows(db, plan) for row in rows}
    assert seen == {(i,) for i in range(1, 501)}


def test_an_empty_table_gives_no_chunks(db):
    db.create("empty", {"id": "int"}, ["id"])

    plan = plan_chunks(db.connection, db.dialect, "empty", chunk_size=10)

    assert (plan.max_key, plan.chunks, plan.predicates()) == (None, (), [])
    assert ChunkPlan.from_json(plan.to_json()) == plan


def test_a_one_row_table_gives_one_chunk(db):
    db.create("single", {"id": "int", "name": "text"}, ["id", "name"])
    db.insert("single", ["id", "name"], [(42, "it's")])

    plan = plan_chunks(db.connection, db.dialect, "single", chunk_size=10)

    assert [(c.index, c.lower, c.upper) for c in plan.chunks] == [(0, None, (42, "it's"))]
    assert chunk_rows(db, plan) == [[(42, "it's")]]


def test_a_table_of_whole_chunks_ends_at_its_maximum_without_an_empty_chunk(db):
    db.create("whole", {"id": "int"}, ["id"])
    db.insert("whole", ["id"], [(i,) for i in range(1, 101)])

    plan = plan_chunks(db.connection, db.dialect, "whole", chunk_size=25)

    assert [c.upper for c in plan.chunks] == [(25,), (50,), (75,), (100,)]
    assert [len(rows) for rows in chunk_rows(db, plan)] == [25, 25, 25, 25]


def test_a_chunk_size_below_one_is_refused(db):
    db.create("sized", {"id": "int"}, ["id"])
    for bad in (0, -5, 2.5, True):
        with pytest.raises(SnapshotChunkError, match=r"chunk_size .* is not a positive int: give"):
            plan_chunks(db.connection, db.dialect, "sized", chunk_size=bad)


# --- key discovery ------------------------------------------------------------------------------


def test_primary_key_columns_are_found_in_key_order_with_their_kinds(db):
    db.create("ordered", {"a": "text", "b": "timestamptz", "c": "decimal", "d": "date"},
              ["c", "a", "b"])

    columns = discover_key_columns(db.connection, db.dialect, "ordered")

    assert [(c.name, c.kind) for c in columns] == [
        ("c", "decimal"), ("a", "text"), ("b", "timestamptz")
    ]
    if db.name == "mariadb":  # text literals are converted to the column's collation
        assert (columns[1].charset, columns[1].collation) == ("utf8mb4", "utf8mb4_unicode_ci")


def test_a_table_without_a_primary_key_is_refused_naming_key_columns(db):
    db.create("keyless", {"id": "int", "payload": "payload"})

    with pytest.raises(NoUsableKeyError) as refused:
        plan_chunks(db.connection, db.dialect, "keyless", chunk_size=10)

    assert "keyless has no primary key: pass key_columns= naming unique NOT NULL columns" in str(
        refused.value
    )


def test_named_key_columns_chunk_a_table_without_a_primary_key(db):
    db.create("keyless_named", {"id": "int", "payload": "payload"})
    db.insert("keyless_named", ["id", "payload"], [(i, "x") for i in range(30)])

    plan = plan_chunks(db.connection, db.dialect, "keyless_named", chunk_size=7, key_columns=["id"])

    assert_every_row_once_in_full_chunks(db, plan, all_keys(db, plan))


def test_a_nullable_key_column_is_refused(db):
    db.create("nullable_key", {"id": "int", "payload": "payload"}, nullable=["id"])

    with pytest.raises(NoUsableKeyError, match=r"'id' .* allows NULL.*NOT NULL columns in key_columns="):
        plan_chunks(db.connection, db.dialect, "nullable_key", chunk_size=10, key_columns=["id"])


def test_a_key_column_of_a_float_type_is_refused(db):
    db.create("float_keyed", {"x": "float"}, ["x"])

    with pytest.raises(UnsupportedKeyTypeError, match=r"'x' .* has type 'double.*pass key_columns="):
        plan_chunks(db.connection, db.dialect, "float_keyed", chunk_size=10)


def test_a_missing_table_is_refused(db):
    with pytest.raises(NoUsableKeyError, match=r"no_such_table is not visible to this .* connection"):
        plan_chunks(db.connection, db.dialect, "no_such_table", chunk_size=10)


class RefusesAllSql:
    """A connection that fails the test if anything is asked of it."""

    def cursor(self):
        raise AssertionError("SQL was run before the identifiers were validated")


@pytest.mark.parametrize("dialect", [POSTGRESQL, MARIADB], ids=lambda d: d.name)
@pytest.mark.parametrize(
    ("names", "bad"),
    [
        ({"table": "orders; drop table orders"}, "orders; drop table orders"),
        ({"table": "orders", "schema": 'public"."x'}, 'public"."x'),
        ({"table": "orders", "schema": "app`db"}, "app`db"),
        ({"table": "orders", "key_columns": ["id", "x' OR '1'='1"]}, "x' OR '1'='1"),
        ({"table": "ördërs"}, "ördërs"),
        ({"table": ""}, ""),
    ],
    ids=["table", "schema-double-quote", "schema-backtick", "key-column", "non-ascii", "empty"],
)
def test_hostile_identifiers_are_refused_before_any_sql(dialect, names, bad):
    with pytest.raises(InvalidIdentifierError) as refused:
        plan_chunks(RefusesAllSql(), dialect, chunk_size=10, **names)

    assert f"{bad!r} is not an identifier: use letters, digits and _" in str(refused.value)


# --- literals -----------------------------------------------------------------------------------

HOSTILE = [
    "it's",
    "'",
    "''",
    "back\\slash",
    "\\",
    "\\'",
    "'; drop table t; --",
    "\\'; drop table t; --",
    '"double" `back`',
    "ünïcödé ✓ 日本 𝄞",
    "",
    "line\nbreak\ttab\r",
    "%s %(x)s ? $1",
    "trailing space ",
    "\x1a ctrl-z",
]


@pytest.fixture(params=["standard", "backslash-quirk"])
def escaping(db, request):
    """The session's string-escaping mode: the literal must mean the same in both."""
    if db.name == "postgresql":
        mode = "off" if request.param == "standard" else "on"  # off: backslashes escape in '...'
        db.execute(f"SET standard_conforming_strings = {mode}")
        yield db
        db.execute("SET standard_conforming_strings = on")
    else:
        (old,) = db.rows("SELECT @@SESSION.sql_mode")[0]
        if request.param == "backslash-quirk":
            db.execute("SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',NO_BACKSLASH_ESCAPES')")
        yield db
        db.execute("SET SESSION sql_mode = %s", (old,))


@pytest.mark.parametrize("text", HOSTILE, ids=[repr(t) for t in HOSTILE])
def test_hostile_text_literals_round_trip(escaping, text):
    db = escaping
    collated = {}
    if db.name == "mariadb":
        collated = {"charset": "utf8mb4", "collation": "utf8mb4_unicode_ci"}

    bare = db.rows(f"SELECT {db.dialect.literal(text, 'text')}")
    converted = db.rows(f"SELECT {db.dialect.literal(text, 'text', **collated)}")

    assert bare == converted == [(text,)]


def test_hostile_text_literals_find_their_rows(db):
    db.create("hostile", {"k": "bintext"}, ["k"])
    db.insert("hostile", ["k"], [(t,) for t in HOSTILE])
    (column,) = discover_key_columns(db.connection, db.dialect, "hostile")

    def literal(text):
        return db.dialect.literal(text, "text", charset=column.charset, collation=column.collation)

    found = {text: db.rows(f"SELECT k FROM hostile WHERE k = {literal(text)}") for text in HOSTILE}

    assert found == {text: [(text,)] for text in HOSTILE}


def test_a_nul_character_round_trips_on_mariadb_and_is_refused_on_postgresql(db):
    text = "nul\x00inside"
    if db.name == "mariadb":
        assert db.rows(f"SELECT {db.dialect.literal(text, 'text')}") == [(text,)]
    else:
        with pytest.raises(UnsupportedKeyTypeError, match="NUL character, which PostgreSQL text"):
            db.dialect.literal(text, "text")


TYPED = [
    ("integer", 0),
    ("integer", -(2**63)),
    ("integer", 2**63 - 1),
    ("decimal", Decimal("12.3400")),
    ("decimal", Decimal("-0.000001")),
    ("decimal", Decimal("1E+3")),
    ("date", date(2024, 2, 29)),
    ("date", date(1, 1, 1)),
    ("timestamp", datetime(2024, 2, 29, 23, 59, 59, 999_999)),
    ("timestamp", datetime(1000, 1, 1, 0, 0, 0, 1)),
    ("timestamptz", datetime(2024, 3, 31, 1, 0, 0, 1, tzinfo=UTC)),
    ("timestamptz", datetime(2024, 3, 31, 6, 30, 0, 999_999, tzinfo=timezone(timedelta(hours=5.5)))),
    ("boolean", True),
    ("boolean", False),
]


@pytest.mark.parametrize(("kind", "value"), TYPED, ids=[f"{k}-{v}" for k, v in TYPED])
def test_typed_literals_round_trip(db, kind, value):
    ((back,),) = db.rows(f"SELECT {db.dialect.literal(value, kind)}")

    if kind == "timestamptz" and db.name == "mariadb":  # FROM_UNIXTIME gives session (+00:00) time
        back = back.replace(tzinfo=UTC)
    assert back == value
    if kind == "decimal" and value == Decimal("12.3400"):
        assert str(back) == "12.3400"
    if kind in ("timestamp", "timestamptz"):
        assert back.microsecond == value.microsecond


def test_uuid_literals_round_trip_on_postgresql(postgresql_database):
    value = uuid.UUID("00000000-0000-4000-8000-0000000000ff")

    ((back,),) = postgresql_database.rows(f"SELECT {POSTGRESQL.literal(value, 'uuid')}")

    assert uuid.UUID(back) == value


def test_an_instant_literal_matches_its_stored_row_in_any_session_time_zone(db):
    instant = datetime(2024, 10, 27, 0, 30, 0, 123_456, tzinfo=UTC)
    db.create("instants", {"at": "timestamptz"}, ["at"])
    db.insert("instants", ["at"], [(instant,)])
    where = f"at = {db.dialect.literal(instant, 'timestamptz')}"
    zone = "SET TIME ZONE 'Asia/Kolkata'" if db.name == "postgresql" else "SET time_zone = '+05:30'"
    reset = "SET TIME ZONE 'UTC'" if db.name == "postgresql" else "SET time_zone = '+00:00'"

    db.execute(zone)
    try:
        found = db.rows(f"SELECT COUNT(*) FROM instants WHERE {where}")
    finally:
        db.execute(reset)

    assert found == [(1,)]


REFUSED = [
    ("integer", 1.5),
    ("integer", True),
    ("integer", "5"),
    ("decimal", 1.5),
    ("decimal", Decimal("NaN")),
    ("text", b"bytes"),
    ("text", "lone \ud800 surrogate"),
    ("date", datetime(2024, 1, 1)),
    ("timestamp", datetime(2024, 1, 1, tzinfo=UTC)),
    ("timestamptz", datetime(2024, 1, 1)),
    ("boolean", 1),
    ("interval", timedelta(seconds=1)),
]


@pytest.mark.parametrize("dialect", [POSTGRESQL, MARIADB], ids=lambda d: d.name)
@pytest.mark.parametrize(("kind", "value"), REFUSED, ids=[f"{k}-{v!r}" for k, v in REFUSED])
def test_a_value_of_another_type_is_refused(dialect, kind, value):
    with pytest.raises(UnsupportedKeyTypeError) as refused:
        dialect.literal(value, kind)

    message = str(refused.value)
    assert repr(value) in message or repr(kind) in message
    assert "give" in message or "is not one of" in message


def test_a_uuid_is_refused_on_mariadb():
    with pytest.raises(UnsupportedKeyTypeError, match="uuid keys are supported on PostgreSQL only"):
        MARIADB.literal(uuid.uuid4(), "uuid")


# --- predicates ---------------------------------------------------------------------------------

K1 = KeyColumn("k1", "integer", "integer")
K2 = KeyColumn("k2", "text", "text")
K3 = KeyColumn("k3", "date", "date")


def test_predicates_use_the_expanded_row_comparison_for_one_two_and_three_columns():
    one = chunk_predicate(POSTGRESQL, [K1], (1,), (9,))
    two = chunk_predicate(POSTGRESQL, [K1, K2], (1, "a"), (9, "z"))
    three = chunk_predicate(
        POSTGRESQL, [K1, K2, K3], (1, "a", date(2024, 1, 1)), (9, "z", date(2024, 12, 31))
    )
    first = chunk_predicate(POSTGRESQL, [K1, K2], None, (9, "z"))

    assert one == '(("k1" > 1)) AND (("k1" <= 9))'
    assert two == (
        "((\"k1\" > 1) OR (\"k1\" = 1 AND \"k2\" > E'a')) AND "
        "((\"k1\" < 9) OR (\"k1\" = 9 AND \"k2\" <= E'z'))"
    )
    assert three == (
        "((\"k1\" > 1) OR (\"k1\" = 1 AND \"k2\" > E'a') OR "
        "(\"k1\" = 1 AND \"k2\" = E'a' AND \"k3\" > DATE '2024-01-01')) AND "
        "((\"k1\" < 9) OR (\"k1\" = 9 AND \"k2\" < E'z') OR "
        "(\"k1\" = 9 AND \"k2\" = E'z' AND \"k3\" <= DATE '2024-12-31'))"
    )
    assert first == "((\"k1\" < 9) OR (\"k1\" = 9 AND \"k2\" <= E'z'))"


def test_parametrized_predicates_use_the_paramstyle_placeholders():
    instant = KeyColumn("at", "timestamptz", "timestamp")
    at = datetime(2024, 1, 1, 0, 0, 0, 5, tzinfo=UTC)

    formatted = parametrized_predicate(MARIADB, [K1, instant], (1, at), (2, at), "format")
    qmark = parametrized_predicate(POSTGRESQL, [K1, K2], None, (2, "it's"), "qmark")

    assert formatted == (
        "((`k1` > %s) OR (`k1` = %s AND `at` > FROM_UNIXTIME(%s))) AND "
        "((`k1` < %s) OR (`k1` = %s AND `at` <= FROM_UNIXTIME(%s)))",
        [1, 1, Decimal("1704067200.000005"), 2, 2, Decimal("1704067200.000005")],
    )
    assert qmark == ('(("k1" < ?) OR ("k1" = ? AND "k2" <= ?))', [2, 2, "it's"])


def test_parametrized_predicates_select_the_same_rows_as_the_literal_ones(db):
    db.create("params", {"tenant": "int", "at": "timestamptz", "code": "text"},
              ["tenant", "at", "code"])
    rows = [(t, T0 + timedelta(microseconds=s), f"{WORDS[s % 10]}'\\{s}")
            for t in range(3) for s in range(40)]
    db.insert("params", ["tenant", "at", "code"], rows)
    plan = plan_chunks(db.connection, db.dialect, "params", chunk_size=17)

    by_params = []
    for chunk in plan.chunks:
        sql, params = plan.parametrized(chunk)
        by_params.append(db.rows(f"SELECT tenant, at, code FROM params WHERE {sql}", params))

    by_literals = [db.rows(f"SELECT tenant, at, code FROM params WHERE {chunk.predicate}")
                   for chunk in plan.chunks]
    assert by_params == by_literals and sum(map(len, by_params)) == len(rows)


def test_mariadb_chunk_predicates_range_scan_the_primary_key(mariadb_database):
    db = mariadb_database
    db.create("scanned", {"name": "text", "n": "int"}, ["name", "n"])
    rows = [(f"{w}{j}", n) for w in WORDS for j in range(10) for n in range(10)]
    db.insert("scanned", ["name", "n"], rows)
    db.execute("ANALYZE TABLE scanned")
    plan = plan_chunks(db.connection, db.dialect, "scanned", chunk_size=100)

    plans = [db.rows(f"EXPLAIN SELECT * FROM scanned WHERE {chunk.predicate}")[0]
             for chunk in plan.chunks[1:-1]]

    assert {(row[3], row[5]) for row in plans} == {("range", "PRIMARY")}


# --- the plan as JSON ---------------------------------------------------------------------------


def test_a_plan_survives_json_exactly(db):
    db.create("shipped", {"price": "decimal", "at": "timestamptz", "name": "text"},
              ["price", "at", "name"])
    rows = [(Decimal(i) / Decimal(4), T0 + timedelta(microseconds=i), f"{WORDS[i % 10]}\\'{i}")
            for i in range(50)]
    db.insert("shipped", ["price", "at", "name"], rows)
    plan = plan_chunks(db.connection, db.dialect, "shipped", chunk_size=8)

    text = plan.to_json()
    back = ChunkPlan.from_json(text)

    assert back == plan and back.to_json() == text
    assert [str(c.upper[0]) for c in back.chunks] == [str(c.upper[0]) for c in plan.chunks]
    assert str(back.max_key[0]) == "12.2500"
    assert back.max_key[1] == T0 + timedelta(microseconds=49) and back.max_key[1].tzinfo == UTC


@pytest.mark.parametrize("kind", ["timestamp", "timestamptz"])
def test_timestamp_literals_of_years_before_1000_round_trip_on_postgresql(postgresql_database, kind):
    value = datetime(5, 3, 1, 12, 0, 0, 7, tzinfo=UTC if kind == "timestamptz" else None)

    ((back,),) = postgresql_database.rows(f"SELECT {POSTGRESQL.literal(value, kind)}")

    assert back == value
