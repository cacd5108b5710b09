"""A DB-API connection to the database a snapshot reads: psycopg2 for PostgreSQL, PyMySQL
(pure Python, no client library) for MariaDB/MySQL; drivers are imported when connecting."""

from __future__ import annotations


def connect(dialect: str, host: str, port: int, database: str, user: str,
            password: str | None = None, *, autocommit: bool = True):
    """A connection in autocommit (a watermark commits at once; reads take no locks)."""
    from airflow_cdc.sources.snapshot.dialects import dialect_named

    if dialect_named(dialect).name == "postgresql":
        import psycopg2

        conn = psycopg2.connect(host=host, port=port, dbname=database, user=user,
                                password=password)
        conn.autocommit = autocommit
        return conn
    import pymysql

    return pymysql.connect(host=host, port=port, database=database, user=user,
                           password=password or "", autocommit=autocommit)
