"""The SQL the emulator answers on tables: a tokenizer and a recursive-descent parser.

The grammar is small on purpose (a hand-written parser rather than a dependency such as
sqlglot: the emulator ships in the package, and a general parser would accept far more than
the emulator can answer, so every unsupported feature would still need its own refusal)::

    statement := select | insert | update | delete [";"]
    select    := SELECT ( "*" | item ("," item)* ) FROM table [[AS] alias]
                 [WHERE condition] [ORDER BY order ("," order)*] [LIMIT value [OFFSET value]]
    item      := column [[AS] alias]
    condition := predicate (AND predicate)*
    predicate := column op value | value op column | column IS [NOT] NULL | TRUE
                 | "(" condition ")"                     op := = != <> < <= > >=
    insert    := INSERT [INTO] table "(" column ("," column)* ")" VALUES row ("," row)*
    update    := UPDATE table [[AS] alias] SET column "=" value ("," column "=" value)*
                 [WHERE condition]
    delete    := DELETE [FROM] table [[AS] alias] [WHERE condition]
    value     := @param | $n | 'text' | integer | decimal | TRUE | FALSE | NULL
                 | TIMESTAMP 'text' | DATE 'text' | NUMERIC 'text' | JSON 'text'
                 | PENDING_COMMIT_TIMESTAMP() | SPANNER.PENDING_COMMIT_TIMESTAMP()
                 (PostgreSQL: a value may end in ::type)

Dialects: GoogleSQL quotes identifiers in backticks and strings in '...' or "...", and binds
``@name``; PostgreSQL quotes identifiers in "..." and strings in '...', and binds ``$1``
(the client sends it as parameter ``p1``). A table is ``name`` or ``schema.name``
(``INFORMATION_SCHEMA.COLUMNS``). OR, NOT, IN, LIKE, BETWEEN, joins, functions, subqueries,
GROUP BY, DISTINCT, UNION and table hints are refused with INVALID_ARGUMENT naming the feature.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from ..schema import POSTGRESQL
from .status import invalid

SHAPE = (
    "SELECT <columns | *> FROM <table> [WHERE <column> <op> <value> [AND ...]] "
    "[ORDER BY <column> [ASC|DESC], ...] [LIMIT n]; INSERT INTO <table> (<columns>) VALUES (...); "
    "UPDATE <table> SET <column> = <value>, ... WHERE ...; DELETE FROM <table> WHERE ..."
)
_COMPARISONS = {"=": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_TYPED_LITERALS = ("TIMESTAMP", "TIMESTAMPTZ", "DATE", "NUMERIC", "JSON", "JSONB")
_UNSUPPORTED_WORDS = {
    "OR": "OR",
    "NOT": "NOT",
    "IN": "IN",
    "LIKE": "LIKE",
    "BETWEEN": "BETWEEN",
    "JOIN": "joins (JOIN)",
    "INNER": "joins (JOIN)",
    "LEFT": "joins (JOIN)",
    "RIGHT": "joins (JOIN)",
    "FULL": "joins (JOIN)",
    "CROSS": "joins (JOIN)",
    "GROUP": "GROUP BY",
    "HAVING": "HAVING",
    "UNION": "UNION",
    "INTERSECT": "INTERSECT",
    "EXCEPT": "EXCEPT",
    "WINDOW": "WINDOW",
    "TABLESAMPLE": "TABLESAMPLE",
    "UNNEST": "UNNEST",
    "WITH": "WITH",
    "RETURNING": "RETURNING",
    "THEN": "THEN RETURN",
    "CASE": "CASE",
    "EXISTS": "EXISTS",
}
_TOKEN = re.compile(
    r"""
    (?P<space>\s+|--[^\n]*|\#[^\n]*|/\*.*?\*/)
  | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<word>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<backtick>`(?:[^`\\]|\\.)*`)
  | (?P<double>"(?:[^"\\]|\\.|"")*")
  | (?P<single>'(?:[^'\\]|\\.|'')*')
  | (?P<param>@[A-Za-z_][A-Za-z_0-9]*|\$\d+)
  | (?P<op><=|>=|<>|!=|::|[=<>(),.*;+-])
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class Token:
    kind: str  # word | identifier (quoted) | string | number | param | op | end
    text: str
    value: object
    position: int

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.value.upper() in words


@dataclass(frozen=True)
class ColumnRef:
    name: str
    quoted: bool
    qualifier: str | None = None
    written: str = ""  # as written in the query: GoogleSQL names a result column so


@dataclass(frozen=True)
class TableRef:
    parts: tuple[str, ...]
    quoted: tuple[bool, ...]

    @property
    def text(self) -> str:
        return ".".join(self.parts)


@dataclass(frozen=True)
class Literal:
    value: object
    kind: str  # string | int | float | bool | null | timestamp | date | numeric | json


@dataclass(frozen=True)
class Param:
    name: str
    written: str


@dataclass(frozen=True)
class PendingCommitTimestamp:
    written: str


Value = Literal | Param | PendingCommitTimestamp


@dataclass(frozen=True)
class Predicate:
    column: ColumnRef
    op: str  # = != < <= > >= IS NULL | IS NOT NULL
    value: Value | None = None


@dataclass(frozen=True)
class OrderItem:
    column: ColumnRef
    descending: bool = False
    nulls_first: bool | None = None


@dataclass(frozen=True)
class Select:
    items: tuple[tuple[ColumnRef, str | None], ...] | None  # None: SELECT *
    table: TableRef
    alias: str | None
    where: tuple[Predicate, ...]
    order_by: tuple[OrderItem, ...]
    limit: Value | None
    offset: Value | None


@dataclass(frozen=True)
class Insert:
    table: TableRef
    columns: tuple[ColumnRef, ...]
    rows: tuple[tuple[Value, ...], ...]


@dataclass(frozen=True)
class Update:
    table: TableRef
    alias: str | None
    assignments: tuple[tuple[ColumnRef, Value], ...]
    where: tuple[Predicate, ...]


@dataclass(frozen=True)
class Delete:
    table: TableRef
    alias: str | None
    where: tuple[Predicate, ...]


Statement = Select | Insert | Update | Delete


def parse(sql: str, dialect: str) -> Statement:
    """Parse one statement of ``dialect``; refuse with INVALID_ARGUMENT what it cannot answer."""
    return _Parser(sql, tokenize(sql, dialect), dialect).statement()


def is_dml(sql: str) -> bool:
    head = sql.lstrip().split(None, 1)
    return bool(head) and head[0].upper() in ("INSERT", "UPDATE", "DELETE")


def tokenize(sql: str, dialect: str) -> list[Token]:
    tokens, position = [], 0
    postgresql = dialect == POSTGRESQL
    while position < len(sql):
        match = _TOKEN.match(sql, position)
        if sql.startswith("@{", position):
            raise invalid(f"Not supported by the Spanner emulator's SQL: hints (@{{...}}). {SHAPE}")
        if match is None:
            raise invalid(
                f"Syntax error: Unexpected character {sql[position]!r} at position {position + 1}"
            )
        kind, text = match.lastgroup, match.group()
        position = match.end()
        start = match.start()
        if kind == "space":
            continue
        if kind == "number":
            is_int = re.fullmatch(r"\d+", text) is not None
            tokens.append(Token("number", text, int(text) if is_int else Decimal(text), start))
        elif kind == "word":
            tokens.append(Token("word", text, text, start))
        elif kind == "backtick":
            if postgresql:
                raise invalid(
                    f"Syntax error at position {start + 1}: PostgreSQL quotes identifiers in "
                    f'"double quotes", not backticks: {text}'
                )
            tokens.append(Token("identifier", text, _unescape(text[1:-1]), start))
        elif kind == "double":
            if postgresql:
                tokens.append(Token("identifier", text, text[1:-1].replace('""', '"'), start))
            else:
                tokens.append(Token("string", text, _unescape(text[1:-1]), start))
        elif kind == "single":
            body = text[1:-1]
            value = body.replace("''", "'") if postgresql else _unescape(body)
            tokens.append(Token("string", text, value, start))
        elif kind == "param":
            if text.startswith("$") != postgresql:
                expected = "$1, $2, ..." if postgresql else "@name"
                raise invalid(
                    f"Syntax error at position {start + 1}: query parameters of this database's "
                    f"dialect are written {expected}; got {text}"
                )
            name = f"p{text[1:]}" if postgresql else text[1:]
            tokens.append(Token("param", text, name, start))
        else:
            tokens.append(Token("op", text, text, start))
    tokens.append(Token("end", "", None, len(sql)))
    return tokens


def _unescape(body: str) -> str:
    escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "`": "`"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(1)), body)


class _Parser:
    def __init__(self, sql: str, tokens: list[Token], dialect: str) -> None:
        self.sql = sql
        self.tokens = tokens
        self.index = 0
        self.dialect = dialect

    # --- token helpers -----------------------------------------------------------------
    @property
    def token(self) -> Token:
        return self.tokens[self.index]

    def peek(self, offset: int = 1) -> Token:
        return self.tokens[min(self.index + offset, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.token
        self.index += 1
        return token

    def accept_word(self, *words: str) -> Token | None:
        if self.token.is_word(*words):
            return self.advance()
        return None

    def accept_op(self, op: str) -> Token | None:
        if self.token.kind == "op" and self.token.value == op:
            return self.advance()
        return None

    def expect_word(self, word: str) -> Token:
        token = self.accept_word(word)
        if token is None:
            self.fail(f"Expected keyword {word}")
        return token

    def expect_op(self, op: str) -> Token:
        token = self.accept_op(op)
        if token is None:
            self.fail(f'Expected "{op}"')
        return token

    def fail(self, what: str):
        token = self.token
        found = "end of input" if token.kind == "end" else f'"{token.text}"'
        raise invalid(f"Syntax error: {what} but got {found} [at position {token.position + 1}]")

    def unsupported(self, feature: str):
        raise invalid(
            f"Not supported by the Spanner emulator's SQL: {feature}. It answers one table, "
            f"column comparisons joined by AND: {SHAPE}"
        )

    def check_unsupported(self) -> None:
        token = self.token
        if token.kind == "word" and token.value.upper() in _UNSUPPORTED_WORDS:
            self.unsupported(_UNSUPPORTED_WORDS[token.value.upper()])

    # --- statements --------------------------------------------------------------------
    def statement(self) -> Statement:
        if self.token.is_word("SELECT"):
            parsed = self.select()
        elif self.token.is_word("INSERT"):
            parsed = self.insert()
        elif self.token.is_word("UPDATE"):
            parsed = self.update()
        elif self.token.is_word("DELETE"):
            parsed = self.delete()
        else:
            self.check_unsupported()
            self.fail("Expected SELECT, INSERT, UPDATE or DELETE")
        self.accept_op(";")
        if self.token.kind != "end":
            self.check_unsupported()
            self.fail("Expected end of statement")
        return parsed

    def select(self) -> Select:
        self.expect_word("SELECT")
        if self.accept_word("DISTINCT"):
            self.unsupported("SELECT DISTINCT")
        self.accept_word("ALL")
        items = None
        if not self.accept_op("*"):
            items = [self.select_item()]
            while self.accept_op(","):
                items.append(self.select_item())
            items = tuple(items)
        if not self.token.is_word("FROM"):
            self.check_unsupported()
            self.fail("Expected FROM (queries read one table)")
        self.advance()
        table = self.table_ref()
        alias = self.alias()
        where = self.where()
        order_by: list[OrderItem] = []
        if self.accept_word("ORDER"):
            self.expect_word("BY")
            order_by.append(self.order_item())
            while self.accept_op(","):
                order_by.append(self.order_item())
        limit = offset = None
        if self.accept_word("LIMIT"):
            limit = self.value()
            if self.accept_word("OFFSET"):
                offset = self.value()
        self.check_unsupported()
        return Select(items, table, alias, where, tuple(order_by), limit, offset)

    def insert(self) -> Insert:
        self.expect_word("INSERT")
        if self.token.is_word("OR"):
            self.unsupported("INSERT OR UPDATE / INSERT OR IGNORE")
        self.accept_word("INTO")
        table = self.table_ref(in_from=False)
        self.expect_op("(")
        columns = [self.column_ref()]
        while self.accept_op(","):
            columns.append(self.column_ref())
        self.expect_op(")")
        if self.token.is_word("SELECT"):
            self.unsupported("INSERT ... SELECT")
        self.expect_word("VALUES")
        rows = [self.row()]
        while self.accept_op(","):
            rows.append(self.row())
        if self.token.is_word("ON"):
            self.unsupported("ON CONFLICT")
        self.check_unsupported()
        return Insert(table, tuple(columns), tuple(rows))

    def row(self) -> tuple[Value, ...]:
        self.expect_op("(")
        values = [self.value(allow_pending=True)]
        while self.accept_op(","):
            values.append(self.value(allow_pending=True))
        self.expect_op(")")
        return tuple(values)

    def update(self) -> Update:
        self.expect_word("UPDATE")
        table = self.table_ref()
        alias = self.alias(stop=("SET",))
        self.expect_word("SET")
        assignments = [self.assignment()]
        while self.accept_op(","):
            assignments.append(self.assignment())
        where = self.where(required=True)
        self.check_unsupported()
        return Update(table, alias, tuple(assignments), where)

    def assignment(self) -> tuple[ColumnRef, Value]:
        column = self.column_ref()
        self.expect_op("=")
        return column, self.value(allow_pending=True)

    def delete(self) -> Delete:
        self.expect_word("DELETE")
        self.accept_word("FROM")
        table = self.table_ref()
        alias = self.alias()
        where = self.where(required=True)
        self.check_unsupported()
        return Delete(table, alias, where)

    # --- parts -------------------------------------------------------------------------
    def identifier(self, what: str) -> tuple[str, bool]:
        token = self.token
        if token.kind == "identifier":
            self.advance()
            return token.value, True
        if token.kind == "word":
            self.check_unsupported()
            self.advance()
            return token.value, False
        if token.kind == "op" and token.value == "(" and self.peek().is_word("SELECT"):
            self.unsupported("subqueries")
        self.fail(f"Expected {what}")

    def table_ref(self, in_from: bool = True) -> TableRef:
        if self.token.kind == "op" and self.token.value == "(":
            self.unsupported("subqueries")
        parts, quoted = [], []
        name, was_quoted = self.identifier("a table name")
        parts.append(name)
        quoted.append(was_quoted)
        while self.accept_op("."):
            name, was_quoted = self.identifier("a table name")
            parts.append(name)
            quoted.append(was_quoted)
        if in_from and self.token.kind == "op" and self.token.value == "(":
            self.unsupported(f"table-valued functions ({'.'.join(parts)}(...))")
        return TableRef(tuple(parts), tuple(quoted))

    def alias(self, stop: tuple[str, ...] = ()) -> str | None:
        explicit = self.accept_word("AS")
        token = self.token
        reserved = (
            "WHERE", "ORDER", "LIMIT", "SET", "GROUP", "HAVING", "UNION", "JOIN", "INNER", "LEFT",
            "RIGHT", "FULL", "CROSS", "ON", "OFFSET", "WINDOW", "TABLESAMPLE", "EXCEPT",
            "INTERSECT", *stop,
        )  # fmt: skip
        if token.kind == "identifier" or (token.kind == "word" and not token.is_word(*reserved)):
            self.advance()
            alias = token.value
        elif explicit:
            self.fail("Expected an alias after AS")
        else:
            alias = None
        if self.token.kind == "op" and self.token.value == ",":
            self.unsupported("joins (FROM a, b)")
        return alias

    def column_ref(self) -> ColumnRef:
        start = self.token.position
        name, quoted = self.identifier("a column name")
        if self.token.kind == "op" and self.token.value == "(":
            self.unsupported(f"functions ({name}(...))")
        qualifier = None
        if self.accept_op("."):
            qualifier = name
            name, quoted = self.identifier("a column name")
            if self.token.kind == "op" and self.token.value == "(":
                self.unsupported(f"functions ({qualifier}.{name}(...))")
        last = self.tokens[self.index - 1]
        return ColumnRef(name, quoted, qualifier, self.sql[start : last.position + len(last.text)])

    def select_item(self) -> tuple[ColumnRef, str | None]:
        token = self.token
        if token.is_word("FROM"):
            self.fail("Expected a column name")
        if token.kind not in ("word", "identifier") or (
            token.kind == "word" and token.value.upper() in ("TRUE", "FALSE", "NULL", "CAST")
        ):
            if token.kind == "op" and token.value == "(":
                self.unsupported("subqueries and expressions in the select list")
            self.unsupported(f"expressions in the select list ({token.text})")
        column = self.column_ref()
        if self.token.kind == "op" and self.token.value in ("+", "-", "*", "::", "="):
            self.unsupported("expressions in the select list")
        if self.accept_word("AS"):
            alias, _ = self.identifier("an alias")
            return column, alias
        if self.token.kind == "identifier" or (
            self.token.kind == "word" and not self.token.is_word("FROM")
        ):
            self.check_unsupported()
            alias, _ = self.identifier("an alias")
            return column, alias
        return column, None

    def order_item(self) -> OrderItem:
        column = self.column_ref()
        descending = False
        if self.accept_word("DESC"):
            descending = True
        else:
            self.accept_word("ASC")
        nulls_first = None
        if self.accept_word("NULLS"):
            if self.accept_word("FIRST"):
                nulls_first = True
            else:
                self.expect_word("LAST")
                nulls_first = False
        return OrderItem(column, descending, nulls_first)

    def where(self, required: bool = False) -> tuple[Predicate, ...]:
        if not self.accept_word("WHERE"):
            if required and self.dialect != POSTGRESQL:
                self.check_unsupported()
                self.fail("Expected WHERE (GoogleSQL UPDATE and DELETE need one: WHERE TRUE)")
            return ()
        return tuple(self.condition())

    def condition(self) -> list[Predicate]:
        predicates = self.predicate()
        while True:
            if self.accept_word("AND"):
                predicates += self.predicate()
                continue
            self.check_unsupported()
            return predicates

    def predicate(self) -> list[Predicate]:
        if self.accept_word("NOT"):
            self.unsupported("NOT")
        if self.token.kind == "op" and self.token.value == "(":
            if self.peek().is_word("SELECT"):
                self.unsupported("subqueries")
            self.advance()
            inner = self.condition()
            self.expect_op(")")
            return inner
        if self.token.is_word("TRUE") and not self._comparison_follows(1):
            self.advance()
            return []
        if self.token.kind in ("word", "identifier") and not self._is_value_word(self.token):
            column = self.column_ref()
            if self.accept_word("IS"):
                negated = self.accept_word("NOT") is not None
                if not self.accept_word("NULL"):
                    self.fail("Expected NULL after IS [NOT]")
                return [Predicate(column, "IS NOT NULL" if negated else "IS NULL")]
            op = self.comparison_op()
            return [Predicate(column, op, self.value())]
        value = self.value()
        op = self.comparison_op()
        if self.token.kind not in ("word", "identifier") or self._is_value_word(self.token):
            self.unsupported("comparisons that do not name a column")
        return [Predicate(self.column_ref(), _FLIPPED[op], value)]

    def _comparison_follows(self, offset: int) -> bool:
        token = self.peek(offset)
        return token.kind == "op" and token.value in _COMPARISONS

    def _is_value_word(self, token: Token) -> bool:
        if token.kind != "word":
            return False
        word = token.value.upper()
        if word in ("TRUE", "FALSE", "NULL", "PENDING_COMMIT_TIMESTAMP"):
            return True
        if word in _TYPED_LITERALS and self.peek().kind == "string":
            return True
        return word == "SPANNER" and self.peek().kind == "op" and self.peek().value == "."

    def comparison_op(self) -> str:
        token = self.token
        if token.kind == "op" and token.value in _COMPARISONS:
            self.advance()
            return _COMPARISONS[token.value]
        self.check_unsupported()
        self.fail("Expected a comparison (=, !=, <>, <, <=, >, >=) or IS [NOT] NULL")

    def value(self, allow_pending: bool = False) -> Value:
        value = self._value(allow_pending)
        if self.accept_op("::"):
            if self.dialect != POSTGRESQL:
                self.fail("Expected a value (:: casts are PostgreSQL)")
            cast, _ = self.identifier("a type name")
            while self.token.kind == "word" and not self.token.is_word(
                "AND", "ORDER", "LIMIT", "OFFSET", "WHERE"
            ):  # "timestamp with time zone", "double precision"
                self.advance()
            if isinstance(value, Literal) and value.kind == "string":
                value = _cast_literal(value.value, cast.upper())
        return value

    def _value(self, allow_pending: bool) -> Value:
        token = self.token
        if token.kind == "param":
            self.advance()
            return Param(token.value, token.text)
        if token.kind == "string":
            self.advance()
            return Literal(token.value, "string")
        if token.kind == "number":
            self.advance()
            return Literal(token.value, "int" if isinstance(token.value, int) else "float")
        if token.kind == "op" and token.value in ("-", "+") and self.peek().kind == "number":
            self.advance()
            number = self.advance().value
            number = -number if token.value == "-" else number
            return Literal(number, "int" if isinstance(number, int) else "float")
        if token.kind == "word":
            word = token.value.upper()
            if word in ("TRUE", "FALSE"):
                self.advance()
                return Literal(word == "TRUE", "bool")
            if word == "NULL":
                self.advance()
                return Literal(None, "null")
            if word in _TYPED_LITERALS and self.peek().kind == "string":
                self.advance()
                return _cast_literal(self.advance().value, word)
            start = token.position
            if word == "SPANNER" and self.peek().kind == "op" and self.peek().value == ".":
                self.advance()
                self.advance()
                word = self.token.value.upper() if self.token.kind == "word" else ""
            if word == "PENDING_COMMIT_TIMESTAMP":
                self.advance()
                self.expect_op("(")
                end = self.expect_op(")")
                written = self.sql[start : end.position + 1]
                if not allow_pending:
                    self.unsupported(f"{written} outside INSERT VALUES and UPDATE SET")
                return PendingCommitTimestamp(written)
            if self.peek().kind == "op" and self.peek().value == "(":
                self.unsupported(f"functions ({token.text}(...))")
            self.check_unsupported()
        if token.kind == "op" and token.value == "(" and self.peek().is_word("SELECT"):
            self.unsupported("subqueries")
        self.fail("Expected a value (a literal, a query parameter or NULL)")


def _cast_literal(text: str, type_name: str) -> Literal:
    kinds = {
        "TIMESTAMP": "timestamp",
        "TIMESTAMPTZ": "timestamp",
        "DATE": "date",
        "NUMERIC": "numeric",
        "JSON": "json",
        "JSONB": "json",
    }
    kind = kinds.get(type_name)
    if kind is None:
        return Literal(text, "string")
    return Literal(text, kind)
