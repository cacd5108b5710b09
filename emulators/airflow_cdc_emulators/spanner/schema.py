"""The emulated database's schema: Spanner column types, tables, and how values are encoded.

A value lives in three forms: the Python value the history keeps (``str``, ``int``, ``float``,
``bool``, ``Decimal``, JSON as ``dict``/``list``, aware ``datetime``, ``date``, ``bytes``,
``list`` for arrays, ``None`` for NULL); its change stream JSON form, the one Spanner puts into
``mods`` (INT64 and NUMERIC as decimal strings so no precision is lost, BYTES as base64, DATE
and TIMESTAMP as ISO text, JSON columns as their compact JSON text, arrays as JSON arrays); and
its type description in ``column_types`` (``{"code": "ARRAY", "array_element_type": {...}}``,
the REST ``Type`` shape). :class:`SpannerType` converts between the forms.
"""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from datetime import date, datetime, timedelta
from decimal import Decimal

from airflow_cdc_emulators.common import EmulatorError, format_ts, parse_ts, validate_identifier

SCALAR_CODES = (
    "STRING",
    "INT64",
    "FLOAT64",
    "BOOL",
    "NUMERIC",
    "JSON",
    "TIMESTAMP",
    "DATE",
    "BYTES",
)
GOOGLESQL = "GOOGLE_STANDARD_SQL"
POSTGRESQL = "POSTGRESQL"

# PostgreSQL-dialect databases describe numeric and jsonb columns with a type annotation.
_PG_ANNOTATIONS = {"NUMERIC": "PG_NUMERIC", "JSON": "PG_JSONB"}
_GSQL_DDL = {
    "STRING": "STRING(MAX)",
    "INT64": "INT64",
    "FLOAT64": "FLOAT64",
    "BOOL": "BOOL",
    "NUMERIC": "NUMERIC",
    "JSON": "JSON",
    "TIMESTAMP": "TIMESTAMP",
    "DATE": "DATE",
    "BYTES": "BYTES(MAX)",
}
_PG_DDL = {
    "STRING": "character varying",
    "INT64": "bigint",
    "FLOAT64": "double precision",
    "BOOL": "boolean",
    "NUMERIC": "numeric",
    "JSON": "jsonb",
    "TIMESTAMP": "timestamp with time zone",
    "DATE": "date",
    "BYTES": "bytea",
}
_WORDS = (
    "amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "harbor", "iris", "juniper",
    "kestrel", "lumen", "maple", "nectar", "onyx", "pine", "quartz", "raven", "sage", "tundra",
)  # fmt: skip


class SchemaError(EmulatorError, ValueError):
    """A table, column or type definition the emulator cannot use."""


@dataclass(frozen=True)
class SpannerType:
    """A Spanner column type: a scalar code, or ``ARRAY`` with an element type."""

    code: str
    element: SpannerType | None = None

    def __post_init__(self) -> None:
        if self.code == "ARRAY":
            if self.element is None or self.element.code == "ARRAY":
                raise SchemaError(
                    "ARRAY needs a scalar element type: ARRAY<STRING>, not ARRAY<ARRAY<...>>"
                )
        elif self.code not in SCALAR_CODES:
            raise SchemaError(
                f"column type {self.code!r} is not supported: use one of "
                f"{', '.join(SCALAR_CODES)} or ARRAY<...> of one of them"
            )

    @classmethod
    def parse(cls, text: str) -> SpannerType:
        """``"INT64"``, ``"ARRAY<STRING>"`` (case-insensitive, lengths like STRING(MAX) ignored)."""
        cleaned = text.strip().upper().replace(" ", "")
        if cleaned.startswith("ARRAY<") and cleaned.endswith(">"):
            return cls("ARRAY", cls.parse(cleaned[6:-1]))
        return cls(cleaned.split("(", 1)[0])

    def __str__(self) -> str:
        return f"ARRAY<{self.element}>" if self.element else self.code

    def type_json(self, dialect: str = GOOGLESQL) -> dict:
        """The ``type`` of a ``column_types`` entry: the Spanner API ``Type`` as JSON."""
        if self.element is not None:
            return {"code": "ARRAY", "array_element_type": self.element.type_json(dialect)}
        described = {"code": self.code}
        if dialect == POSTGRESQL and self.code in _PG_ANNOTATIONS:
            described["type_annotation"] = _PG_ANNOTATIONS[self.code]
        return described

    def ddl(self, dialect: str = GOOGLESQL) -> str:
        if self.element is not None:
            inner = self.element.ddl(dialect)
            return f"{inner}[]" if dialect == POSTGRESQL else f"ARRAY<{inner}>"
        return (_PG_DDL if dialect == POSTGRESQL else _GSQL_DDL)[self.code]

    def encode(self, value: Any) -> Any:
        """The change stream JSON form of a Python value of this type (``None`` stays null)."""
        if value is None:
            return None
        if self.element is not None:
            return [self.element.encode(item) for item in value]
        code = self.code
        if code in ("STRING", "BOOL"):
            return value
        if code == "INT64":
            return str(value)
        if code == "FLOAT64":
            return float(value)
        if code == "NUMERIC":
            return numeric_text(value)
        if code == "JSON":
            return json.dumps(value, sort_keys=True, separators=(",", ":"))
        if code == "TIMESTAMP":
            return format_ts(value)
        if code == "DATE":
            return value.isoformat()
        return base64.b64encode(value).decode("ascii")  # BYTES

    def decode(self, encoded: Any) -> Any:
        """Inverse of :meth:`encode`."""
        if encoded is None:
            return None
        if self.element is not None:
            return [self.element.decode(item) for item in encoded]
        code = self.code
        if code in ("STRING", "BOOL", "FLOAT64"):
            return encoded
        if code == "INT64":
            return int(encoded)
        if code == "NUMERIC":
            return Decimal(encoded)
        if code == "JSON":
            return json.loads(encoded)
        if code == "TIMESTAMP":
            return parse_ts(encoded)
        if code == "DATE":
            return date.fromisoformat(encoded)
        return base64.b64decode(encoded)


