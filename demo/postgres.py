"""PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth) for the demos, live runs and
benchmarks that run real Debezium: connections, statements, the replication slot, and a
database made afresh."""

from __future__ import annotations

import time


def connect(dbname: str, autocommit: bool = True):
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname=dbname)
    conn.autocommit = autocommit
    return conn


def execute(sql: str, dbname: str, params=None) -> list | None:
    """Run ``sql`` in ``dbname`` (autocommit); its rows, or None for a statement without."""
    conn = connect(dbname)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else None
    finally:
        conn.close()


def drop_slot(slot: str, timeout: float = 60) -> None:
    """Drop the replication slot ``slot`` once no capture holds it (a killed capture's
    walsender goes away when PostgreSQL sees its socket close); nothing if it is absent."""
    deadline = time.monotonic() + timeout
    while True:
        rows = execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s",
                       "postgres", (slot,))
        if not rows:
            return
        if not rows[0][0]:
            execute("SELECT pg_drop_replication_slot(%s)", "postgres", (slot,))
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"replication slot {slot} stays active after {timeout:.0f} s: "
                               f"another capture holds it; stop it (pg_stat_replication) or "
                               f"drop the slot, and run again")
        time.sleep(0.3)


def require_logical_decoding() -> None:
    """Refuse, naming the fix, a PostgreSQL that is down or not at wal_level=logical."""
    try:
        level = execute("SHOW wal_level", "postgres")[0][0]
    except Exception as error:  # noqa: BLE001 - any connection failure
        raise RuntimeError(f"PostgreSQL does not answer on 127.0.0.1:5432 as user postgres "
                           f"({error}): run make services") from None
    if level != "logical":
        raise RuntimeError(f"PostgreSQL runs with wal_level={level}; Debezium needs logical: "
                           f"run make services (.ci/ensure-postgres sets it and restarts it)")


def recreate_database(dbname: str, slot: str) -> None:
    """``dbname`` afresh (its capture's replication slot dropped first)."""
    require_logical_decoding()
    drop_slot(slot)
    execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)", "postgres")
    execute(f"CREATE DATABASE {dbname}", "postgres")
