"""Each source table's target schema for one window: routing, typing, evolution, bad declarations.

Procedure (:func:`plan_tables`), from one small aggregate of the window's changelog rows (one
row per distinct source table x ``column_types_json``, with a count and the first commit
timestamp):

1. Route: the target of a source table comes from ``targets.mapping`` or its own name. A source
   table with no usable target name is dead-lettered whole.
2. Keys: the key columns are the target's (table property ``airflow-cdc.key-columns``) or, for
   a new target, those of the window's first change (by commit timestamp, then ordering key).
   Rows with another key-column set are dead-lettered by the fold: they address no target row.
3. Columns: declarations (distinct ``column_types_json``) are read in commit-timestamp order.
   A column first seen is added (schema evolution), with the type that holds every type the
   window declares for it (``decimal(38,2)`` for ``decimal(38,1)`` and ``decimal(38,2)``); a
   type Iceberg can promote (``float`` -> ``double``, a decimal's precision) widens an
   existing column; a column absent from later declarations stays
   (never dropped). A declaration with an incompatible type change, an unsupported type or a
   column name that is not an identifier (or is reserved, or clashes with another column but
   for case) is bad: its rows are dead-lettered with the reason, and it changes nothing.
4. DDL (:func:`prepare_target`): create the target, tombstone and history tables if missing,
   then add and widen columns. Every statement is idempotent, so a re-run repeats it safely.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from pyspark.sql import SparkSession

from airflow_cdc.model import InvalidIdentifierError, validate_identifier
from airflow_cdc.sources.column_types import (
    UnsupportedColumnTypeError,
    common_spark_type,
    merged_spark_type,
    spark_sql_type,
)
from airflow_cdc.spark_jobs.apply.config import WRITE_MODES, ApplyConfig, TableName
from airflow_cdc.spark_jobs.apply.sql import string
from airflow_cdc.spark_jobs.changelog import Declaration

KEY_COLUMNS_PROPERTY = "airflow-cdc.key-columns"
CDC_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("_cdc_seq", "binary", "ordering key of the change this row reflects: bytes that sort like the source's order"),
    ("_cdc_commit_ts", "timestamp", "source commit timestamp of that change"),
    ("_cdc_window", "string", "id of the airflow-cdc window that applied that change"),
)
HISTORY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("_cdc_op", "string", "operation of the change that made this version (INSERT, UPDATE, READ)"),
    ("valid_from", "timestamp", "source commit timestamp from which this version holds"),
    ("valid_to", "timestamp", "source commit timestamp of the next change of the key; NULL while current"),
)
_RESERVED_PREFIXES = ("_cdc_", "__")
_RESERVED_NAMES = {"valid_from", "valid_to"}


@dataclass
class TablePlan:
    """What apply does with one source table in this window."""

    source_table: str
    target: TableName | None
    rows: int = 0
    reason: str | None = None  # set: every row of the table is dead-lettered with it
    target_exists: bool = False
    target_properties: dict[str, str] = field(default_factory=dict)  # the existing target's
    key_names: tuple[str, ...] = ()
    key_types: dict[str, str] = field(default_factory=dict)
    columns: dict[str, str] = field(default_factory=dict)  # business column -> Spark type
    existing_columns: dict[str, str] = field(default_factory=dict)
    bad_declarations: dict[str | None, str] = field(default_factory=dict)  # column_types_json -> reason
    history: bool = False

    @property
    def added_columns(self) -> dict[str, str]:
        return {c: t for c, t in self.columns.items() if c not in self.existing_columns}

    @property
    def widened_columns(self) -> dict[str, str]:
        return {
            c: t for c, t in self.columns.items() if c in self.existing_columns and self.existing_columns[c] != t
        }

    @property
    def tombstones(self) -> TableName:
        assert self.target is not None
        from airflow_cdc.spark_jobs.apply.config import TOMBSTONES_SUFFIX

        return self.target.with_suffix(TOMBSTONES_SUFFIX)

    @property
    def history_table(self) -> TableName:
        assert self.target is not None
        from airflow_cdc.spark_jobs.apply.config import HISTORY_SUFFIX

        return self.target.with_suffix(HISTORY_SUFFIX)


@dataclass(frozen=True)
class ExistingTarget:
    key_names: tuple[str, ...]
    key_types: dict[str, str]
    columns: dict[str, str]
    properties: dict[str, str] = field(default_factory=dict)


def read_existing_target(spark: SparkSession, target: TableName) -> ExistingTarget | None:
    """The key and business columns of an existing target table, or None if it is missing."""
    if not spark.catalog.tableExists(target.qualified):
        return None
    properties = {row.key: row.value for row in spark.sql(f"SHOW TBLPROPERTIES {target.sql}").collect()}
    key_names = tuple(json.loads(properties.get(KEY_COLUMNS_PROPERTY, "[]")))
    fields = {f.name: f.dataType.simpleString() for f in spark.table(target.qualified).schema.fields}
    cdc = {name for name, _, _ in CDC_COLUMNS}
    return ExistingTarget(
        key_names=key_names,
        key_types={k: fields[k] for k in key_names if k in fields},
        columns={c: t for c, t in fields.items() if c not in key_names and c not in cdc},
        properties=properties,
    )


def plan_tables(
    spark: SparkSession,
    config: ApplyConfig,
    declarations: Iterable[Declaration],
    first_keys: Callable[[str | None], tuple[str, ...] | None],
) -> list[TablePlan]:
    """One :class:`TablePlan` per source table of the window (steps 1-3 of the module doc).

    ``first_keys(source_table)`` gives the key-column names of the table's first change in
    the window; it is asked only for tables whose target does not exist yet.
    """
    by_table: dict[str, list[Declaration]] = {}
    for declaration in declarations:
        by_table.setdefault(declaration.source_table, []).append(declaration)
    # Targets whose names differ only by case are one table in catalogs that fold case (Hive,
    # Glue, most REST catalogs) and to Spark's name resolution: none of them is written.
    by_folded: dict[str, list[str]] = {}
    for source_table in by_table:
        try:
            if source_table is not None:
                by_folded.setdefault(config.target_for(source_table).qualified.lower(), []).append(source_table)
        except InvalidIdentifierError:
            continue
    plans = []
    for source_table in sorted(by_table, key=lambda name: (name is None, str(name))):
        table_declarations = by_table[source_table]
        try:
            if source_table is None:
                raise InvalidIdentifierError("change rows have no source_table")
            target = config.target_for(source_table)
            alike = sorted(by_folded[target.qualified.lower()])
            if len(alike) > 1:
                raise InvalidIdentifierError(
                    f"source tables {alike} have targets whose names differ only by case "
                    f"({target.qualified.lower()}): a catalog that folds case would hold them "
                    f"in one table")
        except InvalidIdentifierError as error:
            plans.append(
                TablePlan(
                    source_table=source_table,
                    target=None,
                    rows=sum(d.rows for d in table_declarations),
                    reason=f"{error}; add the table to targets.mapping to name its target",
                )
            )
            continue
        existing = read_existing_target(spark, target)
        # first_keys reads the window's rows: only for a target still to be created (an
        # existing one names its keys, or is refused by _plan_table).
        key_names = existing.key_names if existing is not None else first_keys(source_table)
        plans.append(_plan_table(source_table, target, existing, key_names or (), table_declarations, config))
    return plans


def _plan_table(
    source_table: str,
    target: TableName,
    existing: ExistingTarget | None,
    key_names: tuple[str, ...],
    declarations: list[Declaration],
    config: ApplyConfig,
) -> TablePlan:
    plan = TablePlan(
        source_table=source_table,
        target=target,
        rows=sum(d.rows for d in declarations),
        target_exists=existing is not None,
        target_properties=dict(existing.properties) if existing is not None else {},
        history=config.history_enabled(source_table),
    )
    plan.key_names = tuple(key_names)
    if existing is not None and not existing.key_names:
        # A table airflow-cdc did not create (no key-column property, no ordering-key column):
        # the guarded MERGE could not tell its rows' order, so nothing is written to it.
        plan.reason = (
            f"target table {target.qualified} exists but was not created by airflow-cdc (no table "
            f"property {KEY_COLUMNS_PROPERTY!r}, no _cdc_seq column): map {source_table!r} to another "
            f"target with targets.mapping, or rename or drop the existing table")
        return plan
    if existing is not None:
        plan.key_types = dict(existing.key_types)
        plan.columns = dict(existing.columns)
        plan.existing_columns = dict(existing.columns)
    if not plan.key_names:
        plan.reason = f"no change row of {source_table!r} names key columns (keys is empty): rows cannot be addressed"
        return plan
    for name in plan.key_names:
        problem = _column_name_problem(name)
        if problem:
            plan.reason = f"key column {problem}"
            return plan
    ordered = sorted(
        declarations,
        key=lambda d: (d.first_commit_ts is None, d.first_commit_ts or datetime.min, d.column_types_json or ""),
    )
    _type_keys(plan, ordered)
    seen: set[str | None] = set()
    for declaration in ordered:
        if declaration.column_types_json in seen:
            continue
        seen.add(declaration.column_types_json)
        reason = _apply_declaration(plan, declaration.column_types_json)
        if reason:
            plan.bad_declarations[declaration.column_types_json] = reason
    array_keys = [k for k in plan.key_names if plan.key_types.get(k, "").startswith("array<")]
    if array_keys:
        plan.reason = f"key column(s) {array_keys} of {source_table!r} are arrays: a key must be a scalar"
        return plan
    missing_key_types = [k for k in plan.key_names if k not in plan.key_types]
    if missing_key_types:
        plan.reason = (
            f"key column(s) {missing_key_types} of {source_table!r} have no type in any "
            f"column_types of the window: the change rows must declare their key columns' types"
        )
    return plan


def _type_keys(plan: TablePlan, declarations: list[Declaration]) -> None:
    """Key column types from the first declaration typing each key (even one bad otherwise)."""
    for declaration in declarations:
        try:
            declared = json.loads(declaration.column_types_json or "{}")
        except json.JSONDecodeError:
            continue
        if not isinstance(declared, Mapping):
            continue
        for name in plan.key_names:
            if name in plan.key_types or name not in declared:
                continue
            try:
                plan.key_types[name] = spark_sql_type(declared[name])
            except UnsupportedColumnTypeError:
                continue


def _column_name_problem(name: str) -> str | None:
    try:
        validate_identifier("name", name)
    except InvalidIdentifierError:
        return (f"name {name!r} is not an identifier: use letters, digits and _ (at most 128, not "
                f"starting with a digit; map or rename the source column)")
    lowered = name.lower()
    if lowered.startswith(_RESERVED_PREFIXES) or lowered in _RESERVED_NAMES:
        return (
            f"name {name!r} is reserved for apply's own columns (_cdc_*, __*, valid_from, "
            f"valid_to): rename the source column"
        )
    return None


def _apply_declaration(plan: TablePlan, column_types_json: str | None) -> str | None:
    """Fold one declaration into ``plan``; return why it is bad (then ``plan`` is unchanged)."""
    try:
        declared = json.loads(column_types_json) if column_types_json else {}
    except json.JSONDecodeError:
        declared = None
    if not isinstance(declared, Mapping):
        return "column_types_json is not a JSON object of column names and types"
    columns = dict(plan.columns)
    key_types = dict(plan.key_types)
    lowered = {name.lower(): name for name in (*plan.key_names, *columns)}
    for name, source_type in declared.items():
        problem = _column_name_problem(name)
        if problem:
            return f"column {problem}"
        try:
            spark_type = spark_sql_type(source_type)
        except UnsupportedColumnTypeError as error:
            return f"column {name!r}: {error}"
        clash = lowered.get(name.lower())
        if clash is not None and clash != name:
            return (
                f"column {name!r} differs from column {clash!r} only by case: Spark resolves "
                f"names without case, so both cannot be target columns"
            )
        if name in plan.key_names:
            current = key_types.get(name)
            if current is None:
                key_types[name] = spark_type
            elif merged_spark_type(current, spark_type) != current:
                return (
                    f"key column {name!r} is {current} in the target and is now declared "
                    f"{source_type!r} ({spark_type}): key types cannot change"
                )
            continue
        current = columns.get(name)
        if current is None:
            columns[name] = spark_type
            lowered[name.lower()] = name
            continue
        if name in plan.existing_columns:
            merged = merged_spark_type(current, spark_type)
        else:  # new in this window: its type (a decimal's scale too) is still free to choose
            merged = common_spark_type(current, spark_type)
        if merged is None:
            where = f"in target {plan.target}" if name in plan.existing_columns else "in this window"
            return (
                f"column {name!r} is {current} {where} and is now declared "
                f"{source_type!r} ({spark_type}): an incompatible type change; declare the "
                f"column's type at the source (for Datastream, the pipeline's column_types) or "
                f"alter the target, and replay these dead letters"
            )
        columns[name] = merged
    plan.columns = columns
    plan.key_types = key_types
    return None


# --- DDL -----------------------------------------------------------------------------------
def _quoted(name: str) -> str:
    return f"`{validate_identifier('column name', name)}`"


def prepare_target(spark: SparkSession, plan: TablePlan, stream: str, write_mode: str = "copy-on-write") -> None:
    """Create the target (and its tombstone/history tables) if missing; add and widen columns;
    give them ``write_mode`` (``config.WRITE_MODES``) when the existing target has another."""
    assert plan.target is not None
    keys = [(k, plan.key_types[k]) for k in plan.key_names]
    business = list(plan.columns.items())
    modes = write_mode_properties(write_mode)
    properties = (
        f"'format-version' = '2', '{KEY_COLUMNS_PROPERTY}' = {string(json.dumps(list(plan.key_names)))}, "
        f"'airflow-cdc.stream' = '{validate_identifier('stream id', stream)}', {modes}"
    )
    if plan.target_exists and write_mode_of(plan.target_properties) != write_mode:
        # The mode changed in the config: the tables that exist take it now; the ones
        # created below are created with it.
        set_write_mode(spark, [plan.target, plan.tombstones, plan.history_table], write_mode)
    cdc = [f"{_quoted(n)} {t} COMMENT {string(c)}" for n, t, c in CDC_COLUMNS]
    _create(spark, plan.target, [f"{_quoted(n)} {t}" for n, t in keys + business] + cdc, properties)
    _create(spark, plan.tombstones, [f"{_quoted(n)} {t}" for n, t in keys] + cdc, properties)
    if plan.history:
        history = cdc + [f"{_quoted(n)} {t} COMMENT {string(c)}" for n, t, c in HISTORY_COLUMNS]
        _create(spark, plan.history_table, [f"{_quoted(n)} {t}" for n, t in keys + business] + history, properties)
    # The target's columns were read when the window was planned: nothing to evolve when
    # it existed then with all of them.
    current_target = plan.target_exists and not plan.added_columns and not plan.widened_columns
    tables = ([] if current_target else [plan.target]) + ([plan.history_table] if plan.history else [])
    for table in tables:
        _evolve(spark, table, plan.columns)


# Iceberg's table properties that say how MERGE, UPDATE and DELETE change a table's rows.
WRITE_MODE_PROPERTY = "write.merge.mode"
_WRITE_MODE_PROPERTIES = (WRITE_MODE_PROPERTY, "write.update.mode", "write.delete.mode")


def write_mode_properties(write_mode: str) -> str:
    """TBLPROPERTIES text: every row-level operation of the table in ``write_mode``."""
    if write_mode not in WRITE_MODES:
        raise ValueError(f"write mode {write_mode!r} is not one of {list(WRITE_MODES)}")
    return ", ".join(f"'{key}' = '{write_mode}'" for key in _WRITE_MODE_PROPERTIES)


def write_mode_of(properties: Mapping[str, str]) -> str:
    """The write mode a table's ``properties`` give its MERGEs (Iceberg's default when unset)."""
    return properties.get(WRITE_MODE_PROPERTY, "copy-on-write")


def set_write_mode(spark: SparkSession, tables: Iterable[TableName], write_mode: str) -> None:
    """Those of ``tables`` that exist take ``write_mode`` (a metadata change, no snapshot)."""
    modes = write_mode_properties(write_mode)
    for table in tables:
        if spark.catalog.tableExists(table.qualified):
            spark.sql(f"ALTER TABLE {table.sql} SET TBLPROPERTIES ({modes})")


def table_properties(spark: SparkSession, table: TableName) -> dict[str, str] | None:
    """The table properties of ``table`` (None when it does not exist)."""
    if not spark.catalog.tableExists(table.qualified):
        return None
    return {row.key: row.value for row in spark.sql(f"SHOW TBLPROPERTIES {table.sql}").collect()}


def create_namespaces(spark: SparkSession, tables: list[TableName]) -> None:
    """The namespaces of ``tables``, each created once, before the tables' commit threads.

    The JDBC catalog's ``CREATE NAMESPACE IF NOT EXISTS`` is a check then an insert: two
    threads creating one namespace both pass the check and the second insert into
    ``iceberg_namespace_properties`` fails. Created here first, the threads find it.
    """
    for catalog, namespace in sorted({(t.catalog, t.namespace) for t in tables}):
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{catalog}`.`{namespace}`")


def _create(spark: SparkSession, table: TableName, columns: list[str], properties: str) -> None:
    if spark.catalog.tableExists(table.qualified):  # one catalog lookup, where DDL costs two statements
        return
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{table.catalog}`.`{table.namespace}`")
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table.sql} ({', '.join(columns)}) USING iceberg "
        f"TBLPROPERTIES ({properties})"
    )


def _evolve(spark: SparkSession, table: TableName, columns: Mapping[str, str]) -> None:
    current = {f.name: f.dataType.simpleString() for f in spark.table(table.qualified).schema.fields}
    missing = [f"{_quoted(n)} {t}" for n, t in columns.items() if n not in current]
    if missing:
        spark.sql(f"ALTER TABLE {table.sql} ADD COLUMNS ({', '.join(missing)})")
    for name, spark_type in columns.items():
        if name in current and current[name] != spark_type:
            spark.sql(f"ALTER TABLE {table.sql} ALTER COLUMN {_quoted(name)} TYPE {spark_type}")
