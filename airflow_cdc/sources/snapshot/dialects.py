"""SQL text of the two snapshot dialects, PostgreSQL and MariaDB/MySQL, side by side.

A chunk's predicate is SQL text (Spark's ``spark.read.jdbc(url, table, predicates=[...])``
takes nothing else), so key values become literals here. Each literal is rendered from a
value of the Python type its key kind names (:data:`KINDS`); any other value is refused
rather than guessed at. Why each form:

* text, PostgreSQL: ``E'...'`` with quotes and backslashes doubled means the same whatever
  ``standard_conforming_strings`` is; NUL cannot be stored in PostgreSQL text and is refused.
* text, MariaDB: the UTF-8 bytes as a hex literal with a charset introducer
  (``_utf8mb4 X'...'``) mean the same whatever ``NO_BACKSLASH_ESCAPES`` or the connection's
  character set is. A hex literal alone is a binary string, which would compare bytes instead
  of the column's collation; so, when the column's charset and collation are known, the value
  is converted to them (``CONVERT(... USING cs) COLLATE coll``): compared in the column's own
  collation, the index on the key still serves the range.
* timestamps: always with microseconds. ``timestamp`` (PostgreSQL ``timestamp without time
  zone``, MariaDB ``DATETIME``) is a wall-clock value and takes a naive ``datetime``;
  ``timestamptz`` (PostgreSQL ``timestamp with time zone``, MariaDB ``TIMESTAMP``) is an
  instant and takes an aware one. MariaDB has no literal with an offset, so an instant is
  written as ``FROM_UNIXTIME(<epoch seconds>.<micros>)``, which the server reads in the
  session's time zone exactly as it reads the column: the session zone cancels out. Only a
  named session zone with daylight saving time leaves one hour a year ambiguous; readers of
  MariaDB TIMESTAMP keys should use a fixed offset (``time_zone='+00:00'``).

Identifiers are validated (:func:`~airflow_cdc.model.validate_identifier`) before they are
quoted, so a bad schema, table or column name is refused before any SQL exists.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from airflow_cdc.model import UTC, CdcError, decimal_text, validate_identifier

# The kinds of value a key column can hold, and the Python type each takes.
INTEGER = "integer"  # int
DECIMAL = "decimal"  # Decimal (finite)
TEXT = "text"  # str
DATE = "date"  # date
TIMESTAMP = "timestamp"  # naive datetime: a wall-clock value
TIMESTAMPTZ = "timestamptz"  # aware datetime: an instant, kept in UTC
BOOLEAN = "boolean"  # bool
UUID = "uuid"  # uuid.UUID (PostgreSQL only)
KINDS = (INTEGER, DECIMAL, TEXT, DATE, TIMESTAMP, TIMESTAMPTZ, BOOLEAN, UUID)

# information_schema.columns.data_type -> kind. Anything else (floats, binary, enums, json,
# arrays, MariaDB's UUID) cannot key a chunk: equality or ordering would not be exact.
_POSTGRES_KINDS = {
    "smallint": INTEGER,
    "integer": INTEGER,
    "bigint": INTEGER,
    "numeric": DECIMAL,
    "text": TEXT,
    "character varying": TEXT,
    "character": TEXT,
    "date": DATE,
    "timestamp without time zone": TIMESTAMP,
    "timestamp with time zone": TIMESTAMPTZ,
    "boolean": BOOLEAN,
    "uuid": UUID,
}
_MARIADB_KINDS = {
    "tinyint": INTEGER,
    "smallint": INTEGER,
    "mediumint": INTEGER,
    "int": INTEGER,
    "bigint": INTEGER,
    "decimal": DECIMAL,
    "char": TEXT,
    "varchar": TEXT,
    "tinytext": TEXT,
    "text": TEXT,
    "mediumtext": TEXT,
    "longtext": TEXT,
    "date": DATE,
    "datetime": TIMESTAMP,
    "timestamp": TIMESTAMPTZ,
}

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PARAMSTYLES = {"format": "%s", "pyformat": "%s", "qmark": "?"}


class SnapshotChunkError(CdcError, ValueError):
    """A table cannot be chunked as asked: the message names the object, the value and the fix."""


class UnsupportedKeyTypeError(SnapshotChunkError, TypeError):
    """A key value or key column of a type no chunk predicate can compare exactly."""


@dataclass(frozen=True)
class Dialect:
    """One database family's identifiers, literals and key types (``postgresql``, ``mariadb``)."""

    name: str

    def quote(self, kind: str, name: str) -> str:
        """``name`` validated as an identifier (errors say which ``kind`` of name), then quoted."""
        validate_identifier(kind, name)
        return f'"{name}"' if self.name == "postgresql" else f"`{name}`"

    def table(self, schema: str, table: str) -> str:
        """The quoted ``schema.table`` (MariaDB's schema is its database)."""
        return f"{self.quote('schema', schema)}.{self.quote('table', table)}"

    def key_kind(self, data_type: str) -> str | None:
        """The kind of a column of this ``information_schema`` data type; None if it cannot key."""
        kinds = _POSTGRES_KINDS if self.name == "postgresql" else _MARIADB_KINDS
        return kinds.get(data_type.lower())

    def literal(self, value: object, kind: str, *, charset: str | None = None,
                collation: str | None = None) -> str:
        """``value`` as a SQL literal of key kind ``kind``; other Python types are refused.

        ``charset`` and ``collation`` (MariaDB text only) are the key column's, so the literal
        compares in the column's collation; without them it takes the column's on comparison.
        """
        value = typed_key_value(value, kind, self)
        if kind == BOOLEAN:
            return "TRUE" if value else "FALSE"
        if kind == INTEGER:
            return str(value)
        if kind == DECIMAL:
            return decimal_text(value)
        if kind == TEXT:
            return self._text_literal(value, charset, collation)
        if kind == DATE:
            return f"DATE '{value.isoformat()}'"
        if kind == TIMESTAMP:
            return f"TIMESTAMP '{_wall_clock_text(value)}'"
        if kind == TIMESTAMPTZ:
            if self.name == "postgresql":
                return f"TIMESTAMPTZ '{_wall_clock_text(value)}+00:00'"
            return f"FROM_UNIXTIME({epoch_text(value)})"
        return f"UUID '{value}'"  # typed_key_value refused UUID on MariaDB already

    def _text_literal(self, value: str, charset: str | None, collation: str | None) -> str:
        if self.name == "postgresql":
            if "\x00" in value:
                raise UnsupportedKeyTypeError(
                    f"text key value {value!r} contains a NUL character, which PostgreSQL "
                    f"text cannot hold: this value cannot come from a PostgreSQL key column"
                )
            escaped = value.replace("\\", "\\\\").replace("'", "''")
            return f"E'{escaped}'"
        hex_literal = f"_utf8mb4 X'{value.encode('utf-8').hex().upper()}'"
        if charset is None and collation is None:
            return hex_literal
        if charset is None or collation is None:
            raise ValueError(
                f"MariaDB text literal needs both the column's charset and collation, got "
                f"charset={charset!r}, collation={collation!r}: give both or neither"
            )
        validate_identifier("character set", charset)
        validate_identifier("collation", collation)
        return f"CONVERT({hex_literal} USING {charset}) COLLATE {collation}"

    def placeholder(self, kind: str, paramstyle: str) -> str:
        """The placeholder of one key value in a parametrized predicate (see :meth:`parameter`)."""
        try:
            mark = _PARAMSTYLES[paramstyle]
        except KeyError:
            raise ValueError(
                f"paramstyle {paramstyle!r} is not supported: use one of {sorted(_PARAMSTYLES)} "
                f"(psycopg2 and pymysql use 'format', the mariadb connector 'qmark')"
            ) from None
        if kind == UUID:
            return f"CAST({mark} AS uuid)"
        if kind == TIMESTAMPTZ and self.name == "mariadb":
            return f"FROM_UNIXTIME({mark})"
        return mark

    def parameter(self, value: object, kind: str) -> object:
        """A key value as the DB-API parameter that goes with :meth:`placeholder`."""
        value = typed_key_value(value, kind, self)
        if kind == UUID:
            return str(value)
        if kind == DECIMAL:
            # Drivers send str(Decimal): '1E+3' would be read as a float; this is exact text.
            return Decimal(decimal_text(value))
        if kind == TIMESTAMPTZ and self.name == "mariadb":
            return Decimal(epoch_text(value))
        return value


