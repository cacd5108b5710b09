"""DDL statements as ``UpdateDatabaseDdl`` takes them, applied to the served schema.

What is applied (both dialects, identifiers case-insensitive as Spanner compares them):

* ``CREATE TABLE [IF NOT EXISTS]`` with column types, ``NOT NULL``, the commit-timestamp
  option (GoogleSQL ``OPTIONS (allow_commit_timestamp=true)``, PostgreSQL type
  ``SPANNER.COMMIT_TIMESTAMP``), the primary key (ascending) and ``INTERLEAVE IN PARENT``;
* ``CREATE [UNIQUE] [NULL_FILTERED] INDEX [IF NOT EXISTS]`` with ascending columns and
  ``STORING`` (GoogleSQL) / ``INCLUDE`` (PostgreSQL) columns;
* ``DROP TABLE [IF EXISTS]`` and ``DROP INDEX [IF EXISTS]`` (a table with indexes or
  interleaved children is refused, as Spanner refuses it);
* ``ALTER DATABASE ... SET OPTIONS (version_retention_period = '...')`` (GoogleSQL) /
  ``SET spanner.version_retention_period = '...'`` (PostgreSQL), so the statements
  ``GetDatabaseDdl`` returns can be applied again.

Every other statement kind (change streams, ALTER TABLE, views, foreign keys, ...) is refused
with UNIMPLEMENTED naming the statement and what is applied: a statement the emulator cannot
apply must never look applied. A statement it cannot parse is INVALID_ARGUMENT.
:func:`schema_after` applies a whole list or nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..schema import POSTGRESQL, SchemaError, SpannerType
from .definition import ColumnSpec, DatabaseSchema, IndexSpec, TableSpec, retention_text
from .status import SpannerStatusError, failed_precondition, invalid

APPLIED = ("CREATE TABLE", "CREATE INDEX", "DROP TABLE", "DROP INDEX",
           "ALTER DATABASE ... version_retention_period")
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<word>[A-Za-z_][A-Za-z0-9_]*)
      | `(?P<backquoted>[^`]+)`
      | "(?P<quoted>[^"]+)"
      | '(?P<string>[^']*)'
      | (?P<number>\d+)
      | (?P<punct>[^\sA-Za-z0-9_])
    )""",
    re.VERBOSE,
)
_PG_TYPES = {
    "bigint": "INT64", "int8": "INT64", "varchar": "STRING", "text": "STRING",
    "character varying": "STRING", "double precision": "FLOAT64", "float8": "FLOAT64",
    "boolean": "BOOL", "bool": "BOOL", "numeric": "NUMERIC", "jsonb": "JSON",
    "timestamptz": "TIMESTAMP", "timestamp with time zone": "TIMESTAMP", "date": "DATE",
    "bytea": "BYTES",
}


@dataclass(frozen=True)
class _Token:
    kind: str  # word, quoted (an identifier in quotes), string, number, punct
    text: str

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.text.upper() in words


@dataclass(frozen=True)
class RetentionChange:
    """``ALTER DATABASE`` setting ``version_retention_period``."""

    version_retention_period: str


