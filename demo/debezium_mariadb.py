"""``make demo-debezium-mariadb``: real MariaDB through Debezium's MariaDB connector into Iceberg by real DAG runs.

The same demo as ``make demo-debezium`` (``demo/debezium.py``: the capture process, the
windows, the restart and the comparison are its), on MariaDB:

1. Recreate the database ``cdc_demo_dbz`` on the MariaDB of 127.0.0.1:3306 (root without a
   password; ``log_bin``, ``binlog_format=ROW``, ``binlog_row_image=FULL``, ``server_id``:
   ``.ci/ensure-mariadb``): ``customers`` (a decimal, a ``TIMESTAMP(6)``, a date, a boolean,
   a double, a 20 KB text) and ``orders`` (a ``DATETIME(6)``), a few rows each.
2. Start the capture (``airflow-cdc capture debezium`` with
   ``io.debezium.connector.mariadb.MariaDbConnector``, which runs on a Debezium classpath of
   its own, fetched once: :mod:`airflow_cdc.capture.classpath`) in its own process, with
   heartbeats and transaction metadata; it runs for the whole demo.
3. One workload phase per window, each followed by the window's DAG run
   (``dags/debezium_to_iceberg.py`` through ``dag.test``):

   ===  =============================================================================
   W1   the initial snapshot, then inserts
   W2   updates, deletes, a key change (one row event: a delete of the old key and a
        create of the new one at the same binlog position)
   W3   a transaction over both tables, then ``CREATE TABLE shipments`` with rows (a
        table added mid-run, through the schema history); the capture is killed
        (``kill -9``) once the window is planned and started again: its changes since
        Debezium last flushed its offsets come again, with new offsets
   W4   every order deleted by one statement (one multi-row binlog event), new orders (one
        reusing a deleted key), a multi-row update; the redelivered changes are in this
        window's files: dropped as duplicates
   ===  =============================================================================

4. Compare every target (``current.cdc_demo_dbz_<table>``) with its table read straight from
   MariaDB: every column, typed and exact (a decimal with its scale, a ``TIMESTAMP`` as the
   instant in UTC, a ``DATETIME`` as its wall-clock reading, ``BOOLEAN`` as the
   ``TINYINT(1)`` it is).

Last line: ``demo-debezium-mariadb: OK windows=<n> events=<n> transactions=<n>
duplicates=<n> target_rows=<n> mismatches=0`` (transactions: distinct GTIDs of the streamed
changes). Everything lives under ``.demo-debezium-mariadb/`` (recreated each time).
"""

from __future__ import annotations

import random
import string
import sys
from datetime import timezone
from pathlib import Path

from demo.debezium import OFFSET_FLUSH_MS, Phase, SourceDatabase, main, sink_config

DATABASE = "cdc_demo_dbz"
STREAM_ID = "dbz_mariadb_demo"
TOPIC_PREFIX = "demo_mariadb"
KEY_COLUMNS = {f"{DATABASE}.customers": ["id"], f"{DATABASE}.orders": ["id"],
               f"{DATABASE}.shipments": ["id"]}
# The replica id the connector registers with; unique among the server's replicas.
SERVER_ID = 184_054
BIG_TEXT = "".join(random.Random(22).choices(string.ascii_letters + string.digits, k=20_000))
SCHEMA = (
    "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(64) NOT NULL, "
    "balance DECIMAL(12,2), doc MEDIUMTEXT, seen TIMESTAMP(6) NULL DEFAULT NULL, born DATE, "
    "vip BOOLEAN NOT NULL DEFAULT FALSE, score DOUBLE)",
    "CREATE TABLE orders (id INT PRIMARY KEY, customer_id INT NOT NULL, quantity INT NOT NULL, "
    "amount DECIMAL(10,2), placed_at DATETIME(6))",
    f"INSERT INTO customers VALUES "
    f"(1, 'ada', 10.50, '{BIG_TEXT}', '2025-01-06 08:00:00.123456', '1815-12-10', TRUE, 2.75), "
    f"(2, 'bob', NULL, 'short', NULL, NULL, FALSE, NULL), "
    f"(3, 'cyd', 9999999999.99, NULL, '2025-01-06 09:30:00', '1990-02-28', FALSE, -0.5)",
    "INSERT INTO orders VALUES (1, 1, 10, 20.00, '2025-01-06 08:01:02.5'), "
    "(2, 3, 20, 0.10, '2025-01-06 08:02:00'), (3, 2, 1, NULL, NULL)",
)