POSTGRESQL = Dialect("postgresql")
MARIADB = Dialect("mariadb")
_DIALECTS = {"postgresql": POSTGRESQL, "postgres": POSTGRESQL, "mariadb": MARIADB, "mysql": MARIADB}


def dialect_named(name: str) -> Dialect:
    """The dialect called ``name`` (``postgresql``/``postgres``, ``mariadb``/``mysql``)."""
    try:
        return _DIALECTS[name.lower()]
    except (KeyError, AttributeError):
        raise SnapshotChunkError(
            f"dialect {name!r} is not supported for snapshot chunks: use one of {sorted(_DIALECTS)}"
        ) from None


def typed_key_value(value: object, kind: str, dialect: Dialect) -> object:
    """``value`` checked against key kind ``kind`` (aware timestamps in UTC, UUIDs parsed).

    Refuses, naming value, type and kind, what a key column of that kind cannot hold.
    """

    def refuse(expected: str) -> UnsupportedKeyTypeError:
        return UnsupportedKeyTypeError(
            f"key value {value!r} ({type(value).__name__}) cannot be a {dialect.name} "
            f"{kind} key value: give {expected}"
        )

    if kind == BOOLEAN:
        if type(value) is not bool:
            raise refuse("a bool")
        return value
    if kind == INTEGER:
        if not isinstance(value, int) or isinstance(value, bool):
            raise refuse("an int")
        return value
    if kind == DECIMAL:
        if isinstance(value, int) and not isinstance(value, bool):
            return Decimal(value)
        if not isinstance(value, Decimal) or not value.is_finite():
            raise refuse("a finite decimal.Decimal (never a float: it would round)")
        return value
    if kind == TEXT:
        if not isinstance(value, str):
            raise refuse("a str")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise refuse("a str without lone surrogates") from None
        return value
    if kind == DATE:
        if not isinstance(value, date) or isinstance(value, datetime):
            raise refuse("a datetime.date")
        return value
    if kind == TIMESTAMP:
        if not isinstance(value, datetime) or value.tzinfo is not None:
            raise refuse("a naive datetime (the column holds a wall-clock time without a zone)")
        return value
    if kind == TIMESTAMPTZ:
        if not isinstance(value, datetime) or value.utcoffset() is None:
            raise refuse("an aware datetime (the column holds an instant)")
        value = value.astimezone(UTC)
        if dialect.name == "mariadb" and value <= _EPOCH:
            raise refuse("an instant after 1970-01-01T00:00:00Z (MariaDB TIMESTAMP's range)")
        return value
    if kind == UUID:
        if dialect.name != "postgresql":
            raise refuse("a value of another kind: uuid keys are supported on PostgreSQL only")
        if isinstance(value, uuid.UUID):
            return value
        if isinstance(value, str):
            try:
                return uuid.UUID(value)
            except ValueError:
                raise refuse("a uuid.UUID or its text") from None
        raise refuse("a uuid.UUID")
    raise UnsupportedKeyTypeError(f"key kind {kind!r} is not one of {list(KINDS)}")


def epoch_text(value: datetime) -> str:
    """Seconds since the epoch with exactly six decimals (``1700000000.123456``), exactly."""
    delta: timedelta = value.astimezone(UTC) - _EPOCH
    seconds = delta.days * 86400 + delta.seconds
    return f"{seconds}.{delta.microseconds:06d}"


def from_epoch(seconds: Decimal | int) -> datetime:
    """Inverse of :func:`epoch_text` (MariaDB's ``UNIX_TIMESTAMP(col)`` of a TIMESTAMP column)."""
    micros = int(Decimal(seconds) * 1_000_000)
    return _EPOCH + timedelta(microseconds=micros)


def _wall_clock_text(value) -> str:
    """``YYYY-MM-DD HH:MM:SS.ffffff`` of ``value``'s wall clock, the year always four digits
    (``strftime('%Y')`` writes year 5 as ``5``, which a database reads as another year)."""
    return value.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
