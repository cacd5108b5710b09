"""Debezium's ad-hoc snapshot signals, as rows of the connector's signaling table.

A Debezium connector starts, stops, pauses or resumes an ad-hoc snapshot when a row is
INSERTed into its signaling table (the connector property ``signal.data.collection``)::

    CREATE TABLE public.debezium_signal (
        id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048));
    INSERT INTO public.debezium_signal (id, type, data) VALUES ('<id>', 'execute-snapshot',
        '{"data-collections": ["public.orders"], "type": "incremental"}');

:class:`SnapshotSignal` is one such row, refused before any SQL is built when a value is
wrong. Its ``data`` per ``type``, as Debezium documents it:

* ``execute-snapshot``: ``data-collections`` (required, non-empty), ``type`` (``incremental``
  or ``blocking``), ``additional-conditions`` (``[{"data-collection": ..., "filter": <SQL
  condition>}]``: only the rows the condition selects are read), ``surrogate-key`` (a column
  that chunks the snapshot instead of the primary key);
* ``stop-snapshot``: ``data-collections`` (optional: without it the whole snapshot stops),
  ``type`` ``incremental``;
* ``pause-snapshot``, ``resume-snapshot``: ``type`` ``incremental``.

**Names.** A data collection is ``schema.table`` (PostgreSQL) or ``database.table``
(MySQL/MariaDB). Debezium reads ``data-collections`` entries as regular expressions matched
against its table identifiers (``schema.table``, unquoted) and parses an entry that matches
none as a table name, where a part in double quotes may hold any character
(``"public"."My.Table"``). So each part here is a plain identifier (letters, digits, ``_``) or
double-quoted; anything else (``public.orders; drop table x``, a stray quote, a pattern) is
refused. An additional condition's ``data-collection`` is a (case-insensitive) regular
expression too, matched against that same name: it is written as the collection's own text,
escaped when a part is quoted.

**Sending** (:func:`send_signal`): in one transaction, check that the signal table exists
with the columns ``id, type, data`` (in that order: Debezium reads them by position), a
primary key on ``id`` and room for this signal; for ``execute-snapshot`` that every table has a
primary key, or the ``surrogate_key`` column (Debezium chunks an incremental snapshot by the
key: a table with neither cannot be read); then insert the row with its three values bound,
never formatted into the SQL. With ``once`` an id already in the table is not sent again
(PostgreSQL ``ON CONFLICT (id) DO NOTHING``, MySQL/MariaDB ``INSERT IGNORE``; the checks above
make sure IGNORE has nothing else to ignore), which is how a retried Airflow task keeps to one
snapshot request per run (:func:`run_signal_id`).

**What the connector needs** (seen with Debezium 3.6's PostgreSQL connector, embedded):
``signal.data.collection=<schema>.<table>``; the ``source`` channel is on by default
(``signal.enabled.channels`` defaults to ``source``). The signal table need not be in
``table.include.list``: Debezium captures it anyway (``publication.autocreate.mode=filtered``
adds it to the publication), and its rows, the signals and the snapshot window watermarks
Debezium writes there (ids ``<uuid>-open`` / ``<uuid>-close``, 42 characters, hence
``varchar(42)``; its user needs INSERT on the table), arrive as change events on the topic
``<topic.prefix>.<schema>.<table>``. ``snapshot.mode=no_data`` streams without an initial
snapshot and still takes incremental ones. With ``notification.enabled.channels=sink`` and
``notification.sink.topic.name=<topic>`` Debezium writes its progress to that topic
(``io.debezium.connector.common.Notification``: ``id`` = the signal id, ``aggregate_type``
``Incremental Snapshot``, ``type`` ``STARTED``, ``IN_PROGRESS``, ``TABLE_SCAN_COMPLETED``,
``COMPLETED``), which is how a reader of the sink files knows the snapshot ended.
READ events of an incremental snapshot carry ``source.snapshot = "incremental"``.

Only the standard library: this is the sources layer (no Airflow, no Spark).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sys
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_cdc.model import InvalidIdentifierError, validate_identifier
from airflow_cdc.sources.debezium.errors import InvalidSignalError, SignalTargetError

log = logging.getLogger(__name__)

EXECUTE_SNAPSHOT = "execute-snapshot"
STOP_SNAPSHOT = "stop-snapshot"
PAUSE_SNAPSHOT = "pause-snapshot"
RESUME_SNAPSHOT = "resume-snapshot"
SIGNAL_TYPES = (EXECUTE_SNAPSHOT, STOP_SNAPSHOT, PAUSE_SNAPSHOT, RESUME_SNAPSHOT)
SNAPSHOT_TYPES = ("incremental", "blocking")
SIGNAL_ID_MAX_LENGTH = 42  # Debezium's documented signal table: id varchar(42)
SIGNAL_ID_PREFIX = "airflow-cdc-"
SIGNAL_TABLE_COLUMNS = ("id", "type", "data")
SIGNAL_TABLE_DDL = "(id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))"

# The dialects a signal is written in: the character that quotes an identifier.
QUOTE_CHARS = {"postgresql": '"', "mysql": "`"}
# The placeholder the module's SQL is written with (bound per paramstyle by _bind): a control
# character, which no checked name holds.
_MARK = "\x00"
_DIALECT_NAMES = {"postgresql": "postgresql", "postgres": "postgresql", "mysql": "mysql", "mariadb": "mysql"}

_PLAIN_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_QUOTED_PART = re.compile(r'"([^"\x00-\x1f\x7f]{1,128})"')
# A filter is one SQL condition inside Debezium's chunk query: never a second statement or a comment.
_FILTER_REFUSED = ((";", "a statement separator"), ("--", "a comment"), ("/*", "a comment"))

_NAME_FIX = (
    "write schema.table (PostgreSQL) or database.table (MySQL/MariaDB), each part letters, "
    'digits and _ (not starting with a digit), or in double quotes when it has other characters, '
    'e.g. "public"."My.Table"'
)


# --- names ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TableName:
    """``container.table`` (schema or database, then table) as written, with its parts unquoted."""

    container: str
    table: str
    text: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.container, self.table)

    @property
    def condition_pattern(self) -> str:
        """The additional-condition ``data-collection``: a regex Debezium matches against this name."""
        return re.escape(self.text) if '"' in self.text else self.text

    def quoted(self, dialect: str) -> str:
        quote = QUOTE_CHARS[dialect_of(dialect)]
        return ".".join(quote + part.replace(quote, quote * 2) + quote for part in self.key)


def parse_table_name(kind: str, value: object) -> TableName:
    """``value`` as a two-part table name, or :class:`InvalidSignalError` naming it and the fix."""
    if not isinstance(value, str):
        raise InvalidSignalError(f"{kind} {value!r} is not a table name: {_NAME_FIX}")
    parts: list[str] = []
    position = 0
    while True:
        quoted = _QUOTED_PART.match(value, position)
        plain = None if quoted else _PLAIN_PART.match(value, position)
        if quoted:
            parts.append(quoted.group(1))
            position = quoted.end()
        elif plain:
            parts.append(plain.group(0))
            position = plain.end()
        else:
            break
        if position == len(value) or value[position] != ".":
            break
        position += 1
    if position != len(value) or len(parts) != 2:
        raise InvalidSignalError(f"{kind} {value!r} is not a table name: {_NAME_FIX}")
    return TableName(parts[0], parts[1], value)


def dialect_of(name: str) -> str:
    """``postgresql`` or ``mysql`` (MariaDB speaks MySQL here), or an error naming the choices."""
    dialect = _DIALECT_NAMES.get(str(name).lower())
    if dialect is None:
        raise InvalidSignalError(
            f"dialect {name!r} is not one a signal can be written in: use 'postgresql' or "
            f"'mysql' (also for MariaDB)"
        )
    return dialect


# --- signal ids -------------------------------------------------------------------------------
def new_signal_id() -> str:
    """A fresh id: ``airflow-cdc-`` and 30 hex digits of a UUID4 (42 characters)."""
    return SIGNAL_ID_PREFIX + uuid.uuid4().hex[: SIGNAL_ID_MAX_LENGTH - len(SIGNAL_ID_PREFIX)]


def run_signal_id(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """The id of the one signal an Airflow task instance sends, the same on every try.

    A hash of ``dag_id``, ``run_id``, ``task_id`` and ``map_index`` (they are longer than the
    42 characters the signal table allows): ``airflow-cdc-`` and 30 hex digits of SHA-256.
    """
    text = "\x1f".join((str(dag_id), str(run_id), str(task_id), str(map_index)))
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return SIGNAL_ID_PREFIX + digest[: SIGNAL_ID_MAX_LENGTH - len(SIGNAL_ID_PREFIX)]


def _validate_signal_id(value: object) -> str:
    if (not isinstance(value, str) or not value or len(value) > SIGNAL_ID_MAX_LENGTH
            or any(ord(c) < 32 or ord(c) == 127 for c in value)):
        raise InvalidSignalError(
            f"signal id {value!r} cannot be sent: give 1 to {SIGNAL_ID_MAX_LENGTH} printable "
            f"characters (the signal table's id is varchar({SIGNAL_ID_MAX_LENGTH})), or leave it "
            f"out for a generated one"
        )
    return value


# --- the signal -------------------------------------------------------------------------------
@dataclass(frozen=True)
class SnapshotSignal:
    """One row of the signaling table: ``id``, ``type`` and ``data`` (sent as JSON).

    Build it with :meth:`execute_snapshot`, :meth:`stop_snapshot`, :meth:`pause_snapshot` or
    :meth:`resume_snapshot`; a signal built directly is checked the same way.
    """

    id: str
    type: str
    data: dict

    def __post_init__(self) -> None:
        _validate_signal_id(self.id)
        if self.type not in SIGNAL_TYPES:
            raise InvalidSignalError(
                f"signal type {self.type!r} is not a snapshot signal: use one of {list(SIGNAL_TYPES)}")
        if not isinstance(self.data, dict):
            raise InvalidSignalError(f"signal data {self.data!r} must be a dict (it is sent as a JSON object)")
        allowed = {"type", "data-collections"}
        if self.type == EXECUTE_SNAPSHOT:
            allowed |= {"additional-conditions", "surrogate-key"}
        elif self.type in (PAUSE_SNAPSHOT, RESUME_SNAPSHOT):
            allowed = {"type"}
        unknown = sorted(set(self.data) - allowed)
        if unknown:
            raise InvalidSignalError(f"{self.type} signal data has {unknown}: it takes only {sorted(allowed)}")
        snapshot_type = self.data.get("type")
        types = SNAPSHOT_TYPES if self.type == EXECUTE_SNAPSHOT else ("incremental",)
        if snapshot_type not in types:
            raise InvalidSignalError(f"{self.type} snapshot type {snapshot_type!r}: use one of {list(types)}")
        collections = self.collections  # parses every name
        if self.type == EXECUTE_SNAPSHOT and not collections:
            raise InvalidSignalError(
                "execute-snapshot needs data-collections: name at least one table, e.g. ['public.orders']"
            )
        if "surrogate-key" in self.data:
            _validate_surrogate_key(self.data["surrogate-key"])
        self._check_conditions(collections)
        try:
            self.data_json
        except (TypeError, ValueError) as error:
            raise InvalidSignalError(f"signal data {self.data!r} is not JSON: {error}") from error

    def _check_conditions(self, collections: tuple[TableName, ...]) -> None:
        conditions = self.data.get("additional-conditions")
        if conditions is None:
            return
        patterns = {c.condition_pattern: c for c in collections}
        if not isinstance(conditions, list) or not conditions:
            raise InvalidSignalError(
                f"additional-conditions {conditions!r}: give a non-empty list of "
                '{"data-collection": ..., "filter": ...}, or leave it out'
            )
        seen: set[str] = set()
        for condition in conditions:
            if not isinstance(condition, dict) or set(condition) != {"data-collection", "filter"}:
                raise InvalidSignalError(
                    f'additional condition {condition!r}: give {{"data-collection": ..., "filter": ...}}'
                )
            pattern = condition["data-collection"]
            if pattern not in patterns or pattern in seen:
                raise InvalidSignalError(
                    f"additional condition for {pattern!r} names no table of this signal "
                    f"{[c.text for c in collections]} (or names one twice): give one condition "
                    f"per table, for tables the signal snapshots"
                )
            seen.add(pattern)
            _validate_filter(patterns[pattern].text, condition["filter"])

    # -- constructors ---------------------------------------------------------------------------
    @classmethod
    def execute_snapshot(
        cls,
        collections: str | Iterable[str],
        *,
        snapshot_type: str = "incremental",
        additional_conditions: Mapping[str, str] | None = None,
        surrogate_key: str | None = None,
        signal_id: str | None = None,
    ) -> "SnapshotSignal":
        """Snapshot ``collections`` (``schema.table`` names); ``additional_conditions`` maps a
        table of them to the SQL condition selecting the rows to read; ``surrogate_key`` is the
        column that chunks the snapshot instead of the primary key."""
        tables = _collections("execute-snapshot", collections)
        if not tables:
            raise InvalidSignalError(
                f"collections={collections!r}: an execute-snapshot needs at least one table, e.g. ['public.orders']"
            )
        data: dict[str, Any] = {"data-collections": [t.text for t in tables], "type": snapshot_type}
        if additional_conditions is not None:
            data["additional-conditions"] = _conditions(additional_conditions, tables)
        if surrogate_key is not None:
            data["surrogate-key"] = _validate_surrogate_key(surrogate_key)
        return cls(signal_id if signal_id is not None else new_signal_id(), EXECUTE_SNAPSHOT, data)

    @classmethod
    def stop_snapshot(cls, collections: str | Iterable[str] | None = None, *,
                      signal_id: str | None = None) -> "SnapshotSignal":
        """Stop the incremental snapshot of ``collections``, or all of it when None."""
        data: dict[str, Any] = {}
        if collections is not None:
            tables = _collections("stop-snapshot", collections)
            if not tables:
                raise InvalidSignalError(
                    f"collections={collections!r}: name the tables whose snapshot stops, or leave "
                    f"collections out (None) to stop the whole snapshot"
                )
            data["data-collections"] = [t.text for t in tables]
        data["type"] = "incremental"
        return cls(signal_id if signal_id is not None else new_signal_id(), STOP_SNAPSHOT, data)

    @classmethod
    def pause_snapshot(cls, *, signal_id: str | None = None) -> "SnapshotSignal":
        return cls(signal_id if signal_id is not None else new_signal_id(), PAUSE_SNAPSHOT, {"type": "incremental"})

    @classmethod
    def resume_snapshot(cls, *, signal_id: str | None = None) -> "SnapshotSignal":
        return cls(signal_id if signal_id is not None else new_signal_id(), RESUME_SNAPSHOT, {"type": "incremental"})

    # -- what it says ---------------------------------------------------------------------------
    @property
    def collections(self) -> tuple[TableName, ...]:
        names = self.data.get("data-collections")
        if names is None:
            return ()
        if not isinstance(names, list) or not names:
            raise InvalidSignalError(
                f"data-collections {names!r}: give a non-empty list of table names, or leave it out"
            )
        return tuple(parse_table_name("data collection", name) for name in names)

    @property
    def surrogate_key(self) -> str | None:
        return self.data.get("surrogate-key")

    @property
    def data_json(self) -> str:
        return json.dumps(self.data)

    def insert_statement(
        self, signal_table: str, paramstyle: str = "format", *, dialect: str = "postgresql", once: bool = False
    ) -> tuple[str, tuple | dict]:
        """``(sql, params)`` inserting this signal into ``signal_table``, values bound.

        The table name is checked and quoted for ``dialect``; ``paramstyle`` is the driver's
        (PEP 249: ``format``, ``pyformat``, ``qmark``, ``numeric``, ``named``). With ``once``
        a row with the same id already there is left alone and nothing is inserted.
        """
        dialect = dialect_of(dialect)
        table = parse_table_name("signal table", signal_table).quoted(dialect)
        quote = QUOTE_CHARS[dialect]
        columns = ", ".join(f"{quote}{name}{quote}" for name in SIGNAL_TABLE_COLUMNS)
        values = {"id": self.id, "type": self.type, "data": self.data_json}
        m = _MARK
        sql = {
            "postgresql": f"INSERT INTO {table} ({columns}) VALUES ({m}, {m}, {m})"
                          + (f" ON CONFLICT ({quote}id{quote}) DO NOTHING" if once else ""),
            "mysql": f"INSERT {'IGNORE ' if once else ''}INTO {table} ({columns}) VALUES ({m}, {m}, {m})",
        }[dialect]
        return _bind(sql, [values["id"], values["type"], values["data"]], paramstyle, names=SIGNAL_TABLE_COLUMNS)


def _collections(kind: str, collections: str | Iterable[str]) -> tuple[TableName, ...]:
    if isinstance(collections, str):
        collections = [collections]
    if not isinstance(collections, Iterable) or isinstance(collections, Mapping):
        raise InvalidSignalError(
            f"{kind} collections {collections!r}: give a list of table names, e.g. ['public.orders']")
    tables: dict[tuple[str, str], TableName] = {}
    for value in collections:
        table = parse_table_name("data collection", value)
        tables.setdefault(table.key, table)
    return tuple(tables.values())


def _conditions(conditions: Mapping[str, str], tables: Sequence[TableName]) -> list[dict[str, str]]:
    if not isinstance(conditions, Mapping) or not conditions:
        raise InvalidSignalError(
            f"additional_conditions={conditions!r}: give a mapping of table to SQL condition, "
            "e.g. {'public.orders': \"status = 'open'\"}, or leave it out"
        )
    by_key = {t.key: t for t in tables}
    found: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for name, condition in conditions.items():
        key = parse_table_name("additional condition table", name).key
        if key not in by_key:
            raise InvalidSignalError(
                f"additional condition for {name!r}: that table is not one this signal snapshots "
                f"{[t.text for t in tables]}: add it to the collections or drop the condition"
            )
        if key in seen:
            raise InvalidSignalError(f"additional_conditions name {name!r} twice: give one condition per table")
        seen.add(key)
        _validate_filter(name, condition)
        found.append({"data-collection": by_key[key].condition_pattern, "filter": condition.strip()})
    return found


def _validate_surrogate_key(value: object) -> str:
    try:
        return validate_identifier("surrogate_key", value)
    except InvalidIdentifierError as error:
        raise InvalidSignalError(
            f"surrogate_key {value!r} is not a column name: name one unique column of the tables, "
            f"in letters, digits and _ (not starting with a digit)"
        ) from error


def _validate_filter(table: str, condition: object) -> None:
    if not isinstance(condition, str) or not condition.strip():
        raise InvalidSignalError(
            f"additional condition for {table}: {condition!r} is not a SQL condition: give one, "
            "e.g. \"status = 'open'\""
        )
    for token, what in _FILTER_REFUSED:
        if token in condition:
            raise InvalidSignalError(
                f"additional condition for {table} {condition!r} contains {token!r} ({what}): "
                "Debezium puts the filter into the WHERE clause of its chunk query, so give one "
                "SQL condition, e.g. \"status = 'open'\""
            )


def _bind(sql: str, values: list, paramstyle: str, names: Sequence[str] | None = None) -> tuple[str, tuple | dict]:
    """``sql`` written with :data:`_MARK` placeholders, in the driver's ``paramstyle``."""
    names = list(names) if names else [f"p{i}" for i in range(1, len(values) + 1)]
    pieces = sql.split(_MARK)
    if len(pieces) != len(values) + 1:
        raise AssertionError(f"{len(pieces) - 1} placeholders for {len(values)} values: {sql}")
    if paramstyle in ("format", "pyformat"):  # a quoted name may hold a %
        pieces = [piece.replace("%", "%%") for piece in pieces]
    if paramstyle == "qmark":
        marks = ["?"] * len(values)
    elif paramstyle == "format":
        marks = ["%s"] * len(values)
    elif paramstyle == "pyformat":
        marks = [f"%({n})s" for n in names]
    elif paramstyle == "numeric":
        marks = [f":{i}" for i in range(1, len(values) + 1)]
    elif paramstyle == "named":
        marks = [f":{n}" for n in names]
    else:
        raise InvalidSignalError(
            f"paramstyle {paramstyle!r} is not a PEP 249 style: use format, pyformat, qmark, numeric or named"
        )
    text = pieces[0] + "".join(mark + piece for mark, piece in zip(marks, pieces[1:]))
    if paramstyle in ("pyformat", "named"):
        return text, dict(zip(names, values))
    return text, tuple(values)