def numeric_text(value: Decimal) -> str:
    """Spanner's canonical NUMERIC text: plain notation, no trailing fractional zeros."""
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


@dataclass(frozen=True)
class Column:
    """One column. ``choices`` (optional) are the values a generated STRING takes."""

    name: str
    type: SpannerType
    primary_key: bool = False
    choices: tuple = ()

    def __post_init__(self) -> None:
        validate_identifier("column name", self.name)
        if isinstance(self.type, str):
            object.__setattr__(self, "type", SpannerType.parse(self.type))
        if self.primary_key and self.type.code not in ("STRING", "INT64"):
            raise SchemaError(
                f"key column {self.name!r} has type {self.type}: the emulator generates keys "
                f"of type STRING or INT64 only"
            )


@dataclass(frozen=True)
class Table:
    """A table with a primary key; ``key_count`` rows' keys are drawn from a fixed pool.

    ``weight`` is the table's share of the single-row transactions.
    """

    name: str
    columns: tuple[Column, ...]
    key_count: int = 1000
    weight: float = 1.0
    key_prefix: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        validate_identifier("table name", self.name)
        object.__setattr__(self, "columns", tuple(self.columns))
        names = [c.name for c in self.columns]
        if len(set(n.lower() for n in names)) != len(names):
            raise SchemaError(f"table {self.name!r} has duplicate column names: {names}")
        if not any(c.primary_key for c in self.columns):
            raise SchemaError(
                f"table {self.name!r} has no primary key column: mark one primary_key=True"
            )
        if not any(not c.primary_key for c in self.columns):
            raise SchemaError(f"table {self.name!r} needs at least one non-key column to update")
        if self.key_count < 1:
            raise SchemaError(f"table {self.name!r} key_count {self.key_count} must be at least 1")

    @cached_property
    def key_columns(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.primary_key)

    @cached_property
    def value_columns(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if not c.primary_key)

    def ordinal(self, column_name: str) -> int:
        """1-based position of a column in the table definition."""
        for position, column in enumerate(self.columns, start=1):
            if column.name == column_name:
                return position
        raise SchemaError(f"table {self.name!r} has no column {column_name!r}")

    def key_for(self, index: int) -> tuple:
        """The primary key of the pool's ``index``-th row: deterministic, sorts like ``index``."""
        parts = []
        for position, column in enumerate(self.key_columns):
            if column.type.code == "INT64":
                # The first of several INT64 key parts groups rows (an interleaving-like parent).
                parts.append(
                    index // 8 + 1 if position == 0 and len(self.key_columns) > 1 else index + 1
                )
            else:
                prefix = self.key_prefix or self.name[:4].lower()
                parts.append(f"{prefix}-{index:06d}")
        return tuple(parts)

    def ddl(self, dialect: str = GOOGLESQL) -> str:
        keys = ", ".join(c.name for c in self.key_columns)
        if dialect == POSTGRESQL:
            cols = ",\n  ".join(f"{c.name} {c.type.ddl(dialect)}" for c in self.columns)
            return f"CREATE TABLE {self.name} (\n  {cols},\n  PRIMARY KEY ({keys})\n)"
        cols = ",\n  ".join(
            f"{c.name} {c.type.ddl(dialect)}{' NOT NULL' if c.primary_key else ''}"
            for c in self.columns
        )
        return f"CREATE TABLE {self.name} (\n  {cols},\n) PRIMARY KEY ({keys})"


