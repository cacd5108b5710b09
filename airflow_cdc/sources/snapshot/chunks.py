"""Splits a table's snapshot into key ranges that parallel readers take one each.

A :class:`ChunkPlan` is made once, on the Airflow side, and shipped as JSON (state store,
Spark job arguments); each chunk's ``predicate`` is the SQL text of one partition of
``spark.read.jdbc(url, plan.relation, predicates=plan.predicates())``.

The procedure (:func:`plan_chunks`):

1. Find the key columns in key order (:func:`~.keys.discover_key_columns`).
2. Capture the maximum key: ``SELECT k1, k2 ... ORDER BY k1 DESC, k2 DESC LIMIT 1``.
3. Number the rows up to that maximum in key order, in one query
   (``row_number() OVER (ORDER BY k1, k2 ...)``), and keep every ``chunk_size``-th key as a
   boundary. The database orders the keys, in the columns' own collations: boundaries are
   never sorted in Python, whose order of text differs from most collations.
4. Chunk ``i`` is the range ``(boundary[i-1], boundary[i]]``: lower exclusive, upper
   inclusive. The first has no lower bound; the last ends at the maximum key. Together they
   cover every key up to the maximum once: no gaps, no overlaps.

What a snapshot made from the plan holds, and what it does not:

* Rows inserted after step 2 with keys above the captured maximum are in no chunk. The change
  stream, started before the snapshot, brings them.
* The chunks are read later and separately, so a chunk sees the rows of its range as they are
  when it is read (rows inserted into, updated in or deleted from a range after planning
  included): the snapshot is not one point in time, and a chunk may hold more or fewer than
  ``chunk_size`` rows then. The stream reconciles these changes too.
* An empty table gives a plan with no chunks (and no maximum key): there is nothing to read.
  (Spark's ``jdbc(..., predicates=[])`` gives an empty DataFrame; a reader should rather skip.)

A chunk's predicate uses the expanded row comparison (``(k1 > l1) OR (k1 = l1 AND k2 > l2)``),
not ``(k1, k2) > (l1, l2)``, which MySQL/MariaDB does not use an index for. Key columns are
NOT NULL (:mod:`.keys`), so no NULL handling is needed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from airflow_cdc.model import decimal_text, format_ts, parse_ts, validate_identifier
from airflow_cdc.sources.snapshot.dialects import (
    BOOLEAN,
    DATE,
    DECIMAL,
    INTEGER,
    TEXT,
    TIMESTAMP,
    TIMESTAMPTZ,
    UUID,
    Dialect,
    SnapshotChunkError,
    dialect_named,
    from_epoch,
    typed_key_value,
)
from airflow_cdc.sources.snapshot.keys import (
    KeyColumn,
    current_schema,
    discover_key_columns,
    fetch_all,
    validate_names,
)

PLAN_FORMAT = 1

Key = tuple  # one value per key column, in key order


@dataclass(frozen=True)
class Chunk:
    """Rows with ``lower < key <= upper`` (no lower bound when ``lower`` is None)."""

    index: int
    lower: Key | None
    upper: Key
    predicate: str


@dataclass(frozen=True)
class ChunkPlan:
    """A table's snapshot up to ``max_key``, as chunks of ``chunk_size`` rows when planned."""

    dialect: str
    schema: str
    table: str
    key_columns: tuple[KeyColumn, ...]
    chunk_size: int
    max_key: Key | None
    chunks: tuple[Chunk, ...]

    @property
    def relation(self) -> str:
        """The quoted ``schema.table``: the ``table`` argument of ``spark.read.jdbc``."""
        return dialect_named(self.dialect).table(self.schema, self.table)

    def predicates(self) -> list[str]:
        """One WHERE predicate per chunk, in chunk order: Spark's ``predicates=``."""
        return [chunk.predicate for chunk in self.chunks]

    def select_sql(self, chunk: Chunk) -> str:
        """``SELECT * FROM <table> WHERE <predicate>``: the rows of one chunk."""
        return f"SELECT * FROM {self.relation} WHERE {chunk.predicate}"

    def parametrized(self, chunk: Chunk, paramstyle: str = "format") -> tuple[str, list]:
        """The chunk's predicate with placeholders (``format``: ``%s``, ``qmark``: ``?``) and its
        parameters, for DB-API ``cursor.execute(f"... WHERE {sql}", params)``."""
        return parametrized_predicate(
            dialect_named(self.dialect), self.key_columns, chunk.lower, chunk.upper, paramstyle
        )

    def to_json(self) -> str:
        """Exact JSON: key values typed by their column's kind; :meth:`from_json` reads it."""
        kinds = [column.kind for column in self.key_columns]
        return json.dumps(
            {
                "format": PLAN_FORMAT,
                "dialect": self.dialect,
                "schema": self.schema,
                "table": self.table,
                "key_columns": [column.to_dict() for column in self.key_columns],
                "chunk_size": self.chunk_size,
                "max_key": _key_to_json(self.max_key, kinds),
                "chunks": [
                    {
                        "index": chunk.index,
                        "lower": _key_to_json(chunk.lower, kinds),
                        "upper": _key_to_json(chunk.upper, kinds),
                        "predicate": chunk.predicate,
                    }
                    for chunk in self.chunks
                ],
            },
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, text: str) -> ChunkPlan:
        data = json.loads(text)
        if data.get("format") != PLAN_FORMAT:
            raise SnapshotChunkError(
                f"chunk plan format {data.get('format')!r} is not {PLAN_FORMAT}: plan the "
                f"snapshot again with this version of airflow-cdc"
            )
        dialect = dialect_named(data["dialect"])
        columns = tuple(KeyColumn.from_dict(column) for column in data["key_columns"])

        def key(values):
            return _key_from_json(values, columns, dialect)

        return cls(
            dialect=dialect.name,
            schema=validate_identifier("schema", data["schema"]),
            table=validate_identifier("table", data["table"]),
            key_columns=columns,
            chunk_size=data["chunk_size"],
            max_key=key(data["max_key"]),
            chunks=tuple(
                Chunk(chunk["index"], key(chunk["lower"]), key(chunk["upper"]), chunk["predicate"])
                for chunk in data["chunks"]
            ),
        )