def paramstyle_of(connection: Any) -> str:
    """The PEP 249 ``paramstyle`` of the driver module a DB-API connection comes from."""
    module = sys.modules.get(type(connection).__module__.split(".")[0])
    style = getattr(module, "paramstyle", None)
    return style if style in ("format", "pyformat", "qmark", "numeric", "named") else "format"


# --- the database side ------------------------------------------------------------------------
# The catalog queries, both dialects side by side (information_schema in each one's spelling).
_CATALOG = {
    "postgresql": {
        "table": "SELECT table_type FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
        "primary_key": (
            "SELECT kcu.column_name FROM information_schema.table_constraints tc "
            "JOIN information_schema.key_column_usage kcu ON kcu.constraint_schema = tc.constraint_schema "
            "AND kcu.constraint_name = tc.constraint_name AND kcu.table_schema = tc.table_schema "
            "AND kcu.table_name = tc.table_name "
            "WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_schema = ? AND tc.table_name = ? "
            "ORDER BY kcu.ordinal_position"
        ),
        "columns": (
            "SELECT column_name, character_maximum_length FROM information_schema.columns "
            "WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position"
        ),
    },
    "mysql": {
        "table": "SELECT TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
        "primary_key": (
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE "
            "WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION"
        ),
        "columns": (
            "SELECT COLUMN_NAME, CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION"
        ),
    },
}
# Written with ? for reading; bound through the module's placeholder (no name in them holds one).
_CATALOG = {dialect: {name: sql.replace("?", _MARK) for name, sql in queries.items()}
            for dialect, queries in _CATALOG.items()}


