"""Compare Iceberg target tables with a source's true state, value by value.

Both sides are brought to the change stream's JSON form (``SpannerType.encode``), so a
NUMERIC compares as its canonical text, BYTES as base64, a TIMESTAMP as ISO text, and so on.
The target is read with pyiceberg from the table's metadata: an independent reader.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path


@dataclass
class TableComparison:
    table: str
    expected_rows: int
    target_rows: int
    missing: list = field(default_factory=list)
    unexpected: list = field(default_factory=list)
    different: list = field(default_factory=list)

    @property
    def mismatches(self) -> int:
        return len(self.missing) + len(self.unexpected) + len(self.different)


def latest_metadata(table_dir: Path) -> Path:
    """The current metadata file of a Hadoop-catalog table (version-hint.text names it)."""
    metadata = table_dir / "metadata"
    hint = metadata / "version-hint.text"
    if hint.exists():
        candidate = metadata / f"v{hint.read_text().strip()}.metadata.json"
        if candidate.exists():
            return candidate
    files = sorted(metadata.glob("v*.metadata.json"), key=lambda p: int(p.name[1:].split(".")[0]))
    if not files:
        raise FileNotFoundError(f"no Iceberg metadata under {metadata}")
    return files[-1]


def read_iceberg_rows(table_dir: Path) -> list[dict]:
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(str(latest_metadata(table_dir)))
    return table.scan().to_arrow().to_pylist()


def iceberg_column_types(table_dir: Path) -> dict:
    """Column name -> pyiceberg type of the table's current schema (e.g. ``DecimalType(10, 2)``)."""
    from pyiceberg.table import StaticTable

    schema = StaticTable.from_metadata(str(latest_metadata(table_dir))).schema()
    return {column.name: column.field_type for column in schema.fields}


def _python_value(column_type, value):
    """A target value as the Python value the source type uses."""
    if value is None:
        return None
    if column_type.element is not None:
        return [_python_value(column_type.element, v) for v in value]
    code = column_type.code
    if code == "JSON":
        return json.loads(value) if isinstance(value, str) else value
    if code == "NUMERIC":
        return Decimal(str(value))
    if code == "TIMESTAMP":
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return value
    if code == "DATE" and isinstance(value, datetime):
        return value.date()
    if code == "BYTES" and isinstance(value, str):
        import base64

        return base64.b64decode(value)
    if code == "INT64":
        return int(value)
    if code == "FLOAT64":
        return float(value)
    return value


def compare_table(table, truth_rows: dict, target_rows: list[dict]) -> TableComparison:
    """``table`` is the emulator's Table; ``truth_rows`` maps key tuples to Python rows."""
    columns = table.columns
    key_columns = [c for c in columns if c.primary_key]

    def encoded(row: dict, from_target: bool) -> dict:
        out = {}
        for column in columns:
            value = row.get(column.name)
            if from_target:
                value = _python_value(column.type, value)
            out[column.name] = column.type.encode(value)
        return out

    expected = {
        tuple(c.type.encode(v) for c, v in zip(key_columns, key)): encoded(row, False)
        for key, row in truth_rows.items()
    }
    actual = {}
    for row in target_rows:
        values = encoded(row, True)
        actual[tuple(values[c.name] for c in key_columns)] = values
    result = TableComparison(table.name, len(expected), len(actual))
    for key in sorted(expected.keys() - actual.keys()):
        result.missing.append(key)
    for key in sorted(actual.keys() - expected.keys()):
        result.unexpected.append(key)
    for key in sorted(expected.keys() & actual.keys()):
        if expected[key] != actual[key]:
            diff = {
                name: (expected[key][name], actual[key][name])
                for name in expected[key]
                if expected[key][name] != actual[key][name]
            }
            result.different.append((key, diff))
    return result


def compare_spanner_history(history, warehouse: Path, end) -> list[TableComparison]:
    """Each table of a Spanner emulator ``history`` compared with its target in the
    ``current`` namespace of ``warehouse``, as it truly was just before ``end`` (the end of
    the last window applied)."""
    from datetime import timedelta

    truth = history.state_at(end - timedelta(microseconds=1))
    return [compare_table(table, truth[table.name],
                          read_iceberg_rows(warehouse / "current" / table.name))
            for table in history.tables]