def plan_chunks(connection, dialect: Dialect, table: str, *, chunk_size: int,
                schema: str | None = None, key_columns: Sequence[str] | None = None) -> ChunkPlan:
    """Plan the snapshot of ``schema.table`` in chunks of ``chunk_size`` rows (module docstring).

    Runs read queries only (schema, key columns, maximum, boundaries) on the DB-API
    ``connection``, and neither commits nor rolls back: its transaction is the caller's.
    """
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise SnapshotChunkError(
            f"chunk_size {chunk_size!r} is not a positive int: give the number of rows per "
            f"chunk, e.g. chunk_size=100_000"
        )
    validate_names(table, schema, key_columns)
    if schema is None:
        schema = current_schema(connection, dialect)
    columns = discover_key_columns(
        connection, dialect, table, schema=schema, key_columns=key_columns
    )
    max_key = read_max_key(connection, dialect, schema, table, columns)
    if max_key is None:
        chunks: tuple[Chunk, ...] = ()
    else:
        boundaries = read_boundaries(
            connection, dialect, schema, table, columns, chunk_size, max_key
        )
        chunks = chunks_up_to(dialect, columns, boundaries, max_key)
    return ChunkPlan(dialect.name, schema, table, columns, chunk_size, max_key, chunks)


def read_max_key(connection, dialect: Dialect, schema: str, table: str,
                 columns: Sequence[KeyColumn]) -> Key | None:
    """The greatest key of the table in the database's order; None for an empty table."""
    order = ", ".join(f"{dialect.quote('key column', c.name)} DESC" for c in columns)
    rows = fetch_all(
        connection,
        f"SELECT {_read_list(dialect, columns)} FROM {dialect.table(schema, table)} "
        f"ORDER BY {order} LIMIT 1",
    )
    return _key_from_row(rows[0], columns, dialect) if rows else None


def read_boundaries(connection, dialect: Dialect, schema: str, table: str,
                    columns: Sequence[KeyColumn], chunk_size: int, max_key: Key) -> list[Key]:
    """Every ``chunk_size``-th key up to ``max_key``, in key order, numbered by the database."""
    order = ", ".join(dialect.quote("key column", c.name) for c in columns)
    aliases = ", ".join(f"cdc_key_{i}" for i in range(len(columns)))
    numbered = (
        f"SELECT {_read_list(dialect, columns, aliased=True)}, "
        f"row_number() OVER (ORDER BY {order}) AS cdc_chunk_row "
        f"FROM {dialect.table(schema, table)} "
        f"WHERE {chunk_predicate(dialect, columns, None, max_key)}"
    )
    rows = fetch_all(
        connection,
        f"SELECT {aliases} FROM ({numbered}) numbered "
        f"WHERE MOD(cdc_chunk_row, {int(chunk_size)}) = 0 ORDER BY cdc_chunk_row",
    )
    return [_key_from_row(row, columns, dialect) for row in rows]


def chunks_up_to(dialect: Dialect, columns: Sequence[KeyColumn], boundaries: Sequence[Key],
                 max_key: Key) -> tuple[Chunk, ...]:
    """The chunks ending at each boundary, then at ``max_key`` (unless the last boundary is it)."""
    uppers = list(boundaries)
    if not uppers or tuple(uppers[-1]) != tuple(max_key):
        uppers.append(max_key)
    chunks = []
    lower = None
    for index, upper in enumerate(uppers):
        predicate = chunk_predicate(dialect, columns, lower, upper)
        chunks.append(Chunk(index, lower, tuple(upper), predicate))
        lower = tuple(upper)
    return tuple(chunks)


