"""Which columns key each Datastream table: declared by the pipeline or read from the source.

Datastream's Oracle metadata carries no ``primary_keys`` (seed 001, source-specific metadata),
so without help every Oracle table would be keyed by its ROWID, which changes when a row moves.
A pipeline therefore gives key columns per table, and can have the primary keys of the tables
it names looked up in the source database at plan time (:mod:`airflow_cdc.hooks.source_keys`).

Tables are named as Datastream names its objects (``HR.EMPLOYEES``) or by their identifier
form (``HR_EMPLOYEES``, :func:`~airflow_cdc.sources.datastream.events.object_identifier`);
both address the same table, and every map here is keyed by the identifier form, the name an
event's table gets in the changelog. Only the ``SCHEMA.TABLE`` form can be looked up: the
identifier form cannot be split back into schema and table.

Declared keys are part of the stream's source spec (so of its config fingerprint: changing
them asks for a reset, since existing targets are keyed by the old columns); looked-up keys go
into each window's plan file, so a re-run of a window keys its events as the first run did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from airflow_cdc.model import validate_identifier
from airflow_cdc.sources.datastream.events import object_identifier

# Plan file option: {table identifier: [columns]} found in the source database at plan time.
SOURCE_PRIMARY_KEYS_OPTION = "source_primary_keys"


def declared_key_columns(key_columns: Mapping[str, Sequence[str]] | None) -> dict[str, list[str]]:
    """``key_columns`` validated and keyed by table identifier; errors name the table and fix."""
    if key_columns is None:
        return {}
    if not isinstance(key_columns, Mapping):
        raise TypeError(
            f"key_columns {key_columns!r} is a {type(key_columns).__name__}: give a dict of "
            f"Datastream object -> key columns, e.g. {{'HR.EMPLOYEES': ['EMPLOYEE_ID']}}"
        )
    declared: dict[str, list[str]] = {}
    named_as: dict[str, str] = {}
    for table, columns in key_columns.items():
        if not isinstance(table, str) or not table.strip():
            raise ValueError(
                f"key_columns names the table {table!r}: use the Datastream object name "
                f"(SCHEMA.TABLE, e.g. 'HR.EMPLOYEES') or its identifier form ('HR_EMPLOYEES')"
            )
        if isinstance(columns, str) or not isinstance(columns, Sequence) or not columns:
            raise ValueError(
                f"key_columns[{table!r}] is {columns!r}: give a non-empty list of column "
                f"names, e.g. ['EMPLOYEE_ID']"
            )
        names = [validate_identifier(f"key_columns[{table!r}] column", c) for c in columns]
        if len(set(names)) != len(names):
            raise ValueError(
                f"key_columns[{table!r}] is {list(columns)!r}: a column appears twice; name "
                f"each key column once"
            )
        identifier = object_identifier(table.strip())
        if identifier in declared and declared[identifier] != names:
            raise ValueError(
                f"key_columns names table {identifier!r} twice, as {named_as[identifier]!r} "
                f"({declared[identifier]}) and as {table!r} ({names}): keep one entry"
            )
        declared[identifier], named_as[identifier] = names, table
    return declared


def tables_to_look_up(
    source_tables: Sequence[str] | None, declared: Mapping[str, Sequence[str]]
) -> list[tuple[str, str]]:
    """(schema, table) of every source table without declared keys, from ``SCHEMA.TABLE``.

    A name that cannot be split (no schema) is refused: its key could not be looked up, and
    keying it by ROWID silently is the behaviour this exists to avoid.
    """
    found: list[tuple[str, str]] = []
    for name in source_tables or ():
        if object_identifier(name) in declared:
            continue
        schema, _, table = name.rpartition(".")
        if not schema or not table:
            raise ValueError(
                f"source table {name!r} has no schema, so its primary key cannot be looked up "
                f"through key_columns_conn_id: name it as Datastream does (SCHEMA.TABLE, e.g. "
                f"'HR.EMPLOYEES') or declare its key columns in key_columns"
            )
        if (schema, table) not in found:
            found.append((schema, table))
    return found


def table_keys(source: Mapping, options: Mapping) -> dict[str, list[str]]:
    """The key columns a window's events use per table: looked-up keys, then declared ones."""
    looked_up = dict(options.get(SOURCE_PRIMARY_KEYS_OPTION) or {})
    return {**looked_up, **dict(source.get("key_columns") or {})}