class _Catalog:
    """What information_schema says about one table, through a DB-API cursor."""

    def __init__(self, cursor, dialect: str, paramstyle: str):
        self.cursor, self.queries, self.paramstyle = cursor, _CATALOG[dialect], paramstyle

    def _rows(self, query: str, table: TableName) -> list:
        sql, params = _bind(self.queries[query], list(table.key), self.paramstyle)
        self.cursor.execute(sql, params)
        return list(self.cursor.fetchall())

    def exists(self, table: TableName) -> bool:
        return bool(self._rows("table", table))

    def primary_key(self, table: TableName) -> list[str]:
        return [str(row[0]) for row in self._rows("primary_key", table)]

    def columns(self, table: TableName) -> list[tuple[str, int | None]]:
        return [(str(row[0]), None if row[1] is None else int(row[1])) for row in self._rows("columns", table)]


def _not_found(what: str, table: TableName) -> SignalTargetError:
    return SignalTargetError(
        f"{what} {table.text} was not found: check the name (parts are matched exactly as "
        f"written, case included; quote a part with other characters) and that the "
        f"connection's user may see the table"
    )


def check_signal_table(cursor, signal: SnapshotSignal, signal_table: str, *, dialect: str,
                       paramstyle: str = "format") -> None:
    """The signal table exists with the columns id, type, data first, a primary key on id,
    and room for this signal's values."""
    dialect = dialect_of(dialect)
    table = parse_table_name("signal table", signal_table)
    catalog = _Catalog(cursor, dialect, paramstyle)
    create = f"CREATE TABLE {table.quoted(dialect)} {SIGNAL_TABLE_DDL}"
    if not catalog.exists(table):
        raise SignalTargetError(
            f"signal table {table.text} was not found: create it ({create}) and name it in the "
            f"connector property signal.data.collection"
        )
    columns = catalog.columns(table)
    names = tuple(name.lower() for name, _length in columns[:3])
    if names != SIGNAL_TABLE_COLUMNS:
        raise SignalTargetError(
            f"signal table {table.text} starts with the columns {list(names)}: Debezium reads "
            f"id, type, data by position, so they must be its first three columns ({create})"
        )
    if [c.lower() for c in catalog.primary_key(table)] != ["id"]:
        raise SignalTargetError(
            f"signal table {table.text} has no primary key on id: without it a retried task "
            f"could send its signal twice; add it (ALTER TABLE {table.quoted(dialect)} ADD PRIMARY KEY (id))"
        )
    for (name, length), value in zip(columns, (signal.id, signal.type, signal.data_json)):
        if length is not None and len(value) > length:
            raise SignalTargetError(
                f"signal table {table.text}: column {name} holds {length} characters, this signal's "
                f"{name} has {len(value)}: widen the column ({create}) or send fewer tables or "
                f"shorter conditions per signal"
            )