def chunk_predicate(dialect: Dialect, columns: Sequence[KeyColumn], lower: Key | None,
                    upper: Key) -> str:
    """``lower < key <= upper`` as SQL with literals (no lower bound when ``lower`` is None)."""

    def literal(column: KeyColumn, value: object) -> str:
        return dialect.literal(
            value, column.kind, charset=column.charset, collation=column.collation
        )

    return _range(dialect, columns, lower, upper, literal)


def parametrized_predicate(dialect: Dialect, columns: Sequence[KeyColumn], lower: Key | None,
                           upper: Key, paramstyle: str = "format") -> tuple[str, list]:
    """:func:`chunk_predicate` with placeholders of ``paramstyle``, and the parameters in order."""
    params: list = []

    def placeholder(column: KeyColumn, value: object) -> str:
        params.append(dialect.parameter(value, column.kind))
        return dialect.placeholder(column.kind, paramstyle)

    return _range(dialect, columns, lower, upper, placeholder), params


def _range(dialect: Dialect, columns: Sequence[KeyColumn], lower: Key | None, upper: Key,
           value_sql: Callable[[KeyColumn, object], str]) -> str:
    """``(k1 > l1) OR (k1 = l1 AND k2 > l2) ...`` AND ``(k1 < u1) OR ... (... AND kn <= un)``."""
    if not columns:
        raise SnapshotChunkError("a chunk predicate needs at least one key column")
    names = [dialect.quote("key column", column.name) for column in columns]
    groups = []
    for bound, strict, last in ((lower, ">", ">"), (upper, "<", "<=")):
        if bound is None:
            continue
        if len(bound) != len(columns):
            raise SnapshotChunkError(
                f"key {bound!r} has {len(bound)} values for the {len(columns)} key columns "
                f"{[c.name for c in columns]}"
            )
        disjuncts = []
        for i in range(len(columns)):
            terms = [f"{names[j]} = {value_sql(columns[j], bound[j])}" for j in range(i)]
            op = last if i == len(columns) - 1 else strict
            terms.append(f"{names[i]} {op} {value_sql(columns[i], bound[i])}")
            disjuncts.append("(" + " AND ".join(terms) + ")")
        groups.append("(" + " OR ".join(disjuncts) + ")")
    return " AND ".join(groups)


def _read_list(dialect: Dialect, columns: Sequence[KeyColumn], aliased: bool = False) -> str:
    """The key columns as selected: MariaDB TIMESTAMPs as exact epoch seconds, whatever the
    session's time zone (``UNIX_TIMESTAMP`` of a TIMESTAMP column returns its stored value)."""
    parts = []
    for i, column in enumerate(columns):
        name = dialect.quote("key column", column.name)
        if dialect.name == "mariadb" and column.kind == TIMESTAMPTZ:
            name = f"UNIX_TIMESTAMP({name})"
        parts.append(f"{name} AS cdc_key_{i}" if aliased else name)
    return ", ".join(parts)


def _key_from_row(row: Sequence, columns: Sequence[KeyColumn], dialect: Dialect) -> Key:
    values = []
    for raw, column in zip(row, columns):
        if dialect.name == "mariadb" and column.kind == TIMESTAMPTZ:
            raw = from_epoch(raw)
        values.append(typed_key_value(raw, column.kind, dialect))
    return tuple(values)


# Key values in JSON: exact text where JSON has no exact type (decimals, times, UUIDs).
_TO_JSON: dict[str, Callable[[object], object]] = {
    INTEGER: lambda v: v,
    DECIMAL: decimal_text,
    TEXT: lambda v: v,
    DATE: lambda v: v.isoformat(),
    TIMESTAMP: lambda v: v.isoformat(timespec="microseconds"),
    TIMESTAMPTZ: format_ts,
    BOOLEAN: lambda v: v,
    UUID: str,
}
_FROM_JSON: dict[str, Callable[[object], object]] = {
    INTEGER: lambda v: v,
    DECIMAL: Decimal,
    TEXT: lambda v: v,
    DATE: date.fromisoformat,
    TIMESTAMP: datetime.fromisoformat,
    TIMESTAMPTZ: parse_ts,
    BOOLEAN: lambda v: v,
    UUID: uuid.UUID,
}


def _key_to_json(key: Key | None, kinds: Sequence[str]) -> list | None:
    if key is None:
        return None
    return [_TO_JSON[kind](value) for value, kind in zip(key, kinds)]


def _key_from_json(values: list | None, columns: Sequence[KeyColumn],
                   dialect: Dialect) -> Key | None:
    if values is None:
        return None
    if len(values) != len(columns):
        raise SnapshotChunkError(
            f"chunk plan key {values!r} has {len(values)} values for {len(columns)} key columns"
        )
    key = []
    for value, column in zip(values, columns):
        expects_text = column.kind not in (INTEGER, BOOLEAN)
        if expects_text and not isinstance(value, str):
            raise SnapshotChunkError(
                f"chunk plan value {value!r} of {column.kind} key column {column.name!r} is not "
                f"text: the plan was not written by ChunkPlan.to_json"
            )
        key.append(typed_key_value(_FROM_JSON[column.kind](value), column.kind, dialect))
    return tuple(key)