def split_statements(text: str) -> list[str]:
    """A DDL file -> its statements: ``;`` separates them, ``--`` and ``/* */`` comment."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    statements, current, quote = [], [], None
    for line in text.splitlines():
        index = 0
        while index < len(line):
            char = line[index]
            if quote is None and line.startswith("--", index):
                break
            if quote is None and char in "'\"`":
                quote = char
            elif char == quote:
                quote = None
            if quote is None and char == ";":
                statements.append("".join(current))
                current = []
            else:
                current.append(char)
            index += 1
        current.append("\n")
    statements.append("".join(current))
    return [s.strip() for s in statements if s.strip()]


def schema_after(schema: DatabaseSchema, statements, dialect: str,
                 retention: str) -> tuple[DatabaseSchema, str]:
    """The schema and ``version_retention_period`` after applying ``statements`` in order.

    Raises :class:`SpannerStatusError` for the first statement refused; the caller then keeps
    the schema it had (all statements or none)."""
    for statement in statements:
        change = parse_statement(statement, dialect)
        if isinstance(change, RetentionChange):
            retention = change.version_retention_period
            continue
        try:
            schema = _apply(schema, change, statement)
        except SchemaError as error:
            raise failed_precondition(f"{error} (in DDL statement: {statement})") from error
    return schema, retention


def _apply(schema: DatabaseSchema, change, statement: str) -> DatabaseSchema:
    kind, name, definition, if_clause = change
    tables, indexes = list(schema.tables), list(schema.indexes)
    existing_table = schema.table(name) if kind in ("create table", "drop table") else None
    existing_index = next((i for i in indexes if i.name.lower() == name.lower()), None)
    if kind in ("create table", "create index"):
        if existing_table is not None or existing_index is not None:
            if if_clause:
                return schema
            raise failed_precondition(f"Duplicate name in schema: {name}.")
        if kind == "create table":
            return DatabaseSchema((*tables, definition), indexes)
        table = schema.table(definition.table)
        if table is None:
            raise SpannerStatusError("NOT_FOUND", f"Table not found: {definition.table}")
        return DatabaseSchema(tables, (*indexes, replace(definition, table=table.name)))
    if kind == "drop table":
        if existing_table is None:
            if if_clause:
                return schema
            raise SpannerStatusError("NOT_FOUND", f"Table not found: {name}")
        on_it = [i.name for i in indexes if i.table.lower() == existing_table.name.lower()]
        if on_it:
            raise failed_precondition(
                f"Cannot drop table {existing_table.name} with indices: {', '.join(on_it)}. "
                f"Drop the indexes first.")
        children = [t.name for t in schema.children(existing_table.name)]
        if children:
            raise failed_precondition(
                f"Cannot drop table {existing_table.name} with interleaved tables: "
                f"{', '.join(children)}. Drop them first.")
        return DatabaseSchema([t for t in tables if t is not existing_table], indexes)
    if existing_index is None:  # drop index
        if if_clause:
            return schema
        raise SpannerStatusError("NOT_FOUND", f"Index not found: {name}")
    return DatabaseSchema(tables, [i for i in indexes if i is not existing_index])


def parse_statement(statement: str, dialect: str):
    """One statement -> ``(kind, name, definition, if_clause)`` or a :class:`RetentionChange`."""
    tokens = _tokens(statement)
    parser = _Parser(tokens, statement, dialect)
    head = " ".join(t.text.upper() for t in tokens[:4] if t.kind == "word")
    if parser.accept("CREATE"):
        if parser.accept("TABLE"):
            return parser.create_table()
        unique = parser.accept("UNIQUE")
        null_filtered = parser.accept("NULL_FILTERED")
        if parser.accept("INDEX"):
            return parser.create_index(unique, null_filtered)
    elif parser.accept("DROP"):
        if parser.accept("TABLE"):
            return parser.drop("drop table")
        if parser.accept("INDEX"):
            return parser.drop("drop index")
    elif parser.accept("ALTER") and parser.accept("DATABASE"):
        change = parser.retention()
        if change is not None:
            return change
    raise unimplemented(statement, head)


def unimplemented(statement: str, head: str) -> SpannerStatusError:
    what = head or statement[:40]
    reason = ""
    if "CHANGE STREAM" in head:
        reason = (" The emulator's change streams replay a seeded history (python -m "
                  "airflow_cdc_emulators.spanner --with-change-stream, or generate_history()); "
                  "they do not follow commits to tables created by DDL.")
    return SpannerStatusError(
        "UNIMPLEMENTED",
        f"DDL statement {what!r}... is not supported by the Spanner emulator, so nothing of "
        f"this request was applied.{reason} Applied statement kinds: {', '.join(APPLIED)}. "
        f"Statement: {statement}")


def _tokens(statement: str) -> list[_Token]:
    tokens, position = [], 0
    text = statement.strip().rstrip(";")
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            if text[position:].strip() == "":
                break
            raise invalid(f"Error parsing Spanner DDL statement: {statement} : unexpected "
                          f"character {text[position:].lstrip()[:1]!r}")
        kind = match.lastgroup
        value = match.group(kind)
        if kind == "backquoted":
            kind = "quoted"
        tokens.append(_Token(kind, value))
        position = match.end()
    return tokens


class _Parser:
    def __init__(self, tokens: list[_Token], statement: str, dialect: str) -> None:
        self.tokens, self.statement, self.dialect = tokens, statement, dialect
        self.position = 0

    # --- tokens -------------------------------------------------------------------------
    def peek(self, ahead: int = 0) -> _Token | None:
        index = self.position + ahead
        return self.tokens[index] if index < len(self.tokens) else None

    def accept(self, *words: str) -> bool:
        """Consume the words if they come next (keywords, case-insensitive)."""
        for offset, word in enumerate(words):
            token = self.peek(offset)
            if token is None or not (token.is_word(word) or (token.kind == "punct"
                                                            and token.text == word)):
                return False
        self.position += len(words)
        return True

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            self.fail(f"expected {' '.join(words)}")

    def fail(self, reason: str):
        token = self.peek()
        where = "the end" if token is None else repr(token.text)
        raise invalid(f"Error parsing Spanner DDL statement: {self.statement} : {reason} at "
                      f"{where}")

    def unsupported(self, feature: str):
        raise SpannerStatusError(
            "UNIMPLEMENTED",
            f"{feature} is not supported by the Spanner emulator's DDL, so nothing of this "
            f"request was applied. Statement: {self.statement}")

    def name(self) -> str:
        token = self.peek()
        if token is None or token.kind not in ("word", "quoted"):
            self.fail("expected a name")
        self.position += 1
        return token.text

    def names(self, *, ordering: bool = False) -> list[str]:
        self.expect("(")
        names = []
        while True:
            names.append(self.name())
            if ordering and self.accept("DESC"):
                self.unsupported(f"descending key column {names[-1]}")
            if ordering:
                self.accept("ASC")
            if self.accept(")"):
                return names
            self.expect(",")

    def done(self) -> None:
        if self.peek() is not None:
            token = self.peek()
            self.unsupported(f"{token.text!r} after the statement's supported part")

    def if_not_exists(self) -> bool:
        return self.accept("IF", "NOT", "EXISTS")

    # --- statements ---------------------------------------------------------------------
    def create_table(self):
        if_clause = self.if_not_exists()
        name = self.name()
        self.expect("(")
        columns, key = [], None
        while not self.accept(")"):
            if self.accept("PRIMARY", "KEY"):
                key = self.names(ordering=True)
            elif self.peek() is not None and self.peek().is_word("CONSTRAINT", "FOREIGN",
                                                                  "CHECK"):
                self.unsupported(f"table constraint {self.peek().text.upper()}")
            else:
                columns.append(self.column())
            if not self.accept(","):
                self.expect(")")
                break
        if self.accept("PRIMARY", "KEY"):
            key = self.names(ordering=True)
        parent, on_delete = None, "NO ACTION"
        self.accept(",")
        if self.accept("INTERLEAVE", "IN", "PARENT"):
            parent = self.name()
            if self.accept("ON", "DELETE"):
                if self.accept("CASCADE"):
                    on_delete = "CASCADE"
                else:
                    self.expect("NO", "ACTION")
        self.done()
        if key is None:
            self.fail(f"table {name} has no PRIMARY KEY")
        try:
            table = TableSpec(name, tuple(columns), tuple(key), parent, on_delete)
        except SchemaError as error:
            raise failed_precondition(f"{error} (in DDL statement: {self.statement})") from error
        return ("create table", name, table, if_clause)

    def column(self) -> ColumnSpec:
        name = self.name()
        type_, commit_timestamp = self.column_type()
        nullable = True
        while self.peek() is not None and not (self.peek().kind == "punct"
                                               and self.peek().text in ",)"):
            if self.accept("NOT", "NULL"):
                nullable = False
            elif self.accept("OPTIONS"):
                commit_timestamp = self.column_options(name) or commit_timestamp
            elif self.accept("PRIMARY", "KEY"):
                self.unsupported(f"an inline PRIMARY KEY on column {name} (write PRIMARY KEY "
                                 f"({name}) after the columns)")
            else:
                self.unsupported(f"column attribute {self.peek().text.upper()} of column {name}")
        try:
            return ColumnSpec(name, type_, nullable, commit_timestamp)
        except SchemaError as error:
            raise failed_precondition(f"{error} (in DDL statement: {self.statement})") from error

    def column_type(self) -> tuple[SpannerType, bool]:
        """The column's type, and whether the type itself makes it a commit-timestamp column
        (PostgreSQL's ``SPANNER.COMMIT_TIMESTAMP``)."""
        if self.dialect == POSTGRESQL:
            return self.pg_type()
        if self.accept("ARRAY"):
            self.expect("<")
            element, _ = self.column_type()
            self.expect(">")
            return SpannerType("ARRAY", element), False
        name = self.name()
        self.length(name)
        try:
            return SpannerType.parse(name), False
        except SchemaError:
            self.unsupported(f"column type {name}")

    def length(self, type_name: str) -> None:
        """``(MAX)`` or ``(<n>)`` after a type: the emulator does not limit lengths."""
        if not self.accept("("):
            return
        token = self.peek()
        if token is None or not (token.is_word("MAX") or token.kind == "number"):
            self.fail(f"expected MAX or a length for {type_name}")
        self.position += 1
        self.expect(")")

    def pg_type(self) -> tuple[SpannerType, bool]:
        if self.accept("SPANNER", ".", "COMMIT_TIMESTAMP"):
            return SpannerType("TIMESTAMP"), True
        for size in (4, 3, 2, 1):  # the longest type name first: "timestamp with time zone"
            words = [self.peek(i) for i in range(size)]
            if all(w is not None and w.kind == "word" for w in words):
                text = " ".join(w.text.lower() for w in words)
                if text in _PG_TYPES:
                    self.position += size
                    break
        else:
            token = self.peek()
            self.unsupported(f"column type {token.text if token else '(none)'!r}")
        self.length(text)
        if self.accept("[", "]"):
            return SpannerType("ARRAY", SpannerType(_PG_TYPES[text])), False
        return SpannerType(_PG_TYPES[text]), False

    def column_options(self, column: str) -> bool:
        self.expect("(")
        allowed = False
        while True:
            option = self.name().lower()
            self.expect("=")
            value = self.name().upper()
            if option != "allow_commit_timestamp":
                raise invalid(f"Option {option} is not a column option: the only column option "
                              f"is allow_commit_timestamp (column {column}). Statement: "
                              f"{self.statement}")
            if value not in ("TRUE", "FALSE", "NULL"):
                self.fail(f"allow_commit_timestamp takes true, false or null, not {value}")
            allowed = value == "TRUE"
            if self.accept(")"):
                return allowed
            self.expect(",")

    def create_index(self, unique: bool, null_filtered: bool):
        if_clause = self.if_not_exists()
        name = self.name()
        self.expect("ON")
        table = self.name()
        columns = self.names(ordering=True)
        storing: list[str] = []
        if self.accept("STORING") or self.accept("INCLUDE"):
            storing = self.names()
        if self.accept(",") and self.accept("INTERLEAVE", "IN"):
            self.name()  # an index interleaved in a parent: the same rows, no other effect here
        self.done()
        try:
            index = IndexSpec(name, table, tuple(columns), tuple(storing), unique, null_filtered)
        except SchemaError as error:
            raise failed_precondition(f"{error} (in DDL statement: {self.statement})") from error
        return ("create index", name, index, if_clause)

    def drop(self, kind: str):
        if_clause = self.accept("IF", "EXISTS")
        name = self.name()
        self.done()
        return (kind, name, None, if_clause)

    def retention(self) -> RetentionChange | None:
        self.name()  # the database id: the emulator serves one schema under every id
        if self.dialect == POSTGRESQL:
            if not self.accept("SET", "SPANNER", ".", "VERSION_RETENTION_PERIOD"):
                return None
            if not (self.accept("=") or self.accept("TO")):
                self.fail("expected = or TO")
        else:
            if not self.accept("SET", "OPTIONS", "(", "VERSION_RETENTION_PERIOD", "="):
                return None
        token = self.peek()
        if token is None or token.kind != "string":
            self.fail("expected the retention period as a string, such as '3h'")
        self.position += 1
        if self.dialect != POSTGRESQL:
            self.expect(")")
        self.done()
        try:
            return RetentionChange(retention_text(token.text))
        except SchemaError as error:
            raise invalid(f"{error} (in DDL statement: {self.statement})") from error