def check_snapshot_keys(cursor, signal: SnapshotSignal, *, dialect: str, paramstyle: str = "format") -> None:
    """Every table of the signal exists and has a primary key, or the surrogate key column."""
    dialect = dialect_of(dialect)
    catalog = _Catalog(cursor, dialect, paramstyle)
    surrogate = signal.surrogate_key
    for table in signal.collections:
        if not catalog.exists(table):
            raise _not_found("table", table)
        if surrogate is not None:
            if surrogate not in {name for name, _length in catalog.columns(table)}:
                raise SignalTargetError(
                    f"table {table.text} has no column {surrogate!r} for surrogate_key: name a "
                    f"unique column of every table in the signal, or send one signal per table"
                )
        elif not catalog.primary_key(table):
            raise SignalTargetError(
                f"table {table.text} has no primary key, so Debezium cannot chunk its "
                f"incremental snapshot: give surrogate_key= naming a unique column of it, or add "
                f"a primary key (ALTER TABLE {table.quoted(dialect)} ADD PRIMARY KEY (...))"
            )


def send_signal(connection, signal: SnapshotSignal, signal_table: str, *, dialect: str,
                check_keys: bool | None = None, once: bool = True) -> bool:
    """Check, then insert ``signal`` into ``signal_table``, in one transaction of ``connection``.

    ``check_keys`` (default: for execute-snapshot) checks every table's key first. Returns
    whether the row was inserted now: False when ``once`` and a row with its id was already
    there (the signal was sent before; Debezium is not asked twice).
    """
    dialect = dialect_of(dialect)
    paramstyle = paramstyle_of(connection)
    if check_keys is None:
        check_keys = signal.type == EXECUTE_SNAPSHOT
    sql, params = signal.insert_statement(signal_table, paramstyle, dialect=dialect, once=once)
    cursor = connection.cursor()
    try:
        check_signal_table(cursor, signal, signal_table, dialect=dialect, paramstyle=paramstyle)
        if check_keys:
            check_snapshot_keys(cursor, signal, dialect=dialect, paramstyle=paramstyle)
        cursor.execute(sql, params)
        inserted = cursor.rowcount == 1
        if not inserted:
            _warn_if_different(cursor, signal, signal_table, dialect, paramstyle)
        connection.commit()
    except BaseException:
        connection.rollback()
        raise
    finally:
        cursor.close()
    return inserted


def _warn_if_different(cursor, signal: SnapshotSignal, signal_table: str, dialect: str, paramstyle: str) -> None:
    quote = QUOTE_CHARS[dialect]
    table = parse_table_name("signal table", signal_table).quoted(dialect)
    sql, params = _bind(f"SELECT {quote}type{quote}, {quote}data{quote} FROM {table} WHERE {quote}id{quote} = {_MARK}",
                        [signal.id], paramstyle)
    cursor.execute(sql, params)
    row = cursor.fetchone()
    if row is not None and (row[0], row[1]) != (signal.type, signal.data_json):
        log.warning("signal %s was sent before as %s %s; this request (%s %s) is not sent again",
                    signal.id, row[0], row[1], signal.type, signal.data_json)