def phases() -> list[Phase]:
    """The workload, one phase per window (W1 also holds the initial snapshot)."""
    return [
        Phase("the initial snapshot, then inserts", (
            "INSERT INTO customers VALUES (4, 'dee', 0.01, 'fourth', '2025-01-07 08:00:00', "
            "'2001-01-01', FALSE, 1234.5625)",
            "INSERT INTO orders VALUES (4, 4, 3, 12.34, '2025-01-07 10:00:00.000001'), "
            "(5, 1, 7, 99.99, '2025-01-07 11:00:00')",
        )),
        Phase("updates, deletes, a key change", (
            "UPDATE customers SET name = 'ada l.', balance = 10.75, score = 3.25 WHERE id = 1",
            "UPDATE orders SET quantity = 11, amount = 22.20 WHERE id = 1",
            "DELETE FROM orders WHERE id = 2",
            "DELETE FROM customers WHERE id = 2",
            "UPDATE customers SET id = 30 WHERE id = 3",
        )),
        Phase("a transaction over both tables, then a table added mid-run with rows; the "
              "capture is killed once the window is planned, and started again", (
            "BEGIN; "
            "INSERT INTO customers VALUES (5, 'eve', 1234.5, NULL, NOW(6), '1970-01-01', TRUE, 0); "
            "INSERT INTO orders VALUES (6, 5, 2, 5.00, '2025-01-08 09:00:00'); "
            "UPDATE orders SET quantity = quantity + 1 WHERE id = 4; "
            "UPDATE customers SET vip = TRUE WHERE id = 30; "
            "COMMIT",
            "CREATE TABLE shipments (id INT PRIMARY KEY, order_id INT NOT NULL, carrier "
            "VARCHAR(32), weight DECIMAL(8,3), shipped_at TIMESTAMP(6) NULL DEFAULT NULL)",
            "INSERT INTO shipments VALUES (1, 1, 'post', 1.250, '2025-01-08 12:00:00'), "
            "(2, 4, NULL, 0.005, NULL)",
            "UPDATE shipments SET carrier = 'courier' WHERE id = 2",
        ), restart_capture=True),
        Phase("every order deleted by one statement, new orders (one reusing a deleted key), "
              "a multi-row update", (
            "DELETE FROM orders",
            "INSERT INTO orders VALUES (1, 5, 9, 90.00, '2025-01-09 07:00:00'), "
            "(7, 30, 1, 0.99, '2025-01-09 07:30:00')",
            "UPDATE shipments SET weight = weight * 2",
        )),
    ]


# --- MariaDB ----------------------------------------------------------------------------------
def connect(database: str | None = DATABASE):
    """A connection as root on 127.0.0.1:3306, autocommit, several statements per call, the
    session in UTC (so TIMESTAMP values read back as UTC wall clock)."""
    import pymysql
    from pymysql.constants import CLIENT

    try:
        return pymysql.connect(host="127.0.0.1", port=3306, user="root", password="",
                               database=database, autocommit=True,
                               client_flag=CLIENT.MULTI_STATEMENTS,
                               init_command="SET time_zone = '+00:00'")
    except pymysql.err.OperationalError as error:
        raise SystemExit(f"demo-debezium-mariadb: MariaDB is not reachable on 127.0.0.1:3306 as "
                         f"root without a password ({error}): run `make services`") from None


def execute(sql: str, database: str | None = DATABASE) -> None:
    """Run ``sql`` (one statement, or several separated by ``;``) and consume every result."""
    conn = connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            while cur.nextset():
                pass
    finally:
        conn.close()


def recreate_database() -> None:
    """The demo database afresh, with its tables and first rows."""
    execute(f"DROP DATABASE IF EXISTS {DATABASE}; CREATE DATABASE {DATABASE}", None)
    for statement in SCHEMA:
        execute(statement)


def source_tables() -> dict[str, dict]:
    """Every table of the demo database, read straight from MariaDB: target name -> rows by
    id, a ``TIMESTAMP`` as an aware UTC datetime (the instant it stores)."""
    from pymysql.cursors import DictCursor

    from airflow_cdc.sources.debezium.source import table_identifier

    conn = connect()
    try:
        with conn.cursor(DictCursor) as cur:
            cur.execute("SELECT table_name AS t, column_name AS c, data_type AS d "
                        "FROM information_schema.columns WHERE table_schema = %s", (DATABASE,))
            columns = cur.fetchall()
            instants: dict[str, set] = {}
            for column in columns:
                if column["d"] == "timestamp":
                    instants.setdefault(column["t"], set()).add(column["c"])
            truth = {}
            for name in sorted({column["t"] for column in columns}):
                cur.execute(f"SELECT * FROM `{name}`")
                zoned = instants.get(name, set())
                truth[table_identifier(f"{DATABASE}.{name}")] = {
                    row["id"]: {k: v.replace(tzinfo=timezone.utc) if k in zoned and v else v
                                for k, v in row.items()}
                    for row in cur.fetchall()
                }
            return truth
    finally:
        conn.close()


def capture_config(sink: Path) -> dict:
    from airflow_cdc.capture.classpath import MARIADB_CONNECTOR_CLASS

    return {
        **sink_config(sink),
        "connector": {
            "name": "cdc-demo-dbz-mariadb",
            "connector.class": MARIADB_CONNECTOR_CLASS,
            "database.hostname": "127.0.0.1",
            "database.port": 3306,
            "database.user": "root",
            "database.password": "",
            "database.server.id": SERVER_ID,
            "topic.prefix": TOPIC_PREFIX,
            "database.include.list": DATABASE,
            "heartbeat.interval.ms": 1000,
            "provide.transaction.metadata": True,
            "offset.flush.interval.ms": OFFSET_FLUSH_MS,
        },
    }


MARIADB = SourceDatabase(
    label="demo-debezium-mariadb",
    title=__doc__.splitlines()[0],
    base=".demo-debezium-mariadb",
    stream_id=STREAM_ID,
    topic_prefix=TOPIC_PREFIX,
    key_columns=KEY_COLUMNS,
    recreate=recreate_database,
    execute=execute,
    source_tables=source_tables,
    capture_config=capture_config,
    phases=phases,
)


if __name__ == "__main__":
    sys.exit(main(db=MARIADB))