def generate_value(
    rng: random.Random, column: Column, at: datetime, null_share: float = 0.05
) -> object:
    """A random value for ``column`` written at ``at``; non-key columns are NULL now and then."""
    if not column.primary_key and rng.random() < null_share:
        return None
    spanner_type = column.type
    if spanner_type.element is not None:
        code = spanner_type.element.code
        values = [_generate_scalar(rng, column, code, at) for _ in range(rng.randint(0, 4))]
        if values and rng.random() < 0.1:
            values[rng.randrange(len(values))] = None  # arrays may hold NULL elements
        return values
    return _generate_scalar(rng, column, spanner_type.code, at)


def _generate_scalar(rng: random.Random, column: Column, code: str, at: datetime) -> object:
    if code == "STRING":
        if column.choices:
            return rng.choice(column.choices)
        return f"{rng.choice(_WORDS)}-{rng.randint(1, 9999)}"
    if code == "INT64":
        # Now and then beyond 2**53, where a JSON number would lose digits.
        return rng.randint(2**53, 2**62) if rng.random() < 0.05 else rng.randint(-1000, 1_000_000)
    if code == "FLOAT64":
        return round(rng.uniform(-10_000.0, 10_000.0), 4)
    if code == "BOOL":
        return rng.random() < 0.5
    if code == "NUMERIC":
        return Decimal(rng.randint(-(10**13), 10**13)).scaleb(-rng.choice((0, 2, 4, 9)))
    if code == "JSON":
        return {
            "sku": f"{rng.choice(_WORDS)}-{rng.randint(1, 999)}",
            "qty": rng.randint(1, 20),
            "gift": rng.random() < 0.2,
            "notes": None if rng.random() < 0.5 else rng.choice(_WORDS),
        }
    if code == "TIMESTAMP":
        return at - timedelta(microseconds=rng.randint(0, 30 * 86_400 * 1_000_000))
    if code == "DATE":
        return (at - timedelta(days=rng.randint(0, 3650))).date()
    return rng.randbytes(rng.randint(1, 24))  # BYTES


def _col(name: str, type_text: str, primary_key: bool = False, choices: tuple = ()) -> Column:
    return Column(name, SpannerType.parse(type_text), primary_key, choices)


# Three tables that together use every supported type, a composite key and arrays.
DEFAULT_TABLES: tuple[Table, ...] = (
    Table(
        "Accounts",
        (
            _col("AccountId", "STRING", primary_key=True),
            _col("Owner", "STRING"),
            _col("Balance", "NUMERIC"),
            _col("Active", "BOOL"),
            _col("Tags", "ARRAY<STRING>"),
            _col("OpenedOn", "DATE"),
            _col("UpdatedAt", "TIMESTAMP"),
        ),
        key_count=1500,
        weight=1.0,
        key_prefix="acct",
    ),
    Table(
        "Orders",
        (
            _col("CustomerId", "INT64", primary_key=True),
            _col("OrderId", "INT64", primary_key=True),
            _col("Amount", "FLOAT64"),
            _col("Status", "STRING", choices=("NEW", "PAID", "SHIPPED", "DELIVERED", "RETURNED")),
            _col("Details", "JSON"),
            _col("Quantities", "ARRAY<INT64>"),
            _col("PlacedAt", "TIMESTAMP"),
        ),
        key_count=4000,
        weight=1.5,
    ),
    Table(
        "Documents",
        (
            _col("DocumentId", "STRING", primary_key=True),
            _col("Body", "BYTES"),
            _col("Revision", "INT64"),
            _col("Score", "FLOAT64"),
            _col("Reviewed", "BOOL"),
            _col("Metadata", "JSON"),
            _col("ReviewDates", "ARRAY<DATE>"),
        ),
        key_count=1200,
        weight=0.8,
        key_prefix="doc",
    ),
)
